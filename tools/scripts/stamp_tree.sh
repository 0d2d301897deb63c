#!/usr/bin/env bash
# Stamps the working tree with where it came from, for builds made from a copy without .git (the
# GPU machine): writes build-info.json at the repository root with the commit (HEAD), the tree
# hash of the working tree as it is now (tracked and untracked-but-not-ignored files, uncommitted
# changes included: what `git add -A && git write-tree` would give, computed in a scratch index,
# so nothing of the real index or HEAD moves), dirty (that tree differs from HEAD's), the date,
# and the SHA-256 of every file it covers, so a build can tell when the copy changed after stamping.
#
#   tools/scripts/stamp_tree.sh            write build-info.json (run it right before copying the tree)
#   tools/scripts/stamp_tree.sh --stdout   print the JSON only (what CMake bakes in when .git exists)
#
# build-info.json is untracked and NOT ignored on purpose: the GPU machine gets the working tree's
# tracked and untracked-not-ignored files only, so an ignored file would not travel. It is left out
# of its own hashes and of the dirty flag. Do not commit it (a commit would make it stale at once).
set -euo pipefail
ROOT=$(git -C "$(dirname "$0")/../.." rev-parse --show-toplevel)
cd "$ROOT"
SELF=build-info.json
if git ls-files --error-unmatch -- "$SELF" >/dev/null 2>&1; then
  echo "stamp_tree.sh: warning: $SELF is committed; it goes stale with the next commit (git rm --cached $SELF)" >&2
fi
commit=$(git rev-parse HEAD)
head_tree=$(git rev-parse 'HEAD^{tree}')
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
index=$(git rev-parse --git-path index)
# -p keeps the index file's mtime, which git's racy-entry check compares file mtimes against: a
# fresh mtime would let a same-size edit made in the same second as the last `git add` pass as
# unchanged.
[ -f "$index" ] && cp -p "$index" "$scratch/index"
# STAMP_OMIT=PATH (tools/scripts/ab_base.sh: bench/results, left out of a base tree to fit the
# device's transfer): files under PATH that are missing stay as HEAD has them in the tree hash (their
# deletion is not staged), are left out of the hashed file list, and the stamp says "omitted".
omit=()
[ -n "${STAMP_OMIT:-}" ] && omit=(":(exclude)$STAMP_OMIT")
GIT_INDEX_FILE=$scratch/index git add -A -- . ":(exclude)$SELF" "${omit[@]}" >/dev/null
tree=$(GIT_INDEX_FILE=$scratch/index git write-tree)
GIT_INDEX_FILE=$scratch/index git ls-files -z -- . ":(exclude)$SELF" >"$scratch/files"

python3 - "$commit" "$tree" "$head_tree" "$scratch/files" "${1:-}" "$SELF" "${STAMP_OMIT:-}" <<'EOF'
import datetime, hashlib, json, os, sys

commit, tree, head_tree, files_path, mode, self_name, omitted = sys.argv[1:8]
with open(files_path, "rb") as f:
    paths = sorted(p.decode() for p in f.read().split(b"\0") if p)
# Plain files only (a submodule is a folder), in byte order: CMake recomputes the same string.
paths = [p for p in paths if os.path.isfile(p) and not os.path.islink(p)]
lines = []
for p in paths:
    with open(p, "rb") as f:
        lines.append(f"{hashlib.sha256(f.read()).hexdigest()}  {p}\n")
info = {
    "commit": commit,
    "dirty": tree != head_tree,
    "tree": tree,
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "source": "stamp_tree.sh",
    "content_sha256": hashlib.sha256("".join(lines).encode()).hexdigest(),
    "files": paths,
}
if omitted:
    info["omitted"] = omitted
text = json.dumps(info, indent=1) + "\n"
if mode == "--stdout":
    sys.stdout.write(text)
else:
    with open(self_name, "w") as f:
        f.write(text)
    print(f"{self_name}: commit {commit[:12]}{' (dirty)' if info['dirty'] else ''}, tree {tree[:12]}, "
          f"{len(paths)} files" + (f" ({omitted} omitted)" if omitted else ""))
EOF

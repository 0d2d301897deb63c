#!/usr/bin/env bash
# The base tree of a two-commit A/B: commit BASE unpacked into DIR (default .ab/base, ignored,
# carried to the GPU machine with the call) with its own build-info.json, stamped from a scratch
# worktree of BASE, so the base build records BASE (clean) instead of the enclosing checkout's
# commit (cmake/moekit_build_info.cmake uses git only at the top of a work tree).
#
#   tools/scripts/ab_base.sh BASE [DIR]
#   then: cmake -S DIR -B build/base ... (tools/scripts/ab_bench.sh says how the A/B runs)
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,8p' "$0" >&2
  exit 2
fi
BASE=$1
ROOT=$(git -C "$(dirname "$0")/../.." rev-parse --show-toplevel)
DIR=${2:-$ROOT/.ab/base}
commit=$(git -C "$ROOT" rev-parse --verify "$BASE^{commit}")
scratch=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$scratch/wt" >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
git -C "$ROOT" worktree add --detach -q "$scratch/wt" "$commit"
# BASE's own stamp_tree.sh (it stamps the work tree it sits in); a BASE without one is left unstamped.
# bench/results/ (the recorded runs, tens of MB) is left out of DIR where BASE's stamp_tree.sh can say
# so (STAMP_OMIT): the working tree and DIR together must fit the device's 64 MiB transfer, and the
# base build then still records BASE, clean, with "omitted" in its stamp. An older BASE is copied whole.
OMIT=bench/results
STAMP=$scratch/wt/tools/scripts/stamp_tree.sh
if [ -f "$STAMP" ] && grep -q STAMP_OMIT "$STAMP"; then
  rm -rf "${scratch:?}/wt/$OMIT"
  STAMP_OMIT=$OMIT bash "$STAMP" >/dev/null
else
  OMIT=
  [ -f "$STAMP" ] && bash "$STAMP" >/dev/null
fi
rm -rf "$DIR"
mkdir -p "$DIR"
if [ -n "$OMIT" ]; then
  git -C "$ROOT" archive "$commit" | tar -x -C "$DIR" --exclude="$OMIT"
else
  git -C "$ROOT" archive "$commit" | tar -x -C "$DIR"
fi
# A .git file that points nowhere: git then finds no work tree in DIR, so a BASE older than the
# top-of-work-tree check in moekit_build_info.cmake also reads its build-info.json rather than the
# enclosing checkout's git.
echo "gitdir: /nonexistent/moekit-ab-base" >"$DIR/.git"
if [ -f "$scratch/wt/build-info.json" ]; then
  cp "$scratch/wt/build-info.json" "$DIR/build-info.json"
else
  echo "ab_base.sh: warning: could not stamp $commit; its build will record 'unknown'" >&2
fi
echo "ab_base.sh: $DIR holds $(git -C "$ROOT" rev-parse --short "$commit") ($(ls "$DIR" | wc -l) entries, build-info.json: $([ -f "$DIR/build-info.json" ] && echo yes || echo no))"

#!/usr/bin/env bash
# Packs a results folder into one archive, for machines that hand back only a few files of it
# (the device machines moekit's developers borrow return at most 8 files from $OUT; an A/B of two
# repeats alone writes 9, and the B side's JSON was what got left behind, sessions 52-53).
#
#   tools/scripts/pack_out.sh [DIR]          (DIR defaults to $OUT)
#
# Everything under DIR goes into DIR/out.tar.gz (paths relative to DIR) and the originals are
# removed, except copies of up to 7 small summaries (64 KB at most) kept beside the archive for a
# quick look, in this order: every compare.md, *-report.md and summary.txt (a/b/compare.md is kept
# as a-b-compare.md), then the *.md and *.txt files at DIR's top level. Unpack with
# `tar xzf out.tar.gz -C SOMEWHERE`. Running it again folds what was added since into a new archive
# (the kept copies, listed in the archive's .pack_kept, are dropped first).
set -euo pipefail
DIR=${1:-${OUT:?pack_out.sh: give a folder or set OUT}}
[ -d "$DIR" ] || { echo "pack_out.sh: $DIR is not a folder" >&2; exit 2; }
cd "$DIR"
if [ -f out.tar.gz ]; then
  if tar xzf out.tar.gz .pack_kept 2>/dev/null; then
    while IFS= read -r k; do rm -f -- "$k"; done < .pack_kept
  fi
  tar xzf out.tar.gz
  rm -f out.tar.gz .pack_kept
fi
mapfile -t files < <(find . -type f | sed 's#^\./##' | sort)
[ ${#files[@]} -eq 0 ] && { echo "pack_out.sh: $DIR is empty"; exit 0; }
# The summaries to keep, by priority.
cand=()
for pat in '*compare.md' '*-report.md' '*summary.txt'; do
  for f in "${files[@]}"; do [[ "$f" == $pat ]] && cand+=("$f"); done
done
for f in "${files[@]}"; do [[ "$f" != */* && ( "$f" == *.md || "$f" == *.txt ) ]] && cand+=("$f"); done
keep=()
declare -A seen=()
for f in "${cand[@]}"; do
  [ ${#keep[@]} -ge 7 ] && break
  [ -n "${seen[$f]:-}" ] && continue
  seen[$f]=1
  [ "$(stat -c %s "$f")" -le 65536 ] && keep+=("$f")
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/keep"
: > .pack_kept
for f in "${keep[@]}"; do
  cp "$f" "$tmp/keep/${f//\//-}"
  echo "${f//\//-}" >> .pack_kept
done
tar czf "$tmp/out.tar.gz" -- .pack_kept "${files[@]}"
find . -mindepth 1 -delete
mv "$tmp/out.tar.gz" .
[ ${#keep[@]} -gt 0 ] && mv "$tmp"/keep/* .
echo "pack_out.sh: ${#files[@]} files into $DIR/out.tar.gz; kept beside it: ${#keep[@]} summaries"

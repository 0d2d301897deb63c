#!/usr/bin/env bash
# Same-run A/B of two moekit-bench variants on one GPU: A, B, A, B, ... (interleaved, so drift and
# the GPU's state hit both alike), then tools/scripts/bench_compare.py over the JSON files.
#
#   tools/scripts/ab_bench.sh OUT_DIR REPEATS "A command" "B command" BENCH_ARGS...
#
# A and B are command prefixes that end with a moekit-bench binary, e.g.
#   one build, an environment switch:
#     ab_bench.sh $OUT/ab 2 "env MOEKIT_PDL=0 build/cuda-release/tools/bench/moekit-bench" \
#         "build/cuda-release/tools/bench/moekit-bench" --preset all --tp 1,8 --tokens 1..64
#   two commits: a second tree in an ignored folder of the checkout, carried to the device
#   machine with the call (`tools/scripts/ab_base.sh BASE`: BASE unpacked into .ab/base with its
#   own build-info.json, so the base build records BASE; `.ab/` in .gitignore, carry [".deps",
#   ".ab/base"]), both built there. Not a `git worktree`:
#   its .git file makes the carried copy bring a git directory along, and the build's
#   provenance then reads that stale git instead of build-info.json (2026-12-01: a B build of
#   a tree stamped at 91e5b36 recorded itself as 4e8a63a, dirty):
#     cmake -S .ab/base -B build/base ... && cmake --build build/base --target moekit-bench
#     ab_bench.sh $OUT/ab 2 build/base/tools/bench/moekit-bench \
#         build/cuda-release/tools/bench/moekit-bench --preset all --tp 8 --tokens 512..8192
# Writes OUT_DIR/a-<i>.json, b-<i>.json and their logs, and OUT_DIR/compare.md.
set -uo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,20p' "$0" >&2
  exit 2
fi
OUT_DIR=$1 REPEATS=$2 A=$3 B=$4
shift 4
DIR=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT_DIR"
FAILED=0
for i in $(seq 1 "$REPEATS"); do
  for v in a b; do
    cmd=$A
    [ $v = b ] && cmd=$B
    echo "=== [$v-$i] $cmd $* --json $OUT_DIR/$v-$i.json"
    # shellcheck disable=SC2086  # the prefix is meant to split into words
    $cmd "$@" --json "$OUT_DIR/$v-$i.json" >"$OUT_DIR/$v-$i.log" 2>&1 || { echo "    failed: $OUT_DIR/$v-$i.log"; FAILED=1; }
  done
done
[ $FAILED -eq 0 ] || exit 1
python3 "$DIR/bench_compare.py" --a "$OUT_DIR"/a-*.json --b "$OUT_DIR"/b-*.json --points | tee "$OUT_DIR/compare.md"

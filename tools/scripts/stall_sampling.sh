#!/usr/bin/env bash
# Per-instruction warp-stall sampling of one moekit kernel launch under moekit-bench, with the
# stall_report.py summary (where the warps wait, which instructions issue): the method that found
# the token-major epilogue costs (docs/perf.md).
#   tools/scripts/stall_sampling.sh BENCH KERNEL_REGEX LAUNCH_SKIP BENCH_ARGS...
# e.g. GEMM2 (the second token-major launch) of qwen3-30b TP8 at M = 8192:
#   tools/scripts/stall_sampling.sh build/cuda-release/tools/bench/moekit-bench tokmajor 1 \
#       --preset qwen3-30b-a3b --tp 8 --tokens 8192
# Writes $OUT (or /tmp)/stalls-<regex>-<skip>.csv and prints the report. Clocks are left alone.
set -euo pipefail
BENCH=$1 REGEX=$2 SKIP=$3
shift 3
DIR=$(cd "$(dirname "$0")" && pwd)
CSV=${OUT:-/tmp}/stalls-${REGEX}-${SKIP}.csv
ncu --clock-control none --section SourceCounters --page source --print-source sass --csv \
    -k "regex:$REGEX" --launch-skip "$SKIP" --launch-count 1 \
    "$BENCH" "$@" --iters 1 --backend cuda >"$CSV" 2>&1
python3 "$DIR/stall_report.py" "$CSV"

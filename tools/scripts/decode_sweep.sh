#!/usr/bin/env bash
# The decode path's same-run sweep (docs/decode.md): the phase timer, then moekit-bench with the
# decode path forced next to the previous auto choice (MOEKIT_DECODE=0 keeps auto off decode) at
# the given presets, TP degrees, schemes and token counts, correctness check on; then the report
# against BRIEF §4's target (tools/scripts/target_report.py). Run after gpu_check.sh's build.
#
#   tools/scripts/decode_sweep.sh OUT [PRESETS] [TPS] [TOKENS] [SCHEMES] [PATHS]
#   defaults: all presets, TP 8, tokens 1..16, bf16, paths decode,auto
set -u
cd "$(dirname "$0")/../.."
OUT=${1:?usage: decode_sweep.sh OUT [PRESETS] [TPS] [TOKENS] [SCHEMES] [PATHS]}
PRESETS=${2:-all}
TPS=${3:-8}
TOKENS=${4:-1..16}
SCHEMES=${5:-bf16}
PATHS=${6:-decode,auto}
BUILD=${MOEKIT_BUILD_DIR:-build/cuda-release}
mkdir -p "$OUT"
if [ "${MOEKIT_PHASES:-1}" != 0 ]; then
  timeout 120 "$BUILD/tests/moekit_cuda_tests" --gtest_filter='Sm90Decode.PhaseBreakdown' 2>&1 |
    grep -E "phases|OK|FAILED" >"$OUT/phases.log"
  cat "$OUT/phases.log"
fi
MOEKIT_DECODE=0 timeout "${MOEKIT_T_SWEEP:-400}" "$BUILD/tools/bench/moekit-bench" --backend cuda \
  --preset "$PRESETS" --tp "$TPS" --tokens "$TOKENS" --scheme "$SCHEMES" --path "$PATHS" \
  --json "$OUT/sweep.json" >"$OUT/sweep.log" 2>&1
echo "moekit-bench rc=$? ($(grep -c 'CHECK FAILED' "$OUT/sweep.log") check failures)"
python3 tools/scripts/target_report.py "$OUT/sweep.json" | tee "$OUT/target.txt"

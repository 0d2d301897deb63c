#!/usr/bin/env bash
# s128 c1 (session 83): main's first run on an H200 since 8bedaec. Everything landed in sessions
# 81-82 (Swap-AB plain kernels, permutation-only routing, the __fmul_rn epilogue, the router's
# gpt-oss range) ran only on H100s. This call: gpu_check.sh's configure, build and whole GPU suite,
# then the TP8 grid (bf16 + fp8_per_tensor) against this GPU's last and the TP1 grid against its
# last, while LIMIT allows. c2 (the same warm machine, the build reused) runs the sanitizers and the
# s127 A/Bs. carry [".deps", ".ab/mid"]; LIMIT seconds (default 590).
set -u
LIMIT=${LIMIT:-590}
source tools/scripts/device_call.sh
MOEKIT_STEPS=configure,build,gpu-suite MOEKIT_T_GPU=${T_GPU:-300} bash tools/scripts/gpu_check.sh "$O/b" >"$O/check.txt" 2>&1
grep -E "^(configure|build|gpu-suite) |gpu suite:|Failed|Timeout|ptxas:" "$O/check.txt" | head -n 20
[ -x "$BB" ] || { echo "no build"; finish; exit 1; }
echo "checked (left $(left)s)"
[ "$(left)" -gt 50 ] && grid_tp8
if grep -q H200 "$O/gpu.txt"; then PREV1=bench/results/2026-12-06-1e58526-h200-grid-tp1.json
else PREV1=bench/results/2026-12-08-409a3a9-h100-s126-grid-tp1.json; fi
[ "$(left)" -gt 90 ] && grid_tp1 "$PREV1"
finish

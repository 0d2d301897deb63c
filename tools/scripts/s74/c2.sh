#!/usr/bin/env bash
# Branch s74's second call, after the fault-record fix (decode and token-major record bad ids
# after the CTA's vote, __syncthreads_or, as expert_mlp did: the quads give a thread other slots
# than record_faults' own; Sm90Faults.DebugModeRaisesFromTheCall failed on decode in c1):
#   1. gpu_check.sh: configure, build, the whole GPU suite, memcheck and racecheck on its subset;
#   2. memcheck on Sm90SlotRouting.* and Sm90Faults.*;
#   3. the TP8 grid against the H100 grid of f5957bc (session 62), as time allows.
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
MOEKIT_STEPS=configure,build,gpu-suite,memcheck,racecheck MOEKIT_T_GPU=240 bash tools/scripts/gpu_check.sh "$O/check" >"$O/check.txt" 2>&1
grep -E "^(configure|build|gpu-suite|memcheck|racecheck) |gpu suite:|ptxas" "$O/check.txt" | head -8
grep -E "\(Failed\)|\*\*\*Failed|Timeout" "$O/check/gpu_tests.log" | head -10
echo "suite done (left $(left)s)"
[ -x "$BB" ] || { finish; exit 1; }
sanitize memcheck "Sm90SlotRouting.*:Sm90Faults.*" 60
grid_tp8 bench/results/2026-12-06-f5957bc-h100-s68-grid-tp8.json
finish

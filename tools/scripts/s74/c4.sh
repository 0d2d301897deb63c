#!/usr/bin/env bash
# Branch s74's fourth call: the quads out of line (map_and_count_quads, __noinline__), so the code
# the kernels run for calls of one scalar round (up to 640 slots in expert_mlp) is laid out as on
# main. c3 (the quads inline, only past one round) read bf16 M = 6..32 0.974-0.994x against main in
# the same run, on code that runs the same instructions as main's there.
#   1. main's moekit-bench (.ab/mid) beside; build; the routing, fault, token-major route, decode
#      and expert_mlp tests; memcheck on Sm90SlotRouting.*;
#   2. A/B main -> tree, auto, qwen3-30b TP8 M = 6..256 both schemes, and qwen3-235b / deepseek-v3
#      TP8 M = 128, 256 (token-major's 384 threads take the quads past 1536 slots), two repeats;
#   3. the TP8 grid against the H100 grid of f5957bc.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid and stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SlotRouting.*:Sm90Faults.*:Sm90TokmajorRoute.*:*Decode*:Sm90ExpertMlp.*:-*PhaseBreakdown*" 120
sanitize memcheck "Sm90SlotRouting.*" 60
wait_main_build || { echo "no main build"; tail -3 $O/mid-build.log; finish; exit 1; }
echo "main built (left $(left)s)"
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
REPS=2 AB_SECONDS=150 ab q30 "$MB" "$BB" $CHK --preset qwen3-30b-a3b --tokens 6,8,12,16,32,64,128,256 --scheme bf16,fp8_per_tensor
REPS=2 AB_SECONDS=120 ab big "$MB" "$BB" $CHK --preset qwen3-235b-a22b,deepseek-v3 --tokens 128,256 --scheme bf16,fp8_per_tensor
grid_tp8 bench/results/2026-12-06-f5957bc-h100-s68-grid-tp8.json
phase_tables MOEKIT_EXPERT_MLP_LEAN_GATHER 1
finish

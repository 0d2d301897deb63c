#!/usr/bin/env bash
# Branch s74's third call: the quads only past one scalar round (P > 4 x threads), so calls of up
# to 640 slots (expert_mlp) route as on main. c2's grid had qwen3-30b fp8 M = 16 and bf16 M = 8
# 0.95-0.96x against session 62's grid (another run): this A/B is the same-run answer.
#   1. main's moekit-bench (.ab/mid) beside; build; Sm90SlotRouting.*, Sm90Faults.*, the token-major
#      route and decode tests;
#   2. A/B main -> tree, auto, qwen3-30b TP8 M = 6..256, both schemes, two repeats;
#   3. the TP8 grid against the H100 grid of f5957bc.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid and stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SlotRouting.*:Sm90Faults.*:Sm90TokmajorRoute.*:*Decode*:Sm90ExpertMlp.*:-*PhaseBreakdown*" 120
wait_main_build || { echo "no main build"; tail -3 $O/mid-build.log; finish; exit 1; }
echo "main built (left $(left)s)"
REPS=2 AB_SECONDS=150 ab q30 "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset qwen3-30b-a3b --tokens 6,8,12,16,32,64,128,256 --scheme bf16,fp8_per_tensor
grid_tp8 bench/results/2026-12-06-f5957bc-h100-s68-grid-tp8.json
finish

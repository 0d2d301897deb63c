#!/usr/bin/env bash
# Branch s74's device call: the in-kernel routing's ids as 16-byte quads, one DRAM round up to
# 16 x threads slots (common/slot_routing.cuh map_and_count; expert_mlp, token-major's routed
# GEMM1 and decode all call it), against main:
#   1. main's moekit-bench built beside (.ab/mid); this tree built; the new Sm90SlotRouting test
#      and the suites of the three kernels' callers; memcheck on the new test;
#   2. A/B main -> tree, auto, TP8 M = 32..256 (the rounds the change removes start past 640 slots
#      in expert_mlp, 1536 in token-major), qwen3-30b, qwen3-235b, deepseek-v3, both schemes;
#   3. the expert_mlp phase table (routing entry -> tables at M = 256: 4.9 µs on main).
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid and stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SlotRouting.*:Sm90ExpertMlp.*:Sm90Dispatch.*:Sm90TokmajorRoute.*:*Decode*:Sm90Faults.*:Sm90Fuzz.*:-*PhaseBreakdown*" 170
sanitize memcheck "Sm90SlotRouting.*" 60
wait_main_build || { echo "no main build"; tail -3 $O/mid-build.log; finish; exit 1; }
echo "main built (left $(left)s)"
REPS=2 AB_SECONDS=150 ab routing "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset qwen3-30b-a3b,qwen3-235b-a22b,deepseek-v3 --tokens 32,64,128,256 --scheme bf16,fp8_per_tensor
phase_tables MOEKIT_EXPERT_MLP_LEAN_GATHER 1
finish

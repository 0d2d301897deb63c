#!/usr/bin/env bash
# Branch s68's device call: the producer's lean gather (kernel_sm90.cuh: each token row's source
# once a unit, only the unit's live groups of 4 rows copied a stage) against the predicated gather
# of every row (MOEKIT_EXPERT_MLP_LEAN_GATHER=0, main's code) in the same build:
#   1. the expert_mlp GPU tests (LeanGatherGivesTheSameBits among them), memcheck on it;
#   2. the A/B, expert_mlp forced: qwen3-30b TP8 M = 8..256 both schemes, qwen3-235b TP8
#      (clusters of 2) M = 32..256, two repeats, the check on;
#   3. the phase tables both ways (GEMM1's time a unit is what the gather should move).
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90ExpertMlp.*:-Sm90ExpertMlp.PhaseBreakdown" 150
timeout 100 compute-sanitizer --tool memcheck $B/tests/moekit_cuda_tests \
  --gtest_filter=Sm90ExpertMlp.LeanGatherGivesTheSameBits >$O/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.log | tail -1) (left $(left)s)"
BA="--backend cuda --tp 8 --path expert_mlp --check --no-baseline --no-host-time"
REPS=2 AB_SECONDS=150 ab q30 "env MOEKIT_EXPERT_MLP_LEAN_GATHER=0 $BB" "$BB" $BA --preset qwen3-30b-a3b \
  --tokens 8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
REPS=2 AB_SECONDS=100 ab q235 "env MOEKIT_EXPERT_MLP_LEAN_GATHER=0 $BB" "$BB" $BA --preset qwen3-235b-a22b \
  --tokens 32,64,256 --scheme bf16,fp8_per_tensor
for g in 0 1; do
  MOEKIT_EXPERT_MLP_LEAN_GATHER=$g timeout 60 $B/tests/moekit_cuda_tests --gtest_filter=Sm90ExpertMlp.PhaseBreakdown \
    >$O/phases-lean$g.log 2>&1
  echo "phases lean=$g rc=$? (left $(left)s)"
done
finish

#!/usr/bin/env bash
# Branch s71's device call: the one-CTA form's GEMM2 as Swap-AB m64n8 tiles for units of <= 8 rows
# (w2's rows as M, the unit's tokens as N; every warp stores its columns), on by default, against
# MOEKIT_EXPERT_MLP_SWAP_GEMM2=0 (m64n256 tiles, main's GEMM2) in the same build:
#   1. build; Sm90ExpertMlp.* (SwapGemm2MatchesReference prints how many values differ between the
#      two; SameBitsAsTheTokenMajorChain at M = 16 runs the swapped tiles); memcheck on the new test;
#   2. the A/B, auto, qwen3-30b TP8 M = 6..256 both schemes, two repeats;
#   3. the phase tables both ways (GEMM2's MMAs and stores a unit).
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90ExpertMlp.*:-Sm90ExpertMlp.PhaseBreakdown" 60
grep "\[ swap" $O/tests.log
timeout 40 compute-sanitizer --tool memcheck $B/tests/moekit_cuda_tests \
  --gtest_filter=Sm90ExpertMlp.SwapGemm2MatchesReference >$O/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.log | tail -1) (left $(left)s)"
REPS=2 AB_SECONDS=60 ab q30-swap "env MOEKIT_EXPERT_MLP_SWAP_GEMM2=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset qwen3-30b-a3b --tokens 6,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
for g in 0 1; do
  MOEKIT_EXPERT_MLP_SWAP_GEMM2=$g timeout 30 $B/tests/moekit_cuda_tests --gtest_filter=Sm90ExpertMlp.PhaseBreakdown \
    >$O/phases-swap$g.log 2>&1
  echo "phases swap=$g rc=$? (left $(left)s)"
done
finish

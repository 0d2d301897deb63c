#!/usr/bin/env bash
# Branch s71's device call: the one-CTA form's GEMM2 as Swap-AB tiles for small units (w2's rows as
# M, the unit's tokens as N: m64n8 up to 8 rows, m64n16 up to 16; every warp stores its columns),
# on by default, against MOEKIT_EXPERT_MLP_SWAP_GEMM2=0 (m64n256 tiles, main's GEMM2) and =8 (m64n8
# only) in the same build:
#   1. build; Sm90ExpertMlp.* (SwapGemm2MatchesReference prints how many values differ between the
#      forms; SameBitsAsTheTokenMajorChain at M = 16 / 64 runs the swapped tiles); memcheck on the
#      new test;
#   2. the A/B, auto, qwen3-30b TP8 M = 6..256 both schemes, two repeats: 0 against 16, 0 against 8;
#   3. the phase tables with 0 and 16 (GEMM2's MMAs and stores a unit).
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90ExpertMlp.*:-Sm90ExpertMlp.PhaseBreakdown" 80
grep "\[ swap" $O/tests.log
sanitize memcheck Sm90ExpertMlp.SwapGemm2MatchesReference 60
for n in 16 8; do
  REPS=2 AB_SECONDS=60 ab q30-swap-0-$n "env MOEKIT_EXPERT_MLP_SWAP_GEMM2=0 $BB" "env MOEKIT_EXPERT_MLP_SWAP_GEMM2=$n $BB" \
    --backend cuda --tp 8 --no-baseline --no-host-time --check --preset qwen3-30b-a3b --tokens 6,8,16,32,64,128,256 \
    --scheme bf16,fp8_per_tensor
done
phase_tables MOEKIT_EXPERT_MLP_SWAP_GEMM2 0 16
finish

#!/usr/bin/env bash
# Branch s73's first device call: session 62's two prepared patches (s71: the one-CTA form's GEMM2
# as Swap-AB tiles for units of at most 16 rows; s72: the warm pass of the activation's code after
# two GEMM1 stages of a CTA's first unit) built once, each measured against its switch in the same
# build:
#   1. build; Sm90ExpertMlp.* (the review's router read among them); memcheck on the Swap-AB test,
#      racecheck on the warm pass's;
#   2. A/B swap: MOEKIT_EXPERT_MLP_SWAP_GEMM2=0 against 16, the warm pass off both sides;
#   3. A/B warm: MOEKIT_EXPERT_MLP_WARM_ACT=0 against 1, the swap on (its default) both sides;
#   4. the phase tables (swap 0 / 16 with the warm pass off; warm 1 with the swap on).
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90ExpertMlp.*:-Sm90ExpertMlp.PhaseBreakdown" 100
grep "\[ swap" $O/tests.log
sanitize memcheck Sm90ExpertMlp.SwapGemm2MatchesReference 60
cp $O/memcheck.log $O/memcheck-swap.log
sanitize racecheck Sm90ExpertMlp.WarmPassGivesTheSameBits 100
Q="--backend cuda --tp 8 --no-baseline --no-host-time --check --preset qwen3-30b-a3b --tokens 6,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor"
REPS=2 AB_SECONDS=70 ab q30-swap-0-16 "env MOEKIT_EXPERT_MLP_WARM_ACT=0 MOEKIT_EXPERT_MLP_SWAP_GEMM2=0 $BB" \
  "env MOEKIT_EXPERT_MLP_WARM_ACT=0 MOEKIT_EXPERT_MLP_SWAP_GEMM2=16 $BB" $Q
REPS=2 AB_SECONDS=70 ab q30-warm-0-1 "env MOEKIT_EXPERT_MLP_WARM_ACT=0 $BB" "env MOEKIT_EXPERT_MLP_WARM_ACT=1 $BB" $Q
export MOEKIT_EXPERT_MLP_WARM_ACT=0; phase_tables MOEKIT_EXPERT_MLP_SWAP_GEMM2 0 16; unset MOEKIT_EXPERT_MLP_WARM_ACT
phase_tables MOEKIT_EXPERT_MLP_WARM_ACT 1
finish

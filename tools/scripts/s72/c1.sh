#!/usr/bin/env bash
# Branch s72's device call (s71's Swap-AB GEMM2 tiles, then the warm pass on top): the one-CTA
# form's warm pass of the activation's code (after two GEMM1 stages of a CTA's first unit, over
# the partial sums, its writes of the accumulators off), on by default, against
# MOEKIT_EXPERT_MLP_WARM_ACT=0 in the same build:
#   1. build; WarmPassGivesTheSameBits and the rest of Sm90ExpertMlp.*; memcheck and racecheck on
#      WarmPassGivesTheSameBits (the pass reads `red` and writes h before the real pass does);
#   2. the A/B, auto, qwen3-30b TP8 M = 6..256 both schemes, two repeats;
#   3. the phase tables both ways (the activation a unit: 5-7 µs cold; GEMM1 holds the warm pass).
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90ExpertMlp.*:-Sm90ExpertMlp.PhaseBreakdown" 90
grep "\[ swap" $O/tests.log
for tool in memcheck racecheck; do sanitize $tool Sm90ExpertMlp.WarmPassGivesTheSameBits 120; done
REPS=2 AB_SECONDS=60 ab q30-warm "env MOEKIT_EXPERT_MLP_WARM_ACT=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset qwen3-30b-a3b --tokens 6,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
phase_tables MOEKIT_EXPERT_MLP_WARM_ACT 0 1
finish

#!/usr/bin/env bash
# s118 c1: the kPlain one-CTA per-expert MLP kernel (the common per-tensor call's features, silu, no
# biases, the router weight on the output, every A/B switch at its default, fixed at compile time:
# 73.6 KB of code in bf16 / fp16 against the general kernel's 162.0, 81.9 against 208.9 in e4m3,
# 170-178 registers against 254-255; cubin .text sizes and ptxas -v, sm_90a, compiled here).
# Session 79 found that 6.9 KB more code beside the path (the staged y, switched off) cost the
# one-CTA kernel 3-4 µs a call and s117 that 16.5 KB more shared memory did not: this asks whether
# half the code costs less.
# Builds: this tree (gpu_check) and main's moekit-bench (.ab/mid) beside it; the expert_mlp tests
# (PlainKernelGivesTheSameBits among them); A/B main -> tree at qwen3-30b TP8 (forced expert_mlp,
# check on); racecheck and memcheck of the small cases; where the A/B's median gains, the TP8 grid.
# carry [".deps", ".ab/mid"]; LIMIT seconds (default 500).
# Stage: on branch s118, tools/scripts/ab_base.sh main .ab/mid && tools/scripts/stamp_tree.sh.
set -u
LIMIT=${LIMIT:-500}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' 150
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp"
if wait_main_build; then
  AB_SECONDS=150 REPS=2 ab plain "$MB" "$BB" $ARGS \
    --preset qwen3-30b-a3b --tokens 1,2,4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
else
  echo "main's build failed"; tail -5 "$O/mid-build.log"
fi
AB_SECONDS=60 REPS=2 ab switch "env MOEKIT_EXPERT_MLP_PLAIN=0 $BB" "env MOEKIT_EXPERT_MLP_PLAIN=1 $BB" $ARGS \
  --preset qwen3-30b-a3b --tokens 1,8,64 --scheme bf16,fp8_per_tensor
sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 25
sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers' 20
med=$(grep -m1 "^| TP8 M<=256 |" "$O/ab-plain/compare.md" 2>/dev/null | awk -F'|' '{print $4}')
echo "median B/A: $med"
if [ -n "$med" ] && python3 -c "import sys; sys.exit(0 if float('$med') >= 1.005 else 1)" && [ "$(left)" -gt 60 ]; then
  PREV=bench/results/2026-12-07-fade9d4-h100-s117-grid-tp8.json
  grep -q H200 "$O/gpu.txt" && PREV=bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json
  grid_tp8 "$PREV"
fi
finish

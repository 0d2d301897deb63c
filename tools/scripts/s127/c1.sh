#!/usr/bin/env bash
# s127 c1 (prepared in session 82): why qwen3-30b TP8 fp8_per_channel M = 8..256 ran 0.886-0.97x in
# 409a3a9's grid against 2f78ff0's (other H100 runs; docs/perf.md "Session 82"). The points run the
# one-CTA form's general kChannel kernel, whose code grew only 2.5 KB since 2f78ff0 (kernel_code.py
# sizes: 199.6 -> 202.1 KB); the change that reaches it is two w13 boxes a stage (78ba862, measured
# only on bf16 / per-tensor). This call, same run, check on, two repeats a side:
#   1. 2f78ff0's build (.ab/mid: tools/scripts/ab_base.sh 2f78ff0 .ab/mid) against main's, at those
#      points and two controls (qwen3-235b fp8_per_channel M = 16, 64 on the cluster form);
#   2. main with MOEKIT_EXPERT_MLP_TWO_BOXES=0 against main at the same points;
#   3. (while time is left) Swap-AB forced beside auto at TP8 M = 1..8, below.
# First the GPU tests of session 82's test refactor (compiled, not yet run).
# If 1 shows the slowdown and 2 recovers it, the two-box rule should exclude kChannel (params.hpp
# kTwoBoxesDefault, launch_sm90.cu two_boxes()). carry [".deps", ".ab/mid"]; LIMIT seconds (default 480).
set -u
LIMIT=${LIMIT:-480}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
# Session 82's test refactor (expect_bad_switch_throws, permute_only), compiled but not yet GPU-run.
run_tests 'Sm90Permute.PermuteOnlyKernels:Sm90Permute.MultiCtaNeedsChunkCounts:Sm90SwapAbGemm.PlainKernelBitwiseEqualToGeneral:Sm90SwapAbGemm.Gemm2DirectEpilogueBitwiseEqualToStaged' 60
ARGS="--backend cuda --no-baseline --no-host-time --check --tp 8 --scheme fp8_per_channel"
if wait_main_build; then
  AB_SECONDS=110 REPS=2 ab old-main "$MB" "$BB" $ARGS --preset qwen3-30b-a3b --tokens 8,16,32,64,128,256
  AB_SECONDS=50 REPS=2 ab old-main-cluster "$MB" "$BB" $ARGS --preset qwen3-235b-a22b --tokens 16,64
else
  echo "2f78ff0's build failed"; tail -5 "$O/mid-build.log"
fi
AB_SECONDS=$(( $(left) > 200 ? 110 : $(left) / 2 )) REPS=2 ab two-boxes "env MOEKIT_EXPERT_MLP_TWO_BOXES=0 $BB" "$BB" \
  $ARGS --preset qwen3-30b-a3b --tokens 8,16,32,64,128,256
# 3. Swap-AB against auto where the plain Swap-AB kernels now run (at most 16 slots: mixtral M <= 8,
#    qwen3 / deepseek-v3 M <= 2) and auto takes the GEMV kernels: the crossovers were measured
#    before the plain kernels (1.08-1.25x on the TP1 chain, session 82). A path sweep, one pass.
if [ "$(left)" -gt 50 ]; then
  timeout $(( $(left) - 20 )) $BB --backend cuda --no-baseline --no-host-time --check --path auto,swapab \
    --tp 8 --preset mixtral-8x7b,qwen3-235b-a22b,deepseek-v3,qwen3-30b-a3b --tokens 1,2,4,8 \
    --scheme bf16,fp8_per_tensor --json "$O/sweep-swapab-plain.json" >"$O/sweep-swapab-plain.log" 2>&1
  echo "sweep rc=$? (left $(left)s)"
  python3 tools/scripts/path_report.py "$O/sweep-swapab-plain.json" 2>&1 | tail -n 12
fi
finish

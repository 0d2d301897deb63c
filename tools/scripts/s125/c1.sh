#!/usr/bin/env bash
# s125 c1 of 2 (prepared in session 81): the two changes of session 81's tree that gained on the H100
# (run in session 82 on that patch applied to 14be08e, which landed as commit 1664c34; the patch
# file is gone, `git show 1664c34` is it): Swap-AB's kPlain kernels for calls of at
# most 16 rows and the routing kernels' permutation-only instantiations (forced Swap-AB chain at TP1
# fp8 M = 1..4: 1.105x median, 1.004-1.254x; docs/perf.md "Session 81"), plus the fix of the one
# failure that run found (the plain kernel fused the scale product and the bias add into an FMA in
# two fp8 cases with biases: both epilogues now round the product with __fmul_rn). This call: main's
# bench build beside this tree's build, the whole GPU suite (Sm90SwapAbGemm.PlainKernelBitwiseEqualToGeneral,
# Sm90Permute.PermuteOnlyKernels, Sm90Pdl with its fix among it), racecheck / memcheck of the small
# cases, and the A/B main -> tree of the Swap-AB chain at auto's TP1 points (fp8 M = 1, 2, 4 for
# gpt-oss, mixtral, qwen3-235b, deepseek-v3) and at gpt-oss TP8 M = 128, 256 (the routing change alone).
# carry [".deps", ".ab/mid"] (tools/scripts/ab_base.sh main .ab/mid; tools/scripts/stamp_tree.sh);
# LIMIT seconds (default 540).
set -u
LIMIT=${LIMIT:-540}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests '*-Sm90ExpertMlp.PhaseBreakdown' 260
sanitize racecheck 'Sm90SwapAbGemm.PlainSmallForSanitizers' 40
sanitize memcheck 'Sm90SwapAbGemm.PlainSmallForSanitizers:Sm90Permute.PermuteOnlyKernels' 40
ARGS="--backend cuda --no-baseline --no-host-time --check"
if wait_main_build; then
  AB_SECONDS=70 REPS=2 ab chain-tp1 "$MB" "$BB" $ARGS --tp 1 \
    --preset gpt-oss-120b,mixtral-8x7b,qwen3-235b-a22b,deepseek-v3 --tokens 1,2,4 --scheme fp8_per_tensor
  AB_SECONDS=$(( $(left) - 15 )) REPS=2 ab route-tp8 "$MB" "$BB" $ARGS --tp 8 --preset gpt-oss-120b \
    --tokens 128,256 --scheme bf16,fp8_per_tensor
else
  echo "main's build failed"; tail -5 "$O/mid-build.log"
fi
finish

#!/usr/bin/env bash
# s124 c1 of 3 (run in session 81 on an H100, c1 and c2 only: results in docs/perf.md "Session 81"): five prepared kernel changes in one tree
# (tools/scripts/s124/changes.patch on main), one build, each A/B'd against main's own build at
# points only its kernels run (c1: the first; c2: the other three), the sanitizers and the grid (c3).
# Each cuts the code a call's kernel carries beside its path (session 80's plain kernels of the
# per-expert MLP path: 1.06-1.13x median); every general kernel's .text is byte-identical to main's:
#   s119 the token-major kernels' kPlain twins (226-266 -> 48-75 KB; tools/scripts/s119/c1.sh);
#   s120 the per-expert MLP kernel's plain kernels for gpt-oss's call (Plain::kOai: swiglu_oai with
#        both biases; clusters, e4m3 also with w2 as row pairs): 257 -> 103 KB (e4m3 row pairs),
#        187 -> 92 KB (bf16 clusters);
#   s122 Swap-AB's kPlain kernels for calls of at most 16 rows (the wide stage loop only, split 1,
#        the operand's own scale mode, weight on the output, TMA rows, GEMM2's direct epilogue):
#        GEMM1 276 / 278 -> 47.5 / 49.2 KB (bf16 / e4m3), GEMM2 274 -> 30.5 / 31.4 KB;
#   s123 the GEMV CUDA-core kernel's one-token instantiation (M = 1: GEMM1's passes of one token
#        only): e4m3 152 -> 93 KB, bf16 109 -> 65 KB (one-round GEMM2 form 119 -> 76);
#   s124 the routing kernels' permutation-only instantiations (launches without routing, as every
#        fused_experts call's): 80-82 -> 39 KB, the multi-CTA count launch 59-60 -> 15 KB.
# Main also carries the router retune (97905be) not yet run on a GPU: the whole GPU suite here runs
# AutoTakesItInItsRangeAndTheSwitchKeepsItOff with its bounds.
# c1: start main's bench build, build this tree, the whole GPU suite (PlainKernelGivesTheSameBits,
# Sm90TokmajorPlain.BitwiseEqualToGeneral, Sm90SwapAbGemm.PlainKernelBitwiseEqualToGeneral,
# Sm90Dispatch.GemvOneTokenBitwiseEqualToGeneral, Sm90Permute.PermuteOnlyKernels, Preload's counts
# among it), A/B s120 at gpt-oss TP8 on forced expert_mlp (M = 1..256, both schemes).
# carry [".deps", ".ab/mid"] in all three calls; LIMIT seconds (default 470). Stage:
#   git checkout -b s124x main && git apply tools/scripts/s124/changes.patch && git commit -qam s124
#   tools/scripts/ab_base.sh main .ab/mid && tools/scripts/stamp_tree.sh
set -u
LIMIT=${LIMIT:-470}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests '*-Sm90ExpertMlp.PhaseBreakdown' 220
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check"
if wait_main_build; then
  AB_SECONDS=$(( $(left) - 15 )) REPS=2 ab plain-oai "$MB" "$BB" $ARGS --path expert_mlp \
    --preset gpt-oss-120b --tokens 1,4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
else
  echo "main's build failed"; tail -5 "$O/mid-build.log"
fi
finish

#!/usr/bin/env bash
# Branch s96 = s94 + GEMM2's two-consumer form (off by default, MOEKIT_SWAPAB_TWO_WG=1;
# tools/scripts/s96/README.md). One device call for both, ~9.5 min:
#   git checkout s96 (or: git checkout -b s96 main && git apply tools/scripts/s94/ahead.patch &&
#   git apply tools/scripts/s96/two_wg.patch && commit) && tools/scripts/ab_base.sh main .ab/mid &&
#   tools/scripts/stamp_tree.sh; carry [".deps", ".ab/mid"].
#   1. build; the Swap-AB tests (s94's and s96's new ones among them), the preload test; memcheck
#      on the three new tests, racecheck on the many-items one (the warpgroups' ring order);
#   2. A/B MOEKIT_SWAPAB_TWO_WG=0 -> 1 at gpt-oss TP8 M = 16..256, three schemes (s96's effect);
#   3. A/B main -> tree at the same points and TP1 gpt-oss / mixtral M = 16, 64 (s94's effect: the
#      tree's default is s94's code);
#   4. GEMM2's kernel time: main, tree, tree with TWO_WG=1 (Nsight Compute, gpt-oss fp8 M = 64);
#   5. the whole GPU suite if time is left.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SwapAbGemm.*:Preload.*" 150
sanitize memcheck "Sm90SwapAbGemm.Gemm2TwoConsumer*:Sm90SwapAbGemm.RowValuesAheadAndPastKBlocksMatchReference" 90
sanitize racecheck "Sm90SwapAbGemm.Gemm2TwoConsumerWarpgroupsManyItems" 90
REPS=2 AB_SECONDS=110 ab two-wg "$BB" "env MOEKIT_SWAPAB_TWO_WG=1 $BB" --backend cuda --tp 8 --no-baseline --no-host-time \
  --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,bf16,fp8_per_channel
wait_main_build || { echo "no main build"; finish; exit 1; }
REPS=2 AB_SECONDS=100 ab ahead "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,bf16,fp8_per_channel
REPS=2 AB_SECONDS=45 ab ahead-tp1 "$MB" "$BB" --backend cuda --tp 1 --no-baseline --no-host-time --check \
  --preset gpt-oss-120b,mixtral-8x7b --tokens 16,64 --scheme fp8_per_tensor,bf16
for v in main tree two-wg; do
  bin=$BB; [ $v = main ] && bin=$MB
  env MOEKIT_SWAPAB_TWO_WG=$([ $v = two-wg ] && echo 1 || echo 0) timeout 30 ncu --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum -k regex:swapab_sm90_kernel -c 2 $bin --backend cuda \
    --preset gpt-oss-120b --tp 8 --tokens 64 --scheme fp8_per_tensor --iters 1 --no-baseline --no-host-time >"$O/ncu-$v.txt" 2>&1
  echo "ncu $v: $(grep -A8 'swapab_sm90_kernel<' "$O/ncu-$v.txt" | grep -E 'gpu__time' | awk '{print $NF}' | tr '\n' ' ') us (GEMM1 GEMM2; left $(left)s)"
done
if [ $(left) -gt 240 ]; then
  timeout $(( $(left) - 20 )) $B/tests/moekit_cuda_tests >"$O/gpu-suite.log" 2>&1
  echo "gpu suite rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$O/gpu-suite.log" | tr '\n' ' ') (left $(left)s)"
  grep -E "^\[  FAILED" "$O/gpu-suite.log" | head
fi
finish

#!/usr/bin/env bash
# s88 and s89 in one build (session 65's two prepared patches, compiled, not GPU-run):
#   git checkout -b s90 main && git apply tools/scripts/s88/balanced_walk.patch \
#     && git apply tools/scripts/s89/bias_prefetch.patch
# then commit, tools/scripts/ab_base.sh main .ab/mid and tools/scripts/stamp_tree.sh;
# carry [".deps", ".ab/mid"]. ~9.5 min:
#   1. build; the Swap-AB tests, the GEMV dispatch tests, the gpt-oss presets (their new tests
#      Sm90SwapAbGemm.BalancedWalkBitwiseEqualToRoundRobin and
#      Sm90Dispatch.GemvBiasPrefetchBitwiseEqualToColdLoads among them); memcheck on the two;
#   2. A/B MOEKIT_SWAPAB_BALANCED=0 -> default: gpt-oss TP8 M = 16..256 (Swap-AB), fp8 per tensor /
#      channel, bf16; TP1 gpt-oss / mixtral M = 16, 64;
#   3. A/B MOEKIT_GEMV_BIAS_PREFETCH=0 -> default: gpt-oss TP8 M = 1..8 (GEMV), bf16 and fp8;
#   4. main -> tree at the GEMV points whose kernel s89 recompiled with more spill (the tensor-core
#      kernel's general e4m3 form, ptxas 100 -> 116 bytes: fp8_per_channel at M <= 8, gpt-oss fp8);
#   5. GEMM2's kernel time and SM activity both ways at gpt-oss fp8 M = 64 (Nsight Compute).
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SwapAbGemm.*:Sm90Dispatch.Gemv*:*PresetGptOss120b*" 200
sanitize memcheck "Sm90SwapAbGemm.BalancedWalkBitwiseEqualToRoundRobin:Sm90Dispatch.GemvBiasPrefetchBitwiseEqualToColdLoads" 90
REPS=2 AB_SECONDS=100 ab balanced "env MOEKIT_SWAPAB_BALANCED=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,fp8_per_channel,bf16
REPS=2 AB_SECONDS=60 ab balanced-tp1 "env MOEKIT_SWAPAB_BALANCED=0 $BB" "$BB" --backend cuda --tp 1 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b,mixtral-8x7b --tokens 16,64 --scheme fp8_per_tensor,bf16
REPS=2 AB_SECONDS=60 ab bias-prefetch "env MOEKIT_GEMV_BIAS_PREFETCH=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b --tokens 1,2,4,8 --scheme fp8_per_tensor,bf16
wait_main_build && REPS=2 AB_SECONDS=80 ab main-tree-gemv "$MB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset qwen3-30b-a3b,deepseek-v3,gpt-oss-120b --tokens 1,4,8 --scheme fp8_per_channel,fp8_per_tensor
for v in 0 1; do
  [ $(left) -gt 40 ] || break
  MOEKIT_SWAPAB_BALANCED=$v timeout 30 ncu --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes.sum,sm__cycles_active.avg,gpc__cycles_elapsed.max \
    -k regex:swapab -c 2 $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 64 --scheme fp8_per_tensor --iters 1 \
    --no-baseline --no-host-time >"$O/ncu-balanced-$v.txt" 2>&1
  echo "ncu balanced=$v rc=$? (left $(left)s)"; grep -E "swapab_sm90_kernel|gpu__time|sm__cycles|gpc__cycles" "$O/ncu-balanced-$v.txt" | head -8
done
finish

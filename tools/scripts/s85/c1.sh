#!/usr/bin/env bash
# s82 and s84 in one build (session 64's two prepared patches apply together on main:
#   git checkout -b s85 main && git apply tools/scripts/s82/cooperative_quant.patch \
#     && git apply tools/scripts/s84/rows8_pairs.patch
# then commit and tools/scripts/stamp_tree.sh; carry [".deps"]). ~8 min:
#   1. build; the new tests (Sm90Quant.PerTensorCooperativeMatchesCpuBitwise,
#      Sm90SwapAbGemm.EightByteRowPairsMatchTheCopies) with their suites, the per-expert MLP fp8
#      tests, the fp8 per-tensor fused-experts combos, the gpt-oss presets, Preload.*, Sm90Fuzz.*;
#      memcheck on the two new tests;
#   2. A/B MOEKIT_QUANT_COOP=0 -> default: fp8_per_tensor at qwen3-30b, qwen3-235b, mixtral TP8;
#   3. A/B MOEKIT_SWAPAB_ROWS8_TMA=0 -> default: gpt-oss TP8 M = 16..256, fp8 per tensor / channel;
#   4. GEMM2's kernel time both ways at gpt-oss fp8 M = 64 (Nsight Compute).
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90Quant.*:Sm90SwapAbGemm.*:Sm90ExpertMlp.QuantOneCtaGivesTheSameBits:Sm90ExpertMlp.Fp8PerTensorMatchesReference:*AllCombosFp8PerTensor*:*TileBoundaryMFp8PerTensor*:*PresetGptOss120b*:Preload.*:Sm90Fuzz.*:Sm90Dispatch.ForcedPathThatCannotRunIsNotSupported" 200
sanitize memcheck "Sm90Quant.PerTensorCooperativeMatchesCpuBitwise:Sm90SwapAbGemm.EightByteRowPairsMatchTheCopies" 90
REPS=2 AB_SECONDS=90 ab coop "env MOEKIT_QUANT_COOP=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset qwen3-30b-a3b,qwen3-235b-a22b,mixtral-8x7b --tokens 16,64,256 --scheme fp8_per_tensor
REPS=2 AB_SECONDS=110 ab gptoss-rows8 "env MOEKIT_SWAPAB_ROWS8_TMA=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,fp8_per_channel
for v in 0 1; do
  [ $(left) -gt 40 ] || break
  MOEKIT_SWAPAB_ROWS8_TMA=$v timeout 35 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes.sum \
    -k regex:swapab -c 2 $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 64 --scheme fp8_per_tensor --iters 1 \
    --no-baseline --no-host-time >"$O/ncu-rows8-tma-$v.txt" 2>&1
  echo "ncu rows8_tma=$v rc=$? (left $(left)s)"; grep -E "swapab_sm90_kernel|gpu__time|dram__bytes" "$O/ncu-rows8-tma-$v.txt" | head -8
done
finish

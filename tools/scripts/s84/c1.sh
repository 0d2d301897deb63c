#!/usr/bin/env bash
# Branch s84's device call: Swap-AB GEMM2's 8-byte weight rows (gpt-oss fp8 TP8, 360-byte w2 rows)
# through TMA as row pairs, a tile one parity of 64 pairs (the odd tiles' K 8 bytes late, from the
# 16-byte boundary before the odd row, the token rows copied 8 bytes late to match), against
# MOEKIT_SWAPAB_ROWS8_TMA=0 (the producer's 8-byte copies) in the same build:
#   1. build; Sm90SwapAbGemm.* (EightByteRowPairsMatchTheCopies: both forms against the reference,
#      the even rows bit for bit), the gpt-oss presets and the fuzz suite; memcheck on the new test;
#   2. A/B copies -> pairs, auto, gpt-oss TP8 M = 16..256, fp8_per_tensor and fp8_per_channel;
#   3. GEMM2's kernel time and DRAM bytes both ways (Nsight Compute), gpt-oss fp8 M = 64.
#   carry [".deps"]; tools/scripts/stamp_tree.sh first. ~5 min.
set -u
LIMIT=${LIMIT:-400}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SwapAbGemm.*:*PresetGptOss120b*:Sm90Fuzz.*:Sm90Dispatch.ForcedPathThatCannotRunIsNotSupported" 150
sanitize memcheck "Sm90SwapAbGemm.EightByteRowPairsMatchTheCopies" 90
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

#!/usr/bin/env bash
# Session 65: why Swap-AB's GEMM2 on gpt-oss fp8 TP8 (w2 rows of 360 bytes) streams at ~1.8 TB/s
# whichever producer feeds it (s85: the 8-byte cp.async copies 69.8 µs, s84's TMA row pairs 66.9 µs,
# 120 MB, M = 64) while the same call's GEMM1 reads 2.5 TB/s. On branch s85 (main + s82 + s84):
#   1. Nsight Compute's speed-of-light, memory, occupancy, launch and warp-state sections of both
#      swapab launches at fp8 (copies, row pairs) and bf16 (720-byte rows through TMA);
#   2. the warp-stall sampling of GEMM2 (launch-skip 1) in the same three forms.
# carry [".deps"]; tools/scripts/stamp_tree.sh first. ~5 min.
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
ARGS="--preset gpt-oss-120b --tp 8 --tokens 64 --iters 1 --no-baseline --no-host-time"
for form in fp8-copies fp8-pairs bf16; do
  case $form in fp8-copies) env="MOEKIT_SWAPAB_ROWS8_TMA=0"; s=fp8_per_tensor;;
                fp8-pairs) env="MOEKIT_SWAPAB_ROWS8_TMA=1"; s=fp8_per_tensor;; bf16) env=; s=bf16;; esac
  env $env timeout 80 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    -k regex:swapab -c 2 $BB --backend cuda --scheme $s $ARGS >"$O/ncu-swapab-$form.txt" 2>&1
  echo "ncu $form rc=$? (left $(left)s)"
  grep -E "swapab_sm90_kernel|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Shared Memory Config|Block Limit|Warp Cycles Per Issued|Issue Slots Busy|No Eligible" \
    "$O/ncu-swapab-$form.txt" | head -30
done
for form in fp8-copies fp8-pairs bf16; do
  case $form in fp8-copies) env="MOEKIT_SWAPAB_ROWS8_TMA=0"; s=fp8_per_tensor;;
                fp8-pairs) env="MOEKIT_SWAPAB_ROWS8_TMA=1"; s=fp8_per_tensor;; bf16) env=; s=bf16;; esac
  [ $(left) -gt 50 ] || break
  env $env timeout $(( $(left) > 100 ? 90 : $(left) - 10 )) bash tools/scripts/stall_sampling.sh "$BB" swapab 1 \
    --scheme $s --preset gpt-oss-120b --tp 8 --tokens 64 --no-baseline --no-host-time >"$O/stalls-swapab-gemm2-$form.md" 2>&1
  echo "stalls $form rc=$? (left $(left)s)"; head -40 "$O/stalls-swapab-gemm2-$form.md"
done
finish

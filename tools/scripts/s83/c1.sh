#!/usr/bin/env bash
# Session 64's prepared measurement (main, no kernel change): why Swap-AB's GEMM2 on 8-byte weight
# rows (gpt-oss fp8 TP8, w2 rows of 360 bytes: the producer's 8-byte cp.async copies, since TMA
# cannot take rows that start 8 bytes off a 16-byte boundary, s76) streams at 1.65 TB/s where the
# same call's TMA-fed GEMM1 reads 2.52 (session 64's kernel times, gpt-oss fp8 M = 64). Before
# choosing a producer redesign (a 1D bulk copy of a tile's contiguous 23,040 bytes and a swizzle
# pass in shared memory; or more bytes in flight), read:
#   1. Nsight Compute's memory and launch sections of that GEMM2 (DRAM throughput, L2 and L1
#      sectors per request, the occupancy: 2 CTAs an SM) and of GEMM1 beside it;
#   2. the warp-stall sampling of GEMM2 (is the consumer waiting on full barriers, the producer on
#      its copies' issue or on empty stages?);
#   3. the same at bf16 (720-byte rows through TMA) for the contrast.
#   carry [".deps"]; tools/scripts/stamp_tree.sh first. ~4 min.
set -u
LIMIT=${LIMIT:-400}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
for scheme in fp8_per_tensor bf16; do
  timeout 90 ncu --clock-control none --section MemoryWorkloadAnalysis --section SpeedOfLight --section Occupancy \
    --section LaunchStats -k regex:swapab -c 2 $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 64 \
    --scheme $scheme --iters 1 --no-baseline --no-host-time >"$O/ncu-swapab-$scheme.txt" 2>&1
  echo "ncu $scheme rc=$? (left $(left)s)"
  grep -E "swapab_sm90_kernel|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Duration|Achieved Occupancy|Registers Per" \
    "$O/ncu-swapab-$scheme.txt" | head -24
done
# GEMM2 is the second swapab launch of a call (launch-skip 1).
for scheme in fp8_per_tensor bf16; do
  timeout $(( $(left) > 100 ? 90 : $(left) - 10 )) bash tools/scripts/stall_sampling.sh "$BB" swapab 1 --preset gpt-oss-120b \
    --tp 8 --tokens 64 --scheme $scheme --no-baseline --no-host-time >"$O/stalls-swapab-gemm2-$scheme.md" 2>&1
  echo "stalls $scheme rc=$? (left $(left)s)"; head -24 "$O/stalls-swapab-gemm2-$scheme.md"
done
finish

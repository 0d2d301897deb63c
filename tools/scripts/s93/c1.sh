#!/usr/bin/env bash
# Branch s93 (scratch, not for main): Swap-AB GEMM1's split-K forced alone
# (MOEKIT_SWAPAB_GEMM1_SPLIT), to measure the last-wave loss of whole 64-row tiles at gpt-oss TP8
# (M = 16: ~312 GEMM1 tiles over 132 CTAs, 2.4 rounds; M = 64: ~666, 5.05). ~5 min: moekit-bench
# only; A/B auto -> split 2 (and 4 at M = 16, 32); GEMM1's kernel time both ways at M = 16 / 64.
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
build_bench || exit 1
echo "built (left $(left)s)"
AB_SECONDS=120 ab split2 "$BB" "env MOEKIT_SWAPAB_GEMM1_SPLIT=2 $BB" --backend cuda --tp 8 --no-baseline --no-host-time \
  --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,bf16
AB_SECONDS=50 ab split4 "$BB" "env MOEKIT_SWAPAB_GEMM1_SPLIT=4 $BB" --backend cuda --tp 8 --no-baseline --no-host-time \
  --check --preset gpt-oss-120b --tokens 16,32 --scheme fp8_per_tensor,bf16
AB_SECONDS=50 ab split2-tp1 "$BB" "env MOEKIT_SWAPAB_GEMM1_SPLIT=2 $BB" --backend cuda --tp 1 --no-baseline --no-host-time \
  --check --preset gpt-oss-120b --tokens 16,64 --scheme fp8_per_tensor,bf16
for m in 16 64; do for v in 1 2; do
  [ $(left) -gt 20 ] || break
  MOEKIT_SWAPAB_GEMM1_SPLIT=$v timeout 30 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    -k regex:swapab_sm90_kernel -c 2 $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens $m --scheme fp8_per_tensor \
    --iters 1 --no-baseline --no-host-time >"$O/ncu-m$m-split$v.txt" 2>&1
  echo "ncu M=$m split=$v: $(grep -A8 'swapab_sm90_kernel<[A-Za-z0-9]*, 1, 0>' "$O/ncu-m$m-split$v.txt" | grep -E 'gpu__time' | awk '{print $NF}') us (left $(left)s)"
done; done
finish

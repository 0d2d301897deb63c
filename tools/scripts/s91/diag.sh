#!/usr/bin/env bash
# Branch s91diag (diagnostic build, not for main): where Swap-AB GEMM2's time goes at gpt-oss TP8.
# MOEKIT_SWAPAB_DIAG bits (GEMM2 launches only; wrong outputs, check off): 1 no epilogue, 2 no wgmma,
# 4 no weight copies, 8 no token copies, 16 no bias loads, 32 consumers do not wait for full stages.
# Each variant: GEMM2's kernel time (Nsight Compute, one kernel, the second call's).
set -u
LIMIT=${LIMIT:-560}
T0=$(date +%s); left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p "$O"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee "$O/gpu.txt"
cmake -S . -B build/diag -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_BUILD_TESTS=OFF \
  -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest >"$O/configure.log" 2>&1
cmake --build build/diag --target moekit-bench -j 16 >"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
BB=build/diag/tools/bench/moekit-bench
echo "built (left $(left)s)"
run() {  # scheme tokens diag
  local f="$O/ncu-$1-m$2-d$3.txt"
  MOEKIT_SWAPAB_DIAG=$3 timeout 40 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    -k regex:swapab_sm90_kernel --launch-skip 2 --launch-count 2 $BB --backend cuda --preset gpt-oss-120b --tp 8 \
    --tokens $2 --scheme $1 --iters 3 --no-baseline --no-host-time >"$f" 2>&1
  local g2=$(grep -A3 "swapab_sm90_kernel<[A-Za-z0-9]*, 0, 0>" "$f" | grep gpu__time | awk '{print $NF}' | head -1)
  local g1=$(grep -A3 "swapab_sm90_kernel<[A-Za-z0-9]*, 1, 0>" "$f" | grep gpu__time | awk '{print $NF}' | head -1)
  local by=$(grep -A3 "swapab_sm90_kernel<[A-Za-z0-9]*, 0, 0>" "$f" | grep dram__bytes | awk '{print $(NF-1), $NF}' | head -1)
  echo "| $1 | $2 | $3 | ${g2:-?} | ${by:-?} | ${g1:-?} |" | tee -a "$O/diag-table.md"
}
echo "| scheme | M | diag | GEMM2 us | GEMM2 DRAM read | GEMM1 us |" | tee "$O/diag-table.md"
echo "|---|---|---|---|---|---|" | tee -a "$O/diag-table.md"
for d in 0 1 16 17 2 19 4 20 12 31 51; do
  [ $(left) -gt 30 ] || break
  run fp8_per_tensor 64 $d
done
for d in 0 1 19 12 51; do
  [ $(left) -gt 30 ] || break
  run bf16 64 $d
done
for m in 16 256; do for d in 0 19 51; do
  [ $(left) -gt 30 ] || break
  run fp8_per_tensor $m $d
done; done
MOEKIT_SWAPAB_GEMM2_CTAS=1 run fp8_per_tensor 64 0
MOEKIT_SWAPAB_GEMM2_CTAS=1 run fp8_per_tensor 64 19
echo "done (left $(left)s)"
tar czf "$O/ncu.tgz" -C "$O" $(cd "$O"; ls ncu-*.txt) 2>/dev/null; rm -f "$O"/ncu-*.txt

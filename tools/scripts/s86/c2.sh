#!/usr/bin/env bash
# (Not run: session 65 got no machine for it; s87 answered the question with an A/B instead.)
# Session 65: does GEMM2's per-tile bias load set gpt-oss fp8's Swap-AB GEMM2 time? (K = 360: a
# tile's main loop is two wide stages, shorter than a global load under the weight stream, and the
# epilogue waits for the bias; stall sampling: the bias's conversion 7.7 % of samples.) Kernel
# times of both swapab launches at M = 64, the gpt-oss preset (b13, b2) against the same shape
# without biases (--shape 128,4,2880,2880, softmax top-4, silu), fp8 per tensor (copies and row
# pairs) and bf16. carry [".deps"]. ~2 min.
set -u
LIMIT=${LIMIT:-240}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
for sh in "--preset gpt-oss-120b" "--shape 128,4,2880,2880"; do
  for s in fp8_per_tensor bf16; do
    for v in 0 1; do
      [ $s = bf16 ] && [ $v = 0 ] && continue
      tag="$(echo $sh | tr -c 'a-z0-9\n' '_')-$s-rows8tma$v"
      MOEKIT_LOG_DISPATCH=1 MOEKIT_SWAPAB_ROWS8_TMA=$v timeout 40 ncu --clock-control none \
        --metrics gpu__time_duration.sum,dram__bytes.sum -k regex:swapab -c 2 $BB --backend cuda $sh --tp 8 \
        --tokens 64 --scheme $s --iters 1 --no-baseline --no-host-time >"$O/ncu-$tag.txt" 2>&1
      echo "== $tag rc=$? (left $(left)s)"
      grep -E "^ *void|gpu__time|dram__bytes|-> " "$O/ncu-$tag.txt" | head -8
    done
  done
done
finish

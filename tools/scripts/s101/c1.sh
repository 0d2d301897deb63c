#!/usr/bin/env bash
# Where Swap-AB's GEMM2 at gpt-oss fp8 TP8 M = 64 waits (prepared in session 68, not yet run): it
# takes ~63.5 µs where its weights stream bare in 42.7 (moekit-launch-floor --only-gemm2-tiles, the
# kernel's own copy pattern and ring). Per-instruction warp-stall sampling of GEMM2 (the second
# Swap-AB launch) at two CTAs an SM (the default) and one (MOEKIT_SWAPAB_GEMM2_CTAS=1), and the
# kernel times both ways: are the consumers waiting on full barriers (the stream) or the producers
# on empty ones (the consumers' chain)? ~3 min, moekit-bench only; carry [".deps"].
set -u
LIMIT=${LIMIT:-300}
source tools/scripts/device_call.sh
build_bench || exit 1
echo "built (left $(left)s)"
ARGS=(--preset gpt-oss-120b --tp 8 --tokens 64 --scheme fp8_per_tensor --no-baseline --no-host-time)
for ctas in 2 1; do
  MOEKIT_SWAPAB_GEMM2_CTAS=$ctas swapab_times m64-ctas$ctas "$BB" "${ARGS[@]}"
  mkdir -p "$O/ctas$ctas"
  OUT="$O/ctas$ctas" MOEKIT_SWAPAB_GEMM2_CTAS=$ctas timeout 90 bash tools/scripts/stall_sampling.sh "$BB" swapab 1 "${ARGS[@]}" \
    >"$O/stalls-gemm2-ctas$ctas.txt" 2>&1
  echo "stalls ctas=$ctas rc=$? (left $(left)s)"; head -n 30 "$O/stalls-gemm2-ctas$ctas.txt"
done
finish

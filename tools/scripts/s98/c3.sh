#!/usr/bin/env bash
# s99 + s100 (session 68): Swap-AB's 8-byte-row producer in row order (GEMM2 at gpt-oss fp8 TP8);
# the weight map as planes of [n_out, K] (GEMM1's last tile of a plane no longer reads the next
# plane's rows: gpt-oss TP8). .ab/mid = main before them
# (`tools/scripts/ab_base.sh main .ab/mid`). The Swap-AB tests, memcheck and racecheck on the
# 8-byte-row cases, GEMM2's tiles bare in the kernel's old copy pattern (moekit-launch-floor
# --only-gemm2-tiles), the same-run A/B at gpt-oss TP8 fp8 and GEMM2's kernel time both ways.
# ~6 min; carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-570}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90SwapAbGemm.*:*Dispatch*:*SwapAb*' 200
sanitize memcheck 'Sm90SwapAbGemm.EightByteRowsMatchReference:Sm90SwapAbGemm.Gemm2ManyItemsPerCta' 120
sanitize racecheck 'Sm90SwapAbGemm.Gemm2ManyItemsPerCta:Sm90SwapAbGemm.WideStagesBitwiseEqualToOneBlock' 120
timeout 90 $B/tools/bench/moekit-launch-floor --only-gemm2-tiles --json "$O/gemm2-tiles.json" >"$O/gemm2-tiles.txt" 2>&1
echo "gemm2 tiles rc=$? (left $(left)s)"; grep -E "TB/s" "$O/gemm2-tiles.txt"
wait_main_build || { echo "no main build"; tail -5 "$O/mid-build.log"; finish; exit 1; }
AB_SECONDS=170 ab s99-gptoss-tp8 "$MB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,bf16
swapab_times m64-main "$MB" --preset gpt-oss-120b --tp 8 --tokens 64 --scheme fp8_per_tensor
swapab_times m64-s99 "$BB" --preset gpt-oss-120b --tp 8 --tokens 64 --scheme fp8_per_tensor
finish

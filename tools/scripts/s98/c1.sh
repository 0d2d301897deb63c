#!/usr/bin/env bash
# s98 (session 68): every Swap-AB consumer thread arrives on a stage's empty barrier (count 128, was
# one arrival a warp). .ab/mid holds the commit before it (main + the Gemm2ManyItemsPerCta test,
# `tools/scripts/ab_base.sh s98~1 .ab/mid`), built with its tests, so racecheck runs the new test on
# both kernels. Then the same-run A/B at gpt-oss TP8 (the Swap-AB points), and Swap-AB GEMM2's tile
# movement bare (moekit-launch-floor --only-gemm2-tiles). ~7 min; carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-570}
source tools/scripts/device_call.sh
( cmake -S .ab/mid -B build/mid -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
    >"$O/mid-configure.log" 2>&1 && cmake --build build/mid --target moekit-bench moekit_cuda_tests -j 6 >"$O/mid-build.log" 2>&1 ) &
MID_PID=$!
build_tree || exit 1
echo "built (left $(left)s)"
wait "$MID_PID"; ls -la build/mid/tests/moekit_cuda_tests build/mid/tools/bench/moekit-bench 2>&1 | awk '{print $NF}'
run_tests 'Sm90SwapAbGemm.*:*Dispatch*:*SwapAb*' 200
sanitize racecheck Sm90SwapAbGemm.Gemm2ManyItemsPerCta 120
mv "$O/racecheck.log" "$O/racecheck-tree.log"
timeout 120 compute-sanitizer --tool racecheck build/mid/tests/moekit_cuda_tests --gtest_filter=Sm90SwapAbGemm.Gemm2ManyItemsPerCta \
  >"$O/racecheck-mid.log" 2>&1
echo "racecheck mid rc=$? $(grep -E 'RACECHECK SUMMARY' "$O/racecheck-mid.log" | tail -1) (left $(left)s)"
sanitize memcheck Sm90SwapAbGemm.Gemm2ManyItemsPerCta 90
AB_SECONDS=150 ab s98-gptoss-tp8 build/mid/tools/bench/moekit-bench "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,bf16
timeout 60 $B/tools/bench/moekit-launch-floor --only-gemm2-tiles --json "$O/gemm2-tiles.json" >"$O/gemm2-tiles.txt" 2>&1
echo "gemm2 tiles rc=$? (left $(left)s)"; grep -E "TB/s" "$O/gemm2-tiles.txt" | head -8
finish

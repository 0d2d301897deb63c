#!/usr/bin/env bash
# Branch s97: Swap-AB GEMM2's wide stages three 128-byte K blocks, not two (config.hpp
# kWideKBlocksScatter): gpt-oss fp8 TP8's 360-byte w2 rows are one stage a tile, not two, so the
# stage hand-overs (session 66's diagnostic: 22 µs of GEMM2's ~63 at M = 64 with no bytes and no
# math, ~38 stages a CTA) are paid half as often; three stages on two CTAs an SM (72 KB of weights
# in flight a CTA, against 5 x 16 KB). The variant "g1" also gives GEMM1 three blocks a stage (3 x
# 54 KB), built from a copy of the tree with config.hpp edited, to see GEMM1 apart. ~9.5 min:
#   tools/scripts/ab_base.sh main .ab/mid && tools/scripts/stamp_tree.sh; carry [".deps", ".ab/mid"].
#   1. build (tree, main's bench, the g1 variant's bench); the Swap-AB tests, the fused / dispatch
#      tests; memcheck and racecheck on the wide-stage tests;
#   2. A/B main -> tree at gpt-oss TP8 M = 16..256, three schemes; TP1 gpt-oss / mixtral M = 1, 16, 64;
#   3. A/B tree -> g1 at gpt-oss TP8;
#   4. GEMM1 and GEMM2 kernel times (Nsight Compute, gpt-oss fp8 M = 64): main, tree, g1;
#   5. the GPU suite if time is left.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
# The g1 variant: the tree with GEMM1's wide stages three blocks too (3 stages fit).
V=/tmp/g1; rm -rf $V; mkdir -p $V
tar --exclude=./build --exclude=./.ab -cf - . | tar -xf - -C $V
sed -i 's/kWideKBlocksGateUp = 2;/kWideKBlocksGateUp = 3;/; s/kMaxStagesGateUpWide = 5;/kMaxStagesGateUpWide = 3;/' \
  $V/src/cuda/kernels/swapab/config.hpp
grep -n "kWideKBlocksGateUp =\|kMaxStagesGateUpWide =" $V/src/cuda/kernels/swapab/config.hpp
( cd $V && cmake -S . -B build/bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_BUILD_TESTS=OFF \
    -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest >"$O/g1-configure.log" 2>&1 &&
  cmake --build build/bench --target moekit-bench -j 4 >"$O/g1-build.log" 2>&1 ) &
G1_PID=$!
G1=$V/build/bench/tools/bench/moekit-bench
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SwapAbGemm.*:Sm90Dispatch.*:Sm90FusedMoe.*Gpt*:Sm90FusedMoe.*Bias*" 150
sanitize memcheck "Sm90SwapAbGemm.WideStages*:Sm90SwapAbGemm.EightByteRowsMatchReference" 90
sanitize racecheck "Sm90SwapAbGemm.WideStagesBitwiseEqualToOneBlock" 60
wait_main_build || { echo "no main build"; finish; exit 1; }
REPS=2 AB_SECONDS=100 ab kb3 "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,bf16,fp8_per_channel
REPS=2 AB_SECONDS=60 ab kb3-tp1 "$MB" "$BB" --backend cuda --tp 1 --no-baseline --no-host-time --check \
  --preset gpt-oss-120b,mixtral-8x7b --tokens 1,16,64 --scheme fp8_per_tensor,bf16
if wait "$G1_PID" && [ -x "$G1" ]; then
  REPS=2 AB_SECONDS=90 ab g1 "$BB" "$G1" --backend cuda --tp 8 --no-baseline --no-host-time --check \
    --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,bf16
else
  echo "no g1 build"; tail -20 "$O/g1-build.log"
fi
for v in main tree g1; do
  bin=$BB; [ $v = main ] && bin=$MB; [ $v = g1 ] && bin=$G1
  [ -x "$bin" ] && swapab_times $v "$bin" --preset gpt-oss-120b --tp 8 --tokens 64 --scheme fp8_per_tensor
done
if [ $(left) -gt 200 ]; then
  timeout $(( $(left) - 20 )) $B/tests/moekit_cuda_tests >"$O/gpu-suite.log" 2>&1
  echo "gpu suite rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$O/gpu-suite.log" | tr '\n' ' ') (left $(left)s)"
  grep -E "^\[  FAILED" "$O/gpu-suite.log" | head
fi
finish

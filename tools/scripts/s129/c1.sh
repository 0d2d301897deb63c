#!/usr/bin/env bash
# s129 c1: bisect the qwen3-30b TP8 fp8_per_channel slowdown (main 0.900x of 2f78ff0, session 83)
# over the commits that reached the per-channel one-CTA kernel: 2f78ff0 -> 17a2276 (two w13 boxes)
# -> 3cfff2e (the warm warp) -> main. Builds the three trees' moekit-bench beside this tree's (bench
# only), then three same-run A/Bs of neighbours, two repeats a side, check on, M = 16, 64, 256.
# Setup: tools/scripts/s129/prep.sh; stamp_tree.sh. carry [".deps/googletest", ".ab/mid", ".ab/b1", ".ab/b2"].
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
bench_of() {  # tree dir, build dir: moekit-bench alone
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_BUILD_TESTS=OFF \
    -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest >"$O/$(basename "$2")-configure.log" 2>&1 &&
    cmake --build "$2" --target moekit-bench -j 4 >"$O/$(basename "$2")-build.log" 2>&1
}
bench_of .ab/mid build/mid & bench_of .ab/b1 build/b1 & bench_of .ab/b2 build/b2 & bench_of . build/bench &
wait
echo "built (left $(left)s): $(ls build/{mid,b1,b2,bench}/tools/bench/moekit-bench 2>&1 | tr '\n' ' ')"
ARGS="--backend cuda --no-baseline --no-host-time --check --tp 8 --scheme fp8_per_channel --preset qwen3-30b-a3b --tokens 16,64,256"
X=tools/bench/moekit-bench
AB_SECONDS=60 ab 2f78ff0-17a2276 build/mid/$X build/b1/$X $ARGS
AB_SECONDS=60 ab 17a2276-3cfff2e build/b1/$X build/b2/$X $ARGS
AB_SECONDS=60 ab 3cfff2e-main build/b2/$X build/bench/$X $ARGS
finish

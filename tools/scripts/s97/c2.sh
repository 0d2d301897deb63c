#!/usr/bin/env bash
# After s97 (main with GEMM2's three-block wide stages): the TP8 grid at this commit, and s93's
# measurement (GEMM1's split-K alone, tools/scripts/s93/) from a copy of the tree with its patch.
# ~6.5 min, moekit-bench only; carry [".deps"].
set -u
LIMIT=${LIMIT:-400}
source tools/scripts/device_call.sh
V=/tmp/s93; rm -rf $V; mkdir -p $V
tar --exclude=./build --exclude=./.ab -cf - . | tar -xf - -C $V
( cd $V && git apply tools/scripts/s93/gemm1_split.patch 2>"$O/s93-apply.log" || patch -p1 <tools/scripts/s93/gemm1_split.patch >>"$O/s93-apply.log" 2>&1
  cmake -S . -B build/bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_BUILD_TESTS=OFF \
    -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest >"$O/s93-configure.log" 2>&1 &&
  cmake --build build/bench --target moekit-bench -j 6 >"$O/s93-build.log" 2>&1 ) &
S93_PID=$!
S93=$V/build/bench/tools/bench/moekit-bench
build_bench || exit 1
echo "built (left $(left)s)"
if wait "$S93_PID" && [ -x "$S93" ]; then
  AB_SECONDS=110 ab s93-split2 "$S93" "env MOEKIT_SWAPAB_GEMM1_SPLIT=2 $S93" --backend cuda --tp 8 --no-baseline \
    --no-host-time --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,bf16
  for m in 16 64; do for v in 1 2; do
    [ $(left) -gt 25 ] || break
    MOEKIT_SWAPAB_GEMM1_SPLIT=$v swapab_times m$m-split$v "$S93" --preset gpt-oss-120b --tp 8 --tokens $m --scheme fp8_per_tensor
  done; done
else
  echo "no s93 build"; tail -5 "$O/s93-apply.log" "$O/s93-build.log"
fi
# The grid last (its previous grid: the same GPU's latest).
PREV=bench/results/2026-12-06-719576d-h100-s92-grid-tp8.json
grep -q H200 "$O/gpu.txt" && PREV=bench/results/2026-12-06-f75d4b1-h200-s69-grid-tp8.json
[ $(left) -gt 100 ] && grid_tp8 "$PREV"
finish

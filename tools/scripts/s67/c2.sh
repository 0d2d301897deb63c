#!/usr/bin/env bash
# Branch s67's second call: the retuned band on the GPU (AutoTakesItInItsRangeAndTheSwitchKeepsItOff,
# the dispatch at fp8 M = 5 / 6 and bf16 M = 8 / 16 / 32), then auto at qwen3-30b TP8 M = 5..14 with
# the check on (what it runs now, against s67/c1.sh's sweep).
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-230}
source tools/scripts/device_call.sh
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest >$O/configure.log 2>&1
cmake --build $B --target moekit_cuda_tests moekit-bench -j 16 >$O/build.log 2>&1 || { echo "no build"; tail -5 $O/build.log; finish; exit 1; }
echo "built (left $(left)s)"
run_tests "Sm90ExpertMlp.AutoTakesItInItsRangeAndTheSwitchKeepsItOff" 40
timeout 60 $BB --backend cuda --preset qwen3-30b-a3b --tp 8 --tokens 5,6,8,10,12,14 --scheme bf16,fp8_per_tensor \
  --check --no-baseline --no-host-time --json $O/auto.json 2>&1 | grep -E "^qwen3" | cut -c1-100
finish

#!/usr/bin/env bash
# Branch s67's device call: the same-run path sweep at qwen3-30b TP8 M = 5..16, both schemes,
# expert_mlp forced against auto (gemv / gemv(mma) there): where the per-expert MLP path should
# start for fp8_per_tensor (s66's runs had it at 29.5 µs against auto's 34.1 at fp8 M = 8, two
# separate runs). Two repeats; tools/scripts/path_report.py reads them.
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-300}
source tools/scripts/device_call.sh
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest >$O/configure.log 2>&1
cmake --build $B --target moekit-bench -j 16 >$O/build.log 2>&1 || { echo "no build"; tail -5 $O/build.log; finish; exit 1; }
echo "built (left $(left)s)"
for i in 1 2; do
  timeout 60 $BB --backend cuda --preset qwen3-30b-a3b --tp 8 --tokens 5,6,8,10,12,14,16 --scheme bf16,fp8_per_tensor \
    --path expert_mlp,auto --check --no-baseline --no-host-time --json $O/sweep-$i.json >$O/sweep-$i.log 2>&1
  echo "sweep $i rc=$? (left $(left)s)"
done
python3 tools/scripts/path_report.py $O/sweep-1.json $O/sweep-2.json > $O/path-report.md 2>&1; head -40 $O/path-report.md
finish

#!/usr/bin/env bash
# s105, second call: main (.ab/mid) against the tree (push_h) at auto's TP8 points of the cluster
# presets the first call did not time (M = 4, 8, 32, 128), both schemes. ~4 min; carry
# [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-230}
source tools/scripts/device_call.sh
start_main_build
build_bench || { finish; exit 1; }
BB=build/bench/tools/bench/moekit-bench
wait_main_build || { echo "no main build"; finish; exit 1; }
echo "built (left $(left)s)"
AB_SECONDS=$(( $(left) - 15 )) REPS=2 ab auto "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset qwen3-235b-a22b,deepseek-v3,gpt-oss-120b --tokens 4,8,32,128 --scheme bf16,fp8_per_tensor
finish

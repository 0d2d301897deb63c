#!/usr/bin/env bash
# s105, third call (branch s105-halves): push_h after each row half's stores (two rounds a unit,
# the first bytes leave half a store loop earlier) against main's one round after both halves
# (.ab/mid), at the points where one unit a CTA made main's push_h read 2-3 % slower (gpt-oss e4m3
# M = 4 / 8) and the cluster points around them, auto, check on. ~3 min; carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-150}
source tools/scripts/device_call.sh
start_main_build
build_bench || { finish; exit 1; }
BB=build/bench/tools/bench/moekit-bench
wait_main_build || { echo "no main build"; finish; exit 1; }
echo "built (left $(left)s)"
AB_SECONDS=$(( $(left) - 10 )) REPS=2 ab halves "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset gpt-oss-120b,qwen3-235b-a22b,deepseek-v3 --tokens 4,8,16,64 --scheme fp8_per_tensor
finish

#!/usr/bin/env bash
# s112 c4: where the staged y faults (c3: cudaErrorIllegalAddress in e4m3 at units of 10-16 rows,
# NT = 16; bf16 and e4m3 units of up to 9 rows ran and matched). compute-sanitizer memcheck on one
# moekit-bench point that faulted (qwen3-30b TP8 fp8 M = 128, expert_mlp forced), its first
# reports. carry [".deps"].
set -u
LIMIT=${LIMIT:-200}
source tools/scripts/device_call.sh
build_bench || exit 1
echo "built (left $(left)s)"
timeout $(( $(left) - 15 )) compute-sanitizer --tool memcheck --show-backtrace device $BB --backend cuda --tp 8 \
  --preset qwen3-30b-a3b --tokens 128 --scheme fp8_per_tensor --path expert_mlp --iters 1 --no-baseline \
  --no-host-time >"$O/memcheck-bench.log" 2>&1
echo "memcheck rc=$? (left $(left)s)"
grep -m1 -B2 -A14 -E "Invalid|Error|error" "$O/memcheck-bench.log" | cut -c1-220
grep -E "ERROR SUMMARY" "$O/memcheck-bench.log"
finish

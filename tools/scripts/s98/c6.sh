#!/usr/bin/env bash
# s98's A/B at the TP1 Swap-AB points (mixtral / qwen3-235b / gpt-oss, bf16 + fp8_per_tensor, M = 2, 16, 64):
# .ab/mid = f1f0f1b (the commit before s98's kernel change; `tools/scripts/ab_base.sh f1f0f1b .ab/mid`),
# this tree = main. ~3 min; carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-300}
source tools/scripts/device_call.sh
start_main_build
build_bench || exit 1
wait_main_build || { echo "no mid build"; finish; exit 1; }
echo "built (left $(left)s)"
AB_SECONDS=$(( $(left) - 20 )) ab s98-tp1 "$MB" "$BB" --backend cuda --tp 1 --no-baseline --no-host-time --check \
  --preset mixtral-8x7b,qwen3-235b-a22b,gpt-oss-120b --tokens 2,16,64 --scheme bf16,fp8_per_tensor
finish

#!/usr/bin/env bash
# s102 (session 69): the per-expert MLP kernel for gpt-oss (biases staged a unit, N = 360 on clusters
# of four, e4m3's K % 128 = 64 and w2's 360-byte rows as row pairs). Its GPU tests, memcheck and
# racecheck on the small cases, then gpt-oss TP8 M = 1..256 with expert_mlp forced beside auto in one
# run (check on), and a same-run A/B against main (.ab/mid) where auto already takes expert_mlp
# (qwen3-30b / qwen3-235b TP8). ~8 min; carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-580}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*' 240
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 90
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 90
timeout 150 $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
  --scheme fp8_per_tensor,bf16,fp8_per_channel --path auto,expert_mlp --check --no-baseline --no-host-time \
  --json "$O/gptoss-paths.json" >"$O/gptoss-paths.log" 2>&1
echo "gpt-oss paths rc=$? (left $(left)s)"
python3 tools/scripts/path_report.py "$O/gptoss-paths.json" >"$O/gptoss-paths.md" 2>&1; head -n 40 "$O/gptoss-paths.md"
wait_main_build && AB_SECONDS=$(( $(left) - 20 )) ab s102-expert-mlp-users "$MB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset qwen3-30b-a3b,qwen3-235b-a22b --tokens 16,64,256 --scheme bf16,fp8_per_tensor
finish

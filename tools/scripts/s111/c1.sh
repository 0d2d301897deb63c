#!/usr/bin/env bash
# s111 c1: GEMM2 as Swap-AB on by default (units of up to 8 rows 16-bit, 16 e4m3), as long as LIMIT
# allows (seconds, default 430): the expert_mlp, fuzz and dispatch tests, the A/B off (0) against
# the default (expert_mlp forced at qwen3-30b TP8 M = 1..256, both schemes, check on), racecheck
# and memcheck. carry [".deps"].
set -u
LIMIT=${LIMIT:-430}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*-Sm90ExpertMlp.PhaseBreakdown' 150
[ "$(left)" -gt 60 ] && AB_SECONDS=$(( $(left) > 220 ? 140 : $(left) / 2 )) REPS=2 ab swap \
  "env MOEKIT_EXPERT_MLP_G2_SWAP=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --path expert_mlp --preset qwen3-30b-a3b --tokens 1,2,4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
[ "$(left)" -gt 30 ] && sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 30
[ "$(left)" -gt 25 ] && sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers' 25
finish

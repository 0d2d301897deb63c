#!/usr/bin/env bash
# s111 c4: the landing call of GEMM2 as Swap-AB (on by default) for a small device budget, as long as LIMIT allows (seconds,
# default 300): the expert_mlp tests, the A/B off (0) against the default (expert_mlp forced at
# qwen3-30b TP8, both schemes, check on), racecheck and memcheck, then the TP8 grid if time is left.
# carry [".deps"].
set -u
LIMIT=${LIMIT:-300}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' 80
[ "$(left)" -gt 60 ] && AB_SECONDS=$(( $(left) > 200 ? 110 : $(left) / 2 )) REPS=2 ab swap \
  "env MOEKIT_EXPERT_MLP_G2_SWAP=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --path expert_mlp --preset qwen3-30b-a3b --tokens 1,2,4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
[ "$(left)" -gt 30 ] && sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 25
[ "$(left)" -gt 25 ] && sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers' 20
if [ "$(left)" -gt 90 ]; then
  case "$(cat "$O/gpu.txt")" in
    *H200*) PREV=bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json ;;
    *) PREV=bench/results/2026-12-07-3a219ec-h100-s108-grid-tp8.json ;;
  esac
  grid_tp8 "$PREV"
fi
finish

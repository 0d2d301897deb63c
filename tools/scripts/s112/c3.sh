#!/usr/bin/env bash
# s112 c3: the staged y on a small device budget (LIMIT seconds, default 330): this
# tree built with its tests; the staged y's bit-equality tests and the small cases; the TMA stream
# probe with GEMM1's tensor work a stage; the A/B MOEKIT_EXPERT_MLP_STAGE_Y=0 against the default
# (expert_mlp forced at qwen3-30b TP8, both schemes, check on); racecheck and memcheck of the small
# cases; the phase tables with it off and on if time is left. carry [".deps"].
set -u
LIMIT=${LIMIT:-330}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.StagedY*:Sm90ExpertMlp.SmallForSanitizers' 60
timeout 30 $B/tools/bench/moekit-tma-stream-probe >"$O/stream-probe.txt" 2>&1
echo "probe rc=$? (left $(left)s)"; grep -E "3 x 64-row boxes \| (none|m64|swap)" "$O/stream-probe.txt" | head -24
[ "$(left)" -gt 80 ] && AB_SECONDS=$(( $(left) > 220 ? 110 : $(left) / 2 )) REPS=2 ab stage-y \
  "env MOEKIT_EXPERT_MLP_STAGE_Y=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --path expert_mlp --preset qwen3-30b-a3b --tokens 1,2,4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
[ "$(left)" -gt 40 ] && sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 25
[ "$(left)" -gt 30 ] && sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers' 20
[ "$(left)" -gt 70 ] && phase_tables MOEKIT_EXPERT_MLP_STAGE_Y 0 1
finish

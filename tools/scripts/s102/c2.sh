#!/usr/bin/env bash
# s102 (session 69), second call: after c1 found the e4m3 row-pair view faulting (a TMA box's inner
# start must be 16-byte aligned), e4m3 declines N % 16 != 0 and gpt-oss runs on the per-expert MLP
# kernel in bf16 / fp16 only. The GPU tests (expert_mlp, the fuzz, dispatch), memcheck and racecheck
# on the small cases, then gpt-oss TP8 M = 1..256 bf16 with expert_mlp forced beside auto (check on).
# ~6 min; carry [".deps"].
set -u
LIMIT=${LIMIT:-500}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*' 200
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 80
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 80
timeout 120 $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
  --scheme bf16 --path auto,expert_mlp --check --no-baseline --no-host-time \
  --json "$O/gptoss-paths.json" >"$O/gptoss-paths.log" 2>&1
echo "gpt-oss paths rc=$? (left $(left)s)"
python3 tools/scripts/path_report.py "$O/gptoss-paths.json" >"$O/gptoss-paths.md" 2>&1; head -n 30 "$O/gptoss-paths.md"
finish

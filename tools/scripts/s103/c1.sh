#!/usr/bin/env bash
# s103 (session 70), first call: e4m3 at N % 16 = 8 on the per-expert MLP kernel's cluster form (w2
# as row pairs, the odd rows 8 bytes early against h2 = h shifted by 8 columns; gpt-oss TP8 fp8
# N = 360). The GPU tests (expert_mlp, the fuzz, dispatch), memcheck and racecheck on the small
# cases (gpt-oss's form among them), then gpt-oss TP8 M = 1..256 fp8_per_tensor with expert_mlp
# forced beside auto (check on), then bf16 on auto (session 69's rule). ~8 min; carry [".deps"].
set -u
LIMIT=${LIMIT:-570}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*' 200
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 80
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 80
timeout 150 $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
  --scheme fp8_per_tensor --path auto,expert_mlp --check --no-baseline --no-host-time \
  --json "$O/gptoss-fp8-paths.json" >"$O/gptoss-fp8-paths.log" 2>&1
echo "gpt-oss fp8 paths rc=$? (left $(left)s)"
python3 tools/scripts/path_report.py "$O/gptoss-fp8-paths.json" >"$O/gptoss-fp8-paths.md" 2>&1; head -n 30 "$O/gptoss-fp8-paths.md"
if [ "$(left)" -gt 100 ]; then
  timeout $(( $(left) - 15 )) $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 1,2,4,8,16,32,64,128,256 --scheme bf16 \
    --check --no-host-time --json "$O/gptoss-bf16-auto.json" >"$O/gptoss-bf16-auto.log" 2>&1
  echo "gpt-oss bf16 auto rc=$? (left $(left)s)"; grep -E "gpt-oss" "$O/gptoss-bf16-auto.log" | head -n 12
fi
finish

#!/usr/bin/env bash
# s102 (session 69), the last device minutes: gpt-oss TP8 bf16 M = 1..256 on auto with the new rule
# (RouterTable::expert_mlp_quad_*) and cuBLAS in the same run, check on; moekit-bench alone.
# ~2.5 min; carry [".deps"].
set -u
LIMIT=${LIMIT:-170}
source tools/scripts/device_call.sh
build_bench || exit 1
echo "built (left $(left)s)"
timeout $(( $(left) - 10 )) $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 1,2,4,8,16,32,64,128,256 --scheme bf16 \
  --check --no-host-time --json "$O/gptoss-auto.json" >"$O/gptoss-auto.log" 2>&1
echo "gpt-oss auto rc=$? (left $(left)s)"; grep -E "gpt-oss" "$O/gptoss-auto.log" | head -n 12
finish

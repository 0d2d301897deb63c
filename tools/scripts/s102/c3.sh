#!/usr/bin/env bash
# s102 (session 69), third call: the router takes the per-expert MLP kernel at gpt-oss TP8 bf16
# from 32 to 512 slots (RouterTable::expert_mlp_quad_*). The expert_mlp and dispatch GPU tests,
# then gpt-oss TP8 bf16 M = 1..256 on auto with cuBLAS in the same run (check on), then the whole
# TP8 grid if the time holds (LIMIT=580). ~4 min without the grid; carry [".deps"].
set -u
LIMIT=${LIMIT:-280}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Dispatch.*' 100
timeout 90 $BB --backend cuda --preset gpt-oss-120b --tp 8 --tokens 1,2,4,8,16,32,64,128,256 --scheme bf16 \
  --check --no-host-time --json "$O/gptoss-auto.json" >"$O/gptoss-auto.log" 2>&1
echo "gpt-oss auto rc=$? (left $(left)s)"; grep -E "gpt-oss" "$O/gptoss-auto.log" | head -n 12
if [ "$(left)" -gt 320 ]; then
  PREV=bench/results/2026-12-06-d7c64bc-h100-s98-grid-tp8.json
  grep -q H200 "$O/gpu.txt" && PREV=bench/results/2026-12-06-f75d4b1-h200-s69-grid-tp8.json
  grid_tp8 "$PREV"
fi
finish

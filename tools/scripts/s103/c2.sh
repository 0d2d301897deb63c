#!/usr/bin/env bash
# s103 (session 70), second call: the router takes the per-expert MLP kernel at gpt-oss TP8
# fp8_per_tensor from 16 to 256 slots (RouterTable::expert_mlp_quad_fp8_*). The expert_mlp and
# dispatch GPU tests, then the TP8 grid (bf16 + fp8_per_tensor, M = 1..256, cuBLAS / cuBLASLt in
# the same run, check on) against the same GPU's previous grid, then the TP8 fp8_per_channel /
# fp8_block128 grid and the TP1 grid as the time holds. ~9 min; carry [".deps"].
set -u
LIMIT=${LIMIT:-575}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.GptOss*:Sm90ExpertMlp.RowPair*:Sm90Dispatch.*' 80
H200=0; grep -q H200 "$O/gpu.txt" && H200=1
PREV=bench/results/2026-12-06-d7c64bc-h100-s98-grid-tp8.json
[ $H200 = 1 ] && PREV=bench/results/2026-12-06-f75d4b1-h200-s69-grid-tp8.json
grid_tp8 "$PREV"
if [ "$(left)" -gt 150 ]; then
  timeout $(( $(left) - 15 )) $BB --backend cuda --preset all --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
    --scheme fp8_per_channel,fp8_block128 --check --no-host-time --json "$O/grid-tp8-cb.json" >"$O/grid-tp8-cb.log" 2>&1
  echo "grid tp8 channel/block128 rc=$? (left $(left)s)"
  [ $H200 = 0 ] && python3 tools/scripts/grid_report.py "$O/grid-tp8-cb.json" \
    --previous bench/results/2026-12-06-8879bda-h100-s98-grid-tp8-channel-block128.json --out "$O/grid-tp8-cb-report.md" 2>&1 | head -n 4
fi
if [ "$(left)" -gt 150 ]; then
  timeout $(( $(left) - 15 )) $BB --backend cuda --preset all --tp 1 --tokens 1,2,4,8,16,32,64,128,256 \
    --scheme bf16,fp8_per_tensor --check --no-host-time --json "$O/grid-tp1.json" >"$O/grid-tp1.log" 2>&1
  echo "grid tp1 rc=$? (left $(left)s)"
  [ $H200 = 0 ] && python3 tools/scripts/grid_report.py "$O/grid-tp1.json" \
    --previous bench/results/2026-12-06-8879bda-h100-s98-grid-tp1.json --out "$O/grid-tp1-report.md" 2>&1 | head -n 4
fi
finish

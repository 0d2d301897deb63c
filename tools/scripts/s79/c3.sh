#!/usr/bin/env bash
# Branch s79's third call: s78 with the router taking fp8_per_channel onto the per-expert MLP
# kernel's one-CTA form from 48 slots (c2's A/B):
#   1. build; the dispatch tests and s78's test (the router change is host-side);
#   2. the TP8 grid (bf16, fp8_per_tensor) against session 63's H100 grid (55f9d3c), and the TP8
#      fp8_per_channel + fp8_block128 grid against af999d3's;
#   3. s77's measurement as time allows: the fp8 chains' kernel times at TP8 M = 64 (mixtral,
#      gpt-oss, against their bf16 chains), the per-expert MLP kernel's stalls at fp8 M = 64.
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90Dispatch.*:Sm90ExpertMlp.Fp8PerChannelMatchesReference" 60
grid_tp8 bench/results/2026-12-06-55f9d3c-h100-s74-grid-tp8.json
timeout 120 $BB --backend cuda --preset all --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
  --scheme fp8_per_channel,fp8_block128 --check --no-host-time --json "$O/grid-tp8-channel-block128.json" >"$O/grid-tp8-channel-block128.log" 2>&1
echo "grid channel/block128 rc=$? (left $(left)s)"
python3 tools/scripts/grid_report.py "$O/grid-tp8-channel-block128.json" \
  --previous bench/results/2026-12-06-af999d3-h100-grid-tp8-channel-block128.json --out "$O/grid-tp8-channel-block128-report.md" 2>&1 | head -n 4
timeout $(( $(left) - 75 )) bash tools/scripts/profile_kernels.sh "$BB" "mixtral-8x7b 8 64 fp8_per_tensor" \
  "mixtral-8x7b 8 64 bf16" "gpt-oss-120b 8 64 fp8_per_tensor" "gpt-oss-120b 8 64 bf16" >"$O/kernel-times.txt" 2>&1
echo "kernel times rc=$? (left $(left)s)"; grep -E "^###|sm90|total|call" "$O/kernel-times.txt" | head -40
timeout $(( $(left) - 15 )) bash tools/scripts/stall_sampling.sh "$BB" expert_mlp 1 --preset qwen3-30b-a3b --tp 8 \
  --tokens 64 --scheme fp8_per_tensor --no-baseline --no-host-time >"$O/stalls-expert-mlp-fp8-m64.md" 2>&1
echo "stalls rc=$? (left $(left)s)"; head -30 "$O/stalls-expert-mlp-fp8-m64.md"
finish

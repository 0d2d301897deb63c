#!/usr/bin/env bash
# Session 63's last device call, main at the landing of the routing's quads: the TP1 grid (bf16 and
# fp8_per_tensor, M = 1..256, check on, a JSON a preset so that what the time allows is kept), then
# the TP8 fp8_per_channel / fp8_block128 grid, as the budget allows.
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-270}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
for p in qwen3-30b-a3b gpt-oss-120b qwen3-235b-a22b mixtral-8x7b deepseek-v3; do
  [ $(left) -gt 35 ] || break
  timeout $(( $(left) - 12 )) $BB --backend cuda --preset $p --tp 1 --tokens 1,2,4,8,16,32,64,128,256 \
    --scheme bf16,fp8_per_tensor --check --no-host-time --json "$O/grid-tp1-$p.json" >"$O/grid-tp1-$p.log" 2>&1
  echo "tp1 $p rc=$? (left $(left)s)"
done
if [ $(left) -gt 40 ]; then
  timeout $(( $(left) - 12 )) $BB --backend cuda --preset all --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
    --scheme fp8_per_channel,fp8_block128 --check --no-host-time --json "$O/grid-tp8-cb.json" >"$O/grid-tp8-cb.log" 2>&1
  echo "tp8 channel/block128 rc=$? (left $(left)s)"
fi
finish

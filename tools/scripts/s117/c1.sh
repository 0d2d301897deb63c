#!/usr/bin/env bash
# s117 c1 (an experiment, not for main): does the staged y's extra 16.5 KB of dynamic shared memory,
# not its code, cost the one-CTA per-expert MLP kernel 3-4 µs at qwen3-30b TP8 (session 79, s115)?
# This tree is main with MOEKIT_S117_SMEM_PAD bytes added to the launch's dynamic shared memory (the
# kernel binary unchanged), so an A/B of the variable in one binary measures the smaller L1 alone.
# Predicted (docs/perf.md session 79, the carveout arithmetic): bf16 loses 3-4 µs at 16896 (its layout
# passes the 196 KB carveout step, L1 60 -> 28 KB) and nothing at 8448; e4m3 nothing at either.
# carry [".deps"]; LIMIT seconds (default 330; from ~170 the first A/B alone).
# Prepared in session 79, never run (the session's device time ran out). To stage it:
#   git checkout -b s117 main && git apply tools/scripts/s117/smem_pad.patch && git commit -qam s117
#   tools/scripts/stamp_tree.sh     # then LIMIT=330 bash tools/scripts/s117/c1.sh, carry [".deps"]
# (the patch compiles: the expert_mlp instantiation TU built here, sm_90a).
set -u
LIMIT=${LIMIT:-330}
source tools/scripts/device_call.sh
build_bench || exit 1
echo "built (left $(left)s)"
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp"
AB_SECONDS=$(( $(left) > 130 ? 100 : $(left) - 15 )) REPS=2 ab pad16896 "env MOEKIT_S117_SMEM_PAD=0 $BB" "env MOEKIT_S117_SMEM_PAD=16896 $BB" $ARGS \
  --preset qwen3-30b-a3b --tokens 1,4,8,16,64 --scheme bf16,fp8_per_tensor
[ "$(left)" -gt 80 ] && AB_SECONDS=$(( $(left) - 30 )) REPS=2 ab pad8448 "env MOEKIT_S117_SMEM_PAD=0 $BB" "env MOEKIT_S117_SMEM_PAD=8448 $BB" $ARGS \
  --preset qwen3-30b-a3b --tokens 1,4,8,16,64 --scheme bf16,fp8_per_tensor
finish

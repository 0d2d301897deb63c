#!/usr/bin/env bash
# s117 c2 (an experiment, not for main): c1's A/Bs (MOEKIT_S117_SMEM_PAD 0 -> 16896 and 0 -> 8448,
# the one-CTA per-expert MLP kernel at qwen3-30b TP8, expert_mlp forced) and then main's TP8 grid
# (auto, baselines, check on) from main's own build (.ab/mid) against this GPU's previous grid.
# Stage: on branch s117 (main + smem_pad.patch), tools/scripts/ab_base.sh main .ab/mid,
# tools/scripts/stamp_tree.sh; LIMIT=540 bash tools/scripts/s117/c2.sh, carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-540}
source tools/scripts/device_call.sh
start_main_build
build_bench || exit 1
echo "built (left $(left)s)"
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp"
AB_SECONDS=100 REPS=2 ab pad16896 "env MOEKIT_S117_SMEM_PAD=0 $BB" "env MOEKIT_S117_SMEM_PAD=16896 $BB" $ARGS \
  --preset qwen3-30b-a3b --tokens 1,4,8,16,64 --scheme bf16,fp8_per_tensor
AB_SECONDS=100 REPS=2 ab pad8448 "env MOEKIT_S117_SMEM_PAD=0 $BB" "env MOEKIT_S117_SMEM_PAD=8448 $BB" $ARGS \
  --preset qwen3-30b-a3b --tokens 1,4,8,16,64 --scheme bf16,fp8_per_tensor
wait_main_build || { echo "no main build"; tail -5 "$O/mid-build.log"; finish; exit 1; }
echo "main built (left $(left)s)"
case "$(cat "$O/gpu.txt")" in
  *H200*) PREV=bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json ;;
  *) PREV=bench/results/2026-12-07-3e96004-h100-s111-grid-tp8.json ;;
esac
BB=$MB grid_tp8 "$PREV"
finish

#!/usr/bin/env bash
# s112 c1: is qwen3-30b TP8 fp8 slower at main than at 3a219ec? Session 77's grid (3e96004, H100)
# had it 0.89-0.93x of 3a219ec's grid (another H100, whose cuBLAS baselines ran 2-4 % faster), and
# env-switch A/Bs cannot see a change that both sides of a switch carry (the warm warp's sixth
# warp, the smem layout of aa640c4). Two builds on one GPU, as long as LIMIT allows (seconds,
# default 420): 3a219ec's moekit-bench (.ab/mid, staged before the call with
# `tools/scripts/ab_base.sh 3a219ec .ab/mid`) against this tree's, expert_mlp forced at its
# TP8 points, both schemes, check on; then this tree with MOEKIT_EXPERT_MLP_WARM_ACT=0 against
# its default (the warm warp apart from its compiled-in code). carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
start_main_build
build_bench || exit 1
wait_main_build || { echo "3a219ec's build failed"; tail -20 "$O/mid-build.log"; finish; exit 1; }
echo "built both (left $(left)s)"
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp"
[ "$(left)" -gt 80 ] && AB_SECONDS=$(( $(left) > 260 ? 150 : $(left) / 2 )) REPS=2 ab builds "$MB" "$BB" $ARGS \
  --preset qwen3-30b-a3b --tokens 1,4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
[ "$(left)" -gt 60 ] && AB_SECONDS=$(( $(left) > 160 ? 110 : $(left) - 30 )) REPS=2 ab builds-other "$MB" "$BB" $ARGS \
  --preset qwen3-235b-a22b,deepseek-v3,gpt-oss-120b --tokens 4,16,64 --scheme fp8_per_tensor
[ "$(left)" -gt 60 ] && AB_SECONDS=$(( $(left) - 20 )) REPS=2 ab warm "env MOEKIT_EXPERT_MLP_WARM_ACT=0 $BB" "$BB" $ARGS \
  --preset qwen3-30b-a3b --tokens 8,64,256 --scheme bf16,fp8_per_tensor
finish

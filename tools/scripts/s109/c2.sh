#!/usr/bin/env bash
# s109 c2 (on the warm machine of c1 or a fresh one): the warm warp right after the routing (1)
# against after the CTA's first stage has landed (2) and off (0), expert_mlp forced at qwen3-30b TP8
# M = 4..256, both schemes; the phase tables for 0 / 1 / 2. carry [".deps"].
set -u
LIMIT=${LIMIT:-400}
source tools/scripts/device_call.sh
build_bench || exit 1
echo "built (left $(left)s)"
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp --preset qwen3-30b-a3b --tokens 4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor"
AB_SECONDS=$(( $(left) > 300 ? 120 : $(left) / 3 )) REPS=2 ab w0w2 "env MOEKIT_EXPERT_MLP_WARM_ACT=0 $BB" "env MOEKIT_EXPERT_MLP_WARM_ACT=2 $BB" $ARGS
AB_SECONDS=$(( $(left) > 150 ? 120 : $(left) - 20 )) REPS=2 ab w1w2 "env MOEKIT_EXPERT_MLP_WARM_ACT=1 $BB" "env MOEKIT_EXPERT_MLP_WARM_ACT=2 $BB" $ARGS
finish

#!/usr/bin/env bash
# s130 c1 (prepared in session 83): fp8_per_channel's kPlain kernels (MOEKIT_EXPERT_MLP_PLAIN_CHANNEL,
# off by default, never yet run). Builds this tree, runs their bitwise test and the per-expert MLP
# tests beside it, memcheck / racecheck on the new test's one-CTA and cluster cases, then the
# same-run A/B of the switch (=1 against unset, one build: separate instantiations, so the general
# kernel's code is the same on both sides) at qwen3-30b TP8 fp8_per_channel M = 8..256 (the general
# kChannel kernel ran 0.900x of 2f78ff0 there) and the cluster presets at M = 16, 64. If it gains,
# kPlainChannelDefault (params.hpp) goes to true and the TP8 channel + block128 grid runs.
# carry [".deps/googletest"]; LIMIT seconds (default 560).
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.PlainChannelKernelGivesTheSameBits:Sm90ExpertMlp.PlainKernelGivesTheSameBits:Sm90ExpertMlp.*PerChannel*:Sm90Dispatch.*' 120
sanitize memcheck 'Sm90ExpertMlp.PlainChannelKernelGivesTheSameBits' 120
ARGS="--backend cuda --no-baseline --no-host-time --check --tp 8 --scheme fp8_per_channel"
AB_SECONDS=100 REPS=2 ab plain-channel "$BB" "env MOEKIT_EXPERT_MLP_PLAIN_CHANNEL=1 $BB" $ARGS --preset qwen3-30b-a3b \
  --tokens 8,16,32,64,128,256
AB_SECONDS=80 REPS=2 ab plain-channel-cluster "$BB" "env MOEKIT_EXPERT_MLP_PLAIN_CHANNEL=1 $BB" $ARGS \
  --preset qwen3-235b-a22b,deepseek-v3 --tokens 16,64
finish

#!/usr/bin/env bash
# Branch s80's first device call: fp8_per_channel on the per-expert MLP kernel's cluster form (the
# ranks exchange their slices' row absmaxes; qwen3-235b / deepseek-v3 TP8), forced by name only:
#   1. main's moekit-bench (.ab/mid) beside; build; Sm90ExpertMlp.* (the new
#      ClusterSlicesFp8PerChannelMatchReference), Preload.* (16 kernels), Sm90Fuzz.*; memcheck and
#      racecheck on SmallForSanitizers (per channel at N = 224: three ranks; several units a cluster);
#   2. same build: fp8_per_channel auto against expert_mlp forced, qwen3-235b TP8 M = 1..256 and
#      deepseek-v3 TP8 M = 1..64, two repeats (the router's band for the cluster form);
#   3. main -> tree, auto, fp8_per_channel at qwen3-30b TP8 M = 8..256 (the one-CTA per-channel
#      kernel's layout and code moved: red_cluster's rows, the activation's unit parity).
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid and stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90ExpertMlp.*:Preload.*:Sm90Fuzz.*:-Sm90ExpertMlp.PhaseBreakdown" 170
for tool in memcheck racecheck; do sanitize $tool Sm90ExpertMlp.SmallForSanitizers 90; cp $O/$tool.log $O/$tool-small.log; done
REPS=2 AB_SECONDS=120 ab channel-cluster "$BB" "env MOEKIT_PATH=expert_mlp $BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset qwen3-235b-a22b,deepseek-v3 --tokens 1,2,4,8,16,32,64,128,256 --scheme fp8_per_channel
wait_main_build || { echo "no main build"; tail -3 $O/mid-build.log; finish; exit 1; }
REPS=2 AB_SECONDS=$(( $(left) - 15 )) ab main-tree "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset qwen3-30b-a3b --tokens 8,16,64,256 --scheme fp8_per_channel
finish

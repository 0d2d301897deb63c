#!/usr/bin/env bash
# Branch s78's device call: fp8_per_channel on the per-expert MLP kernel's one-CTA form (forced
# only), against main:
#   1. main's moekit-bench (.ab/mid) beside; build; the new Fp8PerChannelMatchesReference and the
#      rest of Sm90ExpertMlp.*, Preload.* (two more kernels registered), Sm90Fuzz.*; memcheck and
#      racecheck on SmallForSanitizers (its per-channel cases: several units a CTA re-stage the scales);
#   2. same build: fp8_per_channel auto (the previous plans) against expert_mlp forced, qwen3-30b
#      TP8 M = 1..256, two repeats (the router's band for it comes from this);
#   3. main -> tree, auto, bf16 and fp8_per_tensor at qwen3-30b TP8 M = 8..256: the 16-bit one-CTA
#      kernels compile to other code (220 -> 217 registers) with the patch; their bits are the same.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid and stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90ExpertMlp.*:Preload.*:Sm90Fuzz.*:-Sm90ExpertMlp.PhaseBreakdown" 150
for tool in memcheck racecheck; do sanitize $tool Sm90ExpertMlp.SmallForSanitizers 90; cp $O/$tool.log $O/$tool-small.log; done
REPS=2 AB_SECONDS=120 ab channel "$BB" "env MOEKIT_PATH=expert_mlp $BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset qwen3-30b-a3b --tokens 1,2,4,8,16,32,64,128,256 --scheme fp8_per_channel
wait_main_build || { echo "no main build"; tail -3 $O/mid-build.log; finish; exit 1; }
REPS=2 AB_SECONDS=100 ab main-tree "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset qwen3-30b-a3b --tokens 8,16,64,256 --scheme bf16,fp8_per_tensor
finish

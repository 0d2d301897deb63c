#!/usr/bin/env bash
# Branch s79 (main + tools/scripts/s76/rows8_tma.patch + tools/scripts/s78/channel.patch, session 64),
# first device call:
#   1. gpu_check.sh: configure, build; main's moekit-bench (.ab/mid) then builds in the background
#      for the next call; the whole GPU suite (session 63's Sm90Faults.QuadRoutingRecordsBadIds and
#      the routing test's new slot counts have not run; s76's and s78's new tests), memcheck and
#      racecheck on gpu_check's subset (SmallForSanitizers carries s78's per-channel cases);
#   2. memcheck on the new tests;
#   3. s76's A/B: copies -> TMA row pairs, gpt-oss TP8 M = 16..256, fp8 per tensor and per channel.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid and stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh "$O/check" >"$O/check-build.txt" 2>&1
grep -E "^(configure|build) " "$O/check-build.txt"
[ -x "$BB" ] || { echo "no build"; finish; exit 1; }
echo "built (left $(left)s)"
start_main_build
MOEKIT_STEPS=gpu-suite,memcheck,racecheck MOEKIT_T_GPU=260 bash tools/scripts/gpu_check.sh "$O/check" >"$O/check.txt" 2>&1
grep -E "^(gpu-suite|memcheck|racecheck) |gpu suite:|ptxas" "$O/check.txt" | head -8
grep -E "\(Failed\)|\*\*\*Failed|Timeout" "$O/check/gpu_tests.log" | head -10
echo "suite done (left $(left)s)"
sanitize memcheck "Sm90SlotRouting.*:Sm90Faults.QuadRoutingRecordsBadIds:Sm90SwapAbGemm.EightByteRowPairsGiveTheCopiesBits:Sm90ExpertMlp.Fp8PerChannelMatchesReference" 100
REPS=2 AB_SECONDS=$(( $(left) - 60 )) ab gptoss-rows8 "env MOEKIT_SWAPAB_ROWS8_TMA=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b --tokens 16,32,64,128,256 --scheme fp8_per_tensor,fp8_per_channel
wait_main_build && echo "main built (left $(left)s)"
finish

#!/usr/bin/env bash
# s130 c1 (prepared in session 83; the first call of the next device time, any Hopper): what session
# 83 left unrun, most valuable first.
#   1. This tree's build; fp8_per_channel's kPlain kernels' bitwise test (MOEKIT_EXPERT_MLP_PLAIN_CHANNEL,
#      off by default, never yet run) with the per-expert MLP per-channel tests, the dispatch, PDL
#      and router-range tests; memcheck on the new test.
#   2. The same-run A/B of the switch (=1 against unset; one build, separate instantiations, so the
#      general kernel's code is the same on both sides) at qwen3-30b TP8 fp8_per_channel M = 8..256,
#      where the general kChannel kernel ran 0.900x of 2f78ff0. If it gains, kPlainChannelDefault
#      (params.hpp) goes to true.
#   3. The router change babf403 (mixtral TP8 fp8_per_tensor M = 2..8 on Swap-AB's plain kernels,
#      from a sweep, no grid yet): the path sweep at mixtral TP8 M = 1..16 (auto now the new rule),
#      then the TP8 grid against this GPU's last.
#   4. deepseek-v3 TP8 fp8 M = 4..16 with expert_mlp and Swap-AB beside auto (M = 8: Swap-AB 1.08x
#      ahead of gemv(mma) in session 83's sweep; expert_mlp 1.07x in session 62's).
# Then tools/scripts/s129/c1.sh (the per-channel slowdown's bisect) as the second call.
# carry [".deps/googletest"]; LIMIT seconds (default 570).
set -u
LIMIT=${LIMIT:-570}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.PlainChannelKernelGivesTheSameBits:Sm90ExpertMlp.*PerChannel*:Sm90Dispatch.*:Sm90ExpertMlp.AutoTakes*:Sm90Pdl.*' 150
sanitize memcheck 'Sm90ExpertMlp.PlainChannelKernelGivesTheSameBits' 90
ARGS="--backend cuda --no-baseline --no-host-time --check --tp 8"
AB_SECONDS=100 REPS=2 ab plain-channel "$BB" "env MOEKIT_EXPERT_MLP_PLAIN_CHANNEL=1 $BB" $ARGS --scheme fp8_per_channel \
  --preset qwen3-30b-a3b --tokens 8,16,32,64,128,256
timeout 60 $BB $ARGS --path auto,swapab,tokmajor,gemv --preset mixtral-8x7b --tokens 1,2,4,6,8,9,12,16 \
  --scheme fp8_per_tensor,bf16 --json "$O/sweep-mixtral.json" >"$O/sweep-mixtral.log" 2>&1
echo "sweep mixtral rc=$? (left $(left)s)"
python3 tools/scripts/path_report.py "$O/sweep-mixtral.json" 2>&1 | tail -n 20
[ "$(left)" -gt 60 ] && grid_tp8
if [ "$(left)" -gt 40 ]; then
  timeout $(( $(left) - 15 )) $BB $ARGS --path auto,swapab,expert_mlp --preset deepseek-v3 --tokens 4,8,12,16 \
    --scheme fp8_per_tensor --json "$O/sweep-deepseek.json" >"$O/sweep-deepseek.log" 2>&1
  echo "sweep deepseek rc=$? (left $(left)s)"
  python3 tools/scripts/path_report.py "$O/sweep-deepseek.json" 2>&1 | tail -n 8
fi
finish

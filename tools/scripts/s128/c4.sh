#!/usr/bin/env bash
# s128 c4 (session 83; prepared, not run: the device paused lending before it; tools/scripts/s130/c1.sh
# carries its items with the per-channel plain kernels for the next device time): the router's
# mixtral TP8 fp8_per_tensor change (babf403: gemv(mma) at 1 and 9 tokens, Swap-AB's plain kernels
# from 2 tokens to 16 slots; c2's sweep had Swap-AB 1.09-1.14x ahead at M = 2 / 4 / 8) built and
# checked: the dispatch GPU tests, the same-run path sweep at mixtral TP8 M = 1..16 (auto now the
# new rule), the TP8 grid against main's (c1, 7ce5bf7); then c3's per-channel questions (what each
# build dispatches, both builds' kernel times at qwen3-30b fp8_per_channel M = 64) and a deepseek-v3
# TP8 fp8 sweep with expert_mlp. carry [".deps/googletest", ".ab/mid"] (.ab/mid = 2f78ff0).
set -u
LIMIT=${LIMIT:-400}
source tools/scripts/device_call.sh
MID_JOBS=${MID_JOBS:-4} start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90Dispatch.*:Sm90ExpertMlp.AutoTakes*:Sm90Pdl.*' 60
timeout 60 $BB --backend cuda --no-baseline --no-host-time --check --path auto,swapab,tokmajor,gemv \
  --tp 8 --preset mixtral-8x7b --tokens 1,2,4,6,8,9,12,16 --scheme fp8_per_tensor,bf16 \
  --json "$O/sweep-mixtral.json" >"$O/sweep-mixtral.log" 2>&1
echo "sweep mixtral rc=$? (left $(left)s)"
python3 tools/scripts/path_report.py "$O/sweep-mixtral.json" 2>&1 | tail -n 20
[ "$(left)" -gt 60 ] && grid_tp8 bench/results/2026-12-08-7ce5bf7-h100-s128-grid-tp8.json
CH="--backend cuda --no-baseline --no-host-time --check --tp 8 --scheme fp8_per_channel --preset qwen3-30b-a3b"
if [ "$(left)" -gt 60 ] && wait_main_build; then
  for b in "$MB" "$BB"; do
    MOEKIT_LOG_DISPATCH=1 timeout 20 $b $CH --tokens 64 --iters 2 2>&1 | grep -iE "dispatch|expert_mlp" | head -n 3 | cut -c1-400
    timeout 30 bash tools/scripts/profile_kernels.sh $b "qwen3-30b-a3b 8 64 fp8_per_channel" 2>&1 | cut -c1-170 | head -n 6
  done
fi
echo "per-channel done (left $(left)s)"
if [ "$(left)" -gt 30 ]; then
  timeout $(( $(left) - 10 )) $BB --backend cuda --no-baseline --no-host-time --check --path auto,swapab,tokmajor,expert_mlp \
    --tp 8 --preset deepseek-v3 --tokens 4,8,12,16 --scheme fp8_per_tensor \
    --json "$O/sweep-deepseek.json" >"$O/sweep-deepseek.log" 2>&1
  echo "sweep deepseek rc=$? (left $(left)s)"
  python3 tools/scripts/path_report.py "$O/sweep-deepseek.json" 2>&1 | tail -n 8
fi
finish

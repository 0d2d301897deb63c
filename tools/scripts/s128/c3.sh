#!/usr/bin/env bash
# s128 c3 (session 83). c2 found, same run on an H100: qwen3-30b TP8 fp8_per_channel M = 8..256 runs
# 0.900x median (0.877-0.975) of 2f78ff0's build, and MOEKIT_EXPERT_MLP_TWO_BOXES=0 is slower still
# (the default 1.036x over it), so two w13 boxes are not the cause. Here: what each build dispatches
# there, main with each later switch off (the warm warp, GEMM2 as Swap-AB, the plain kernels), the
# per-kernel times of both builds at M = 64; then a path sweep (auto, swapab, tokmajor, gemv) at
# mixtral TP8 M = 1..16 and deepseek-v3 TP8 M = 4..16, where c2 had Swap-AB's plain kernels ahead of
# auto's gemv(mma) by 1.05-1.14x. carry [".deps/googletest", ".ab/mid"] (.ab/mid = 2f78ff0).
set -u
LIMIT=${LIMIT:-450}
source tools/scripts/device_call.sh
MID_JOBS=${MID_JOBS:-6} start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
CH="--backend cuda --no-baseline --no-host-time --check --tp 8 --scheme fp8_per_channel --preset qwen3-30b-a3b"
wait_main_build || { echo "2f78ff0's build failed"; tail -5 "$O/mid-build.log"; }
for b in "$MB" "$BB"; do
  MOEKIT_LOG_DISPATCH=1 timeout 30 $b $CH --tokens 16,64 --iters 2 2>&1 | grep -iE "dispatch|path|expert_mlp" | head -n 6
done
for sw in WARM_ACT G2_SWAP PLAIN; do
  AB_SECONDS=40 REPS=2 ab "off-$sw" "env MOEKIT_EXPERT_MLP_$sw=0 $BB" "$BB" $CH --tokens 16,64,256
done
for b in "$MB" "$BB"; do
  [ -x "$b" ] && timeout 40 bash tools/scripts/profile_kernels.sh $b "qwen3-30b-a3b 8 64 fp8_per_channel" 2>&1 | cut -c1-170 | head -n 8
done
echo "profiled (left $(left)s)"
if [ "$(left)" -gt 40 ]; then
  timeout $(( $(left) - 15 )) $BB --backend cuda --no-baseline --no-host-time --check --path auto,swapab,tokmajor,gemv \
    --tp 8 --preset mixtral-8x7b --tokens 1,2,3,4,6,8,10,12,16 --scheme bf16,fp8_per_tensor \
    --json "$O/sweep-mixtral.json" >"$O/sweep-mixtral.log" 2>&1
  echo "sweep mixtral rc=$? (left $(left)s)"
  python3 tools/scripts/path_report.py "$O/sweep-mixtral.json" 2>&1 | tail -n 22
fi
if [ "$(left)" -gt 35 ]; then
  timeout $(( $(left) - 10 )) $BB --backend cuda --no-baseline --no-host-time --check --path auto,swapab,tokmajor \
    --tp 8 --preset deepseek-v3 --tokens 4,6,8,12,16 --scheme fp8_per_tensor,bf16 \
    --json "$O/sweep-deepseek.json" >"$O/sweep-deepseek.log" 2>&1
  echo "sweep deepseek rc=$? (left $(left)s)"
  python3 tools/scripts/path_report.py "$O/sweep-deepseek.json" 2>&1 | tail -n 14
fi
# TP1 mixtral where the few-experts Swap-AB bound (10 slots) sends M = 6, 8 to token-major: the plain
# Swap-AB kernels (at most 16 rows) came after session 39's sweep that set it.
if [ "$(left)" -gt 45 ]; then
  timeout $(( $(left) - 10 )) $BB --backend cuda --no-baseline --no-host-time --check --path auto,swapab,tokmajor \
    --tp 1 --preset mixtral-8x7b --tokens 4,6,8 --scheme fp8_per_tensor,bf16 \
    --json "$O/sweep-mixtral-tp1.json" >"$O/sweep-mixtral-tp1.log" 2>&1
  echo "sweep mixtral tp1 rc=$? (left $(left)s)"
  python3 tools/scripts/path_report.py "$O/sweep-mixtral-tp1.json" 2>&1 | tail -n 10
fi
finish

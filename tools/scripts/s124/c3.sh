#!/usr/bin/env bash
# s124 c3 of 3 (run in session 81 on an H100, c1 and c2 only: results in docs/perf.md "Session 81"; c1.sh says what the tree holds): on the same warm machine, racecheck and memcheck
# of the changes' small cases (the per-expert MLP kernel's gpt-oss cases run Plain::kOai;
# token-major's small cases its twins; Swap-AB's PlainSmallForSanitizers its kPlain kernels;
# memcheck also the GEMV one-token test and the permutation-only routing kernels); the A/B main ->
# tree of s124 alone (gpt-oss TP8 M = 128, 256 on auto's Swap-AB chain, whose routing launch is the
# only changed kernel there); the TP8 grid (router retune + the five changes) against c6e1d5f's;
# with the time left, a same-run sweep of auto against the forced paths where the router may move
# (gpt-oss TP8 M = 64..256: expert_mlp vs Swap-AB).
# carry [".deps", ".ab/mid"]; LIMIT seconds (default 390). The three calls take ~26 of a session's
# 30 device minutes with the start: run them in order on one warm machine, nothing before them.
set -u
LIMIT=${LIMIT:-390}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
SMALL='Sm90ExpertMlp.SmallForSanitizers:Sm90Tokmajor*.SmallForSanitizers:Sm90SwapAbGemm.PlainSmallForSanitizers'
sanitize racecheck "$SMALL" 80
sanitize memcheck "$SMALL:Sm90Dispatch.GemvOneTokenBitwiseEqualToGeneral:Sm90Permute.PermuteOnlyKernels" 75
ARGS="--backend cuda --no-baseline --no-host-time --check"
if wait_main_build; then
  AB_SECONDS=40 REPS=2 ab plain-route "$MB" "$BB" $ARGS --tp 8 --preset gpt-oss-120b --tokens 128,256 \
    --scheme bf16,fp8_per_tensor
fi
PREV=bench/results/2026-12-07-c6e1d5f-h100-s118-grid-tp8.json
grep -q H200 "$O/gpu.txt" && PREV=bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json
[ "$(left)" -gt 150 ] && grid_tp8 "$PREV"
if [ "$(left)" -gt 50 ]; then
  timeout $(( $(left) - 10 )) $BB $ARGS --tp 8 --path auto,expert_mlp,swapab --preset gpt-oss-120b --tokens 64,128,256 \
    --scheme bf16,fp8_per_tensor --json "$O/sweep-tp8.json" >"$O/sweep-tp8.log" 2>&1
  echo "sweep tp8 rc=$? (left $(left)s)"
fi
finish

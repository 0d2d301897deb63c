#!/usr/bin/env bash
# s118 c2: the kPlain kernels in the cluster form too (qwen3-235b N = 192 on 2 CTAs, deepseek-v3
# N = 256 on 3: 76.9 KB of code in bf16 against the general cluster kernel's 187.2, 83.1 against
# 220.1 in e4m3; 176-182 registers against 254). Builds this tree and main's moekit-bench (.ab/mid);
# the expert_mlp tests; A/B main -> tree (forced expert_mlp, TP8, check on) at the cluster presets
# and qwen3-30b; a same-run sweep of auto against forced expert_mlp at M = 1..8 (the router's
# gemv / expert_mlp boundary); sanitizers; the TP8 grid.
# carry [".deps", ".ab/mid"]; LIMIT seconds (default 480).
# Stage: on branch s118, tools/scripts/ab_base.sh main .ab/mid && tools/scripts/stamp_tree.sh.
set -u
LIMIT=${LIMIT:-480}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' 150
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check"
if wait_main_build; then
  AB_SECONDS=150 REPS=2 ab plain "$MB" "$BB" $ARGS --path expert_mlp \
    --preset qwen3-235b-a22b,deepseek-v3,qwen3-30b-a3b --tokens 1,4,8,16,64,256 --scheme bf16,fp8_per_tensor
else
  echo "main's build failed"; tail -5 "$O/mid-build.log"
fi
for r in 1 2; do
  timeout 60 $BB $ARGS --path auto,expert_mlp --preset qwen3-30b-a3b,qwen3-235b-a22b,deepseek-v3 \
    --tokens 1,2,3,4,5,6,7,8 --scheme bf16,fp8_per_tensor --json "$O/sweep-$r.json" >"$O/sweep-$r.log" 2>&1
  echo "sweep $r rc=$? (left $(left)s)"
done
sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers:Sm90ExpertMlp.ClusterSlicesEdgeCases' 40
sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers:Sm90ExpertMlp.ClusterSlicesEdgeCases' 40
if [ "$(left)" -gt 60 ]; then
  PREV=bench/results/2026-12-07-3a1fdbc-h100-s118-grid-tp8.json
  grep -q H200 "$O/gpu.txt" && PREV=bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json
  grid_tp8 "$PREV"
fi
finish

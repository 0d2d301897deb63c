#!/usr/bin/env bash
# s116 c1: the per-expert MLP kernel's GEMM1 gives a ring stage back once its own MMAs are done
# (wgmma.wait_group 0) instead of once the next stage has landed. The stream probe (session 78) put
# the old release order at 10-18 % of a CTA's stream where few CTAs stream. (The same change in the
# cluster form's GEMM2 loop made ptxas serialize every wgmma of the cluster kernels, C7520; left out.)
# Builds: this tree (gpu_check) and main's moekit-bench (.ab/mid) beside it; the expert_mlp tests;
# A/B main -> tree (TP8, forced expert_mlp, check on); racecheck and memcheck of the small cases;
# where the A/B's median gains, the TP8 grid (auto, baselines, check on) against the same GPU kind's last.
# carry [".deps", ".ab/mid"]; LIMIT seconds (default 580).
# Ran in session 79 (H100; bench/results/2026-12-07-c8862a4-h100-s116-early-release-ab.md). To stage it again:
#   git checkout -b s116 main && git apply tools/scripts/s116/early_release.patch && git commit -qam s116
#   tools/scripts/ab_base.sh main .ab/mid && tools/scripts/stamp_tree.sh
set -u
LIMIT=${LIMIT:-580}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s); C7520 in expert_mlp: $(grep -c 'C7520.*expert_mlp' "$O/b/build.log")"
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' 120
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check --path expert_mlp"
if wait_main_build; then
  AB_SECONDS=190 REPS=2 ab release "$MB" "$BB" $ARGS \
    --preset qwen3-30b-a3b,qwen3-235b-a22b,deepseek-v3,gpt-oss-120b --tokens 1,4,8,16,64 --scheme bf16,fp8_per_tensor
else
  echo "main's build failed"; tail -5 "$O/mid-build.log"
fi
sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 25
sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers' 20
med=$(grep -m1 "^| TP8 M<=256 |" "$O/ab-release/compare.md" 2>/dev/null | awk -F'|' '{print $4}')
echo "median B/A: $med"
if [ -n "$med" ] && python3 -c "import sys; sys.exit(0 if float('$med') >= 1.005 else 1)" && [ "$(left)" -gt 200 ]; then
  PREV=bench/results/2026-12-07-3e96004-h100-s111-grid-tp8.json
  grep -q H200 "$O/gpu.txt" && PREV=bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json
  grid_tp8 "$PREV"
fi
finish

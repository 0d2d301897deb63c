#!/usr/bin/env bash
# Branch s68's second call, after the lean gather measured 1.004-1.230x (c1.sh):
#   1. gpu_check.sh's build, the whole GPU suite, memcheck and racecheck on
#      Sm90ExpertMlp.SmallForSanitizers;
#   2. the same-run path sweep where the lean gather should move the router's crossovers:
#      expert_mlp forced against auto at qwen3-30b TP8 M = 1..16 (both schemes), qwen3-235b TP8
#      (clusters of 2) M = 2..32 and deepseek-v3 TP8 (clusters of 3, forced only today) M = 1..64,
#      two repeats (tools/scripts/path_report.py reads them);
#   3. the TP8 grid of this tree (auto, baselines, check on) against main's H100 grid of 6b5076c.
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-585}
source tools/scripts/device_call.sh
MOEKIT_STEPS=configure,build,gpu-suite,memcheck,racecheck MOEKIT_T_GPU=200 MOEKIT_T_MEMCHECK=60 MOEKIT_T_RACECHECK=60 \
  MOEKIT_SANITIZER_FILTER=Sm90ExpertMlp.SmallForSanitizers MOEKIT_RACECHECK_FILTER=Sm90ExpertMlp.SmallForSanitizers \
  bash tools/scripts/gpu_check.sh $O/check >$O/check.txt 2>&1
sed -n '/moekit gpu_check:/,$p' $O/check.txt | head -14; echo "(left $(left)s)"
[ -x "$BB" ] || { echo "no build"; finish; exit 1; }
SW="--backend cuda --tp 8 --path expert_mlp,auto --check --no-baseline --no-host-time"
for i in 1 2; do
  timeout 60 $BB $SW --preset qwen3-30b-a3b --tokens 1,2,3,4,5,6,8,10,12,16 --scheme bf16,fp8_per_tensor \
    --json $O/sweep-q30-$i.json >$O/sweep-q30-$i.log 2>&1; echo "sweep q30 $i rc=$? (left $(left)s)"
  timeout 60 $BB $SW --preset qwen3-235b-a22b --tokens 2,4,8,12,16,20,24,32 --scheme bf16,fp8_per_tensor \
    --json $O/sweep-q235-$i.json >$O/sweep-q235-$i.log 2>&1; echo "sweep q235 $i rc=$? (left $(left)s)"
  timeout 80 $BB $SW --preset deepseek-v3 --tokens 1,2,4,8,16,32,64 --scheme bf16,fp8_per_tensor \
    --json $O/sweep-ds-$i.json >$O/sweep-ds-$i.log 2>&1; echo "sweep ds $i rc=$? (left $(left)s)"
done
python3 tools/scripts/path_report.py $O/sweep-*.json >$O/path-report.md 2>&1; head -60 $O/path-report.md
if [ $(left) -gt 100 ]; then
  timeout $(( $(left) - 20 )) $BB --backend cuda --preset all --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
    --scheme bf16,fp8_per_tensor --check --no-host-time --json $O/grid-tp8.json >$O/grid-tp8.log 2>&1
  echo "grid tp8 rc=$? (left $(left)s)"
  python3 tools/scripts/grid_report.py $O/grid-tp8.json --previous bench/results/2026-12-06-6b5076c-h100-grid-tp8.json \
    --out $O/grid-tp8-report.md 2>&1 | head -n 4
fi
finish

#!/usr/bin/env bash
# Session 58's second device call, main after the merge of s58 (the cluster form, the one-CTA form
# without its code, the cluster form's auto band at N = 192): build; the TP8 grid (bf16,
# fp8_per_tensor, M = 1..256, check on) with its report against the last grid of the same GPU kind;
# the TP1 grid if time allows; then the GPU suite with the time left. The previous grids: the
# H200's at 795e23e (session 46), the H100's at 155edf1 (TP8, session 54) and 30f2b87 (TP1).
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU" | tee $O/gpu.txt
case "$GPU" in *H200*) PREV=bench/results/2026-12-05-795e23e-h200-grid-tp ;; *) PREV=bench/results/2026-12-05-155edf1-h100-grid-tp ;; esac
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh $O/b >$O/build.txt 2>&1; tail -n 2 $O/build.txt
B=build/cuda-release; BB=$B/tools/bench/moekit-bench
[ -x $BB ] || { echo "no build"; bash tools/scripts/pack_out.sh $O; exit 1; }
for tp in 8 1; do
  [ $(left) -gt 200 ] || break
  timeout 150 $BB --backend cuda --preset all --tp $tp --tokens 1,2,4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor \
    --check --no-host-time --json $O/grid-tp$tp.json >$O/grid-tp$tp.log 2>&1
  echo "grid tp$tp rc=$?"
  P=$PREV$tp.json; [ -f $P ] || P=bench/results/2026-12-05-30f2b87-h100-grid-tp$tp.json
  python3 tools/scripts/grid_report.py $O/grid-tp$tp.json --previous $P --out $O/grid-tp$tp-report.md 2>&1 | head -n 4
done
if [ $(left) -gt 60 ]; then
  MOEKIT_STEPS=gpu-suite MOEKIT_T_GPU=$(( $(left) - 15 )) bash tools/scripts/gpu_check.sh $O/suite >$O/suite.txt 2>&1
  tail -n 4 $O/suite.txt; grep -E "tests passed|tests failed|\(Failed\)|Timeout" $O/suite/gpu_tests.log | head -10
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

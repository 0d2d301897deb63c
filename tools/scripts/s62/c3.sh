#!/usr/bin/env bash
# Branch s62's third device call: hand-off form 4 (every consumer thread arrives on the slot
# list's barrier, count 128, so each writer releases its own stores: c2.sh found racecheck flags
# forms 0, 2 and 3 but not the late form 1). The hand-off tests; racecheck of forms 4 and 0 (form 0
# with the per-hazard report); same-build A/Bs 1 -> 4 and 0 -> 4 at qwen3-30b TP8 and 1 -> 4 at
# qwen3-235b TP8 (the cluster form).
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU" | tee $O/gpu.txt
B=build/cuda-release; BB=$B/tools/bench/moekit-bench
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh $O/b >$O/build.txt 2>&1; tail -n 1 $O/build.txt
[ -x $BB ] || { echo "no build"; bash tools/scripts/pack_out.sh $O; exit 1; }
timeout 120 $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.SlotHandoff*:Sm90ExpertMlp.SmallForSanitizers:Sm90ExpertMlp.PhaseBreakdown" >$O/tests.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ') (left $(left)s)"
grep -E "FAILED|Failure|differ" $O/tests.log | head -10
MOEKIT_EXPERT_MLP_SLOT_HANDOFF=4 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/moekit_cuda_tests \
  --gtest_filter="Sm90ExpertMlp.SmallForSanitizers" >$O/memcheck-4.log 2>&1
echo "memcheck SLOT_HANDOFF=4 rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck-4.log | head -1)"
for mode in 4 0; do
  MOEKIT_EXPERT_MLP_SLOT_HANDOFF=$mode timeout 100 compute-sanitizer --tool racecheck --racecheck-report hazard \
    --print-limit 12 --error-exitcode 3 $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.SmallForSanitizers" \
    >$O/racecheck-$mode.log 2>&1
  echo "racecheck SLOT_HANDOFF=$mode rc=$? $(grep -E 'RACECHECK SUMMARY' $O/racecheck-$mode.log | head -1) (left $(left)s)"
done
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
PTS="--preset qwen3-30b-a3b --tokens 16,32,64,128,256 --scheme bf16,fp8_per_tensor"
ab() {  # name "A prefix" "B prefix" args...
  local n=$1 a=$2 b=$3; shift 3
  echo "== $n (left $(left)s)"
  timeout 120 bash tools/scripts/ab_bench.sh $O/ab-$n ${REPS:-2} "$a" "$b" "$@" 2>&1 | grep -E "^\| (qwen|TP8)|failed" | head -n 14
}
H="env MOEKIT_EXPERT_MLP_SLOT_HANDOFF"
ab handoff-1-4 "$H=1 $BB" "$H=4 $BB" $CHK $PTS
ab handoff-0-4 "$H=0 $BB" "$H=4 $BB" $CHK $PTS
ab handoff-1-4-235b "$H=1 $BB" "$H=4 $BB" $CHK --preset qwen3-235b-a22b --tokens 32,64,256 --scheme bf16,fp8_per_tensor
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

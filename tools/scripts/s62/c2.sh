#!/usr/bin/env bash
# Branch s62's second device call: the slot list's hand-off to the producer in four forms
# (MOEKIT_EXPERT_MLP_SLOT_HANDOFF; c1.sh found the early one worth 1.030x median over the late one,
# and racecheck reporting the producer's read against place_window's write only with it): the
# expert_mlp tests; memcheck, and racecheck of each form on SmallForSanitizers (now with several
# units a CTA); same-build A/Bs of the late form (1) against forms 0, 2 and 3 at qwen3-30b TP8
# M = 16..256 both schemes; then main -> this tree.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid, then tools/scripts/stamp_tree.sh.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU" | tee $O/gpu.txt
B=build/cuda-release; BB=$B/tools/bench/moekit-bench; MB=build/mid/tools/bench/moekit-bench
( [ -x $MB ] || { cmake -S .ab/mid -B build/mid -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
    >$O/mid-configure.log 2>&1 && cmake --build build/mid --target moekit-bench -j 6 >$O/mid-build.log 2>&1; } ) & MP=$!
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh $O/b >$O/build.txt 2>&1; tail -n 1 $O/build.txt
[ -x $BB ] || { echo "no build"; bash tools/scripts/pack_out.sh $O; exit 1; }
timeout 200 $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.*:Preload.*:Sm90Faults.*" >$O/tests.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ') (left $(left)s)"
grep -E "FAILED|Failure|differ" $O/tests.log | head -20
grep -E "phases \]   (first GEMM1|consumers done|GEMM1 incl|producer waiting for slots)|phases \] expert_mlp" $O/tests.log | head -24
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/moekit_cuda_tests \
  --gtest_filter="Sm90ExpertMlp.SmallForSanitizers" >$O/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.log | head -1)"
for mode in 0 1 2 3; do
  MOEKIT_EXPERT_MLP_SLOT_HANDOFF=$mode timeout 100 compute-sanitizer --tool racecheck --error-exitcode 3 \
    $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.SmallForSanitizers" >$O/racecheck-$mode.log 2>&1
  echo "racecheck SLOT_HANDOFF=$mode rc=$? $(grep -E 'RACECHECK SUMMARY' $O/racecheck-$mode.log | head -1) (left $(left)s)"
  grep -E "Race reported|hazards\]" $O/racecheck-$mode.log | cut -c1-160 | head -4
done
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
PTS="--preset qwen3-30b-a3b --tokens 16,32,64,128,256 --scheme bf16,fp8_per_tensor"
ab() {  # name "A prefix" "B prefix" args...
  local n=$1 a=$2 b=$3; shift 3
  echo "== $n (left $(left)s)"
  timeout 120 bash tools/scripts/ab_bench.sh $O/ab-$n ${REPS:-2} "$a" "$b" "$@" 2>&1 | grep -E "^\| (qwen|TP8)|failed" | head -n 14
}
L="env MOEKIT_EXPERT_MLP_SLOT_HANDOFF=1 $BB"
ab handoff-1-0 "$L" "$BB" $CHK $PTS
ab handoff-1-2 "$L" "env MOEKIT_EXPERT_MLP_SLOT_HANDOFF=2 $BB" $CHK $PTS
ab handoff-1-3 "$L" "env MOEKIT_EXPERT_MLP_SLOT_HANDOFF=3 $BB" $CHK $PTS
wait $MP
[ -x $MB ] && [ $(left) -gt 60 ] && ab main-tree "$MB" "$BB" $CHK $PTS
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

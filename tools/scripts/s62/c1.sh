#!/usr/bin/env bash
# Branch s62's device call (README beside it). Builds this tree and main (.ab/mid, moekit-bench
# only); the expert_mlp, preload and fault tests with their phase tables (RingDepthAndSlotHandoff-
# GiveTheSameBits: every ring depth and hand-off the same bits); memcheck, and racecheck with the
# slot list handed over early (default) and late (MOEKIT_EXPERT_MLP_SLOTS_LATE=1: s61's racecheck
# of the cluster form reported the producer's read against place_window's write); same-build A/Bs
# of the ring's depth (5 -> 6, 4 -> 5), the hand-off (late -> early) and the stages ahead (2 -> 1),
# then main -> this tree: qwen3-30b TP8 (expert_mlp's one-CTA form) M = 16..256 both schemes, and
# qwen3-235b TP8 (the cluster form) M = 32..256.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid, then tools/scripts/stamp_tree.sh.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU" | tee $O/gpu.txt
B=build/cuda-release; BB=$B/tools/bench/moekit-bench; MB=build/mid/tools/bench/moekit-bench
( cmake -S .ab/mid -B build/mid -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
    >$O/mid-configure.log 2>&1 && cmake --build build/mid --target moekit-bench -j 6 >$O/mid-build.log 2>&1 ) & MP=$!
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh $O/b >$O/build.txt 2>&1; tail -n 1 $O/build.txt
[ -x $BB ] || { echo "no build"; bash tools/scripts/pack_out.sh $O; exit 1; }
timeout 200 $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.*:Preload.*:Sm90Faults.*" >$O/tests.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ') (left $(left)s)"
grep -E "FAILED|Failure|differ" $O/tests.log | head -20
grep -E "phases \]   (first GEMM1|consumers done|GEMM1 incl|producer waiting for free)|phases \] expert_mlp" $O/tests.log | head -30
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/moekit_cuda_tests \
  --gtest_filter="Sm90ExpertMlp.SmallForSanitizers" >$O/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.log | head -1)"
for late in 0 1; do
  MOEKIT_EXPERT_MLP_SLOTS_LATE=$late timeout 90 compute-sanitizer --tool racecheck --error-exitcode 3 \
    $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.SmallForSanitizers" >$O/racecheck-late$late.log 2>&1
  echo "racecheck SLOTS_LATE=$late rc=$? $(grep -E 'RACECHECK SUMMARY' $O/racecheck-late$late.log | head -1)"
  grep -E "Race reported|hazards\]" $O/racecheck-late$late.log | head -4
done
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
PTS="--preset qwen3-30b-a3b --tokens 16,32,64,128,256 --scheme bf16,fp8_per_tensor"
ab() {  # name "A prefix" "B prefix" args...
  local n=$1 a=$2 b=$3; shift 3
  echo "== $n (left $(left)s)"
  timeout 120 bash tools/scripts/ab_bench.sh $O/ab-$n ${REPS:-2} "$a" "$b" "$@" 2>&1 | grep -E "^\| (qwen|TP8)|failed" | head -n 14
}
ab stages5-6 "env MOEKIT_EXPERT_MLP_STAGES=5 $BB" "$BB" $CHK $PTS
ab slots-late-early "env MOEKIT_EXPERT_MLP_SLOTS_LATE=1 $BB" "$BB" $CHK $PTS
ab stages4-5 "env MOEKIT_EXPERT_MLP_STAGES=4 $BB" "env MOEKIT_EXPERT_MLP_STAGES=5 $BB" $CHK $PTS
ab ahead2-1 "env MOEKIT_EXPERT_MLP_AHEAD=2 $BB" "$BB" $CHK $PTS
wait $MP
if [ -x $MB ] && [ $(left) -gt 60 ]; then
  ab main-tree "$MB" "$BB" $CHK $PTS
  [ $(left) -gt 60 ] && ab main-tree-235b "$MB" "$BB" $CHK --preset qwen3-235b-a22b --tokens 32,64,128,256 --scheme bf16,fp8_per_tensor
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

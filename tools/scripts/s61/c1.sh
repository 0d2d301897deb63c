#!/usr/bin/env bash
# Branch s61's device call: the one-CTA per-expert MLP kernel's activation staged in shared memory
# and run as a rolled loop (~1,400 fewer instructions in the kernel, one iteration's code where each
# kind had ~600 straight-line instructions fetched cold after GEMM1: 5-8 µs a unit, session 59).
# Builds this tree and main (.ab/mid, moekit-bench only); the expert_mlp, preload and fault tests
# with their phase tables (StagedActivationGivesTheSameBits: the two forms bit for bit); memcheck
# and racecheck of the small sanitizer case; A/B MOEKIT_EXPERT_MLP_STAGED_ACT=0 -> default (same
# build) and main -> this tree, auto (qwen3-30b TP8: expert_mlp), M = 16..256, both schemes.
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
timeout 150 $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.*:Preload.*:Sm90Faults.*" >$O/tests.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ') (left $(left)s)"
grep -E "FAILED|Failure|differ" $O/tests.log | head -20
grep -E "phases \]   (first GEMM1|consumers done|activation|GEMM1 incl|GEMM2: stores)|phases \] expert_mlp" $O/tests.log | head -36
for tool in memcheck racecheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 3 $B/tests/moekit_cuda_tests \
    --gtest_filter="Sm90ExpertMlp.SmallForSanitizers" >$O/$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $O/$tool.log | head -1)"
done
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
PTS="--preset qwen3-30b-a3b --tokens 16,32,64,128,256 --scheme bf16,fp8_per_tensor"
echo "== MOEKIT_EXPERT_MLP_STAGED_ACT 0 -> default, same build, auto (left $(left)s)"
timeout 150 bash tools/scripts/ab_bench.sh $O/ab-staged ${REPS:-2} "env MOEKIT_EXPERT_MLP_STAGED_ACT=0 $BB" "$BB" $CHK $PTS \
  2>&1 | grep -E "^\| (qwen|TP8)|failed" | head -n 14
wait $MP
if [ -x $MB ] && [ $(left) -gt 100 ]; then
  echo "== A/B main (mid) -> this tree, auto (left $(left)s)"
  timeout $(( $(left) - 20 )) bash tools/scripts/ab_bench.sh $O/ab-main ${REPS:-2} "$MB" "$BB" $CHK $PTS \
    2>&1 | grep -E "^\| (qwen|TP8)|failed" | head -n 14
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

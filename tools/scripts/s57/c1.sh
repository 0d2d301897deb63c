#!/usr/bin/env bash
# Branch s57's first device call: s56 measured 0.906-1.013x against s55-next at qwen3-30b TP8
# (the five early w13 stages delayed the first stage's token rows; GEMM2 ran 8 k16 steps where 6
# reach N = 96). This tree issues one stage ahead and skips the k steps past N. Builds this tree and
# s55-next (.ab/mid); the expert_mlp, preload and fault tests; A/B s55-next -> this tree at
# qwen3-30b TP8 (expert_mlp forced, two repeats); the cluster form forced against auto at
# qwen3-235b / deepseek-v3 TP8 (one repeat). Every step has a timeout.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh s55-next .ab/mid, then
#   tools/scripts/stamp_tree.sh, right before.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
B=build/cuda-release; BB=$B/tools/bench/moekit-bench; MB=build/mid/tools/bench/moekit-bench
( cmake -S .ab/mid -B build/mid -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
    >$O/mid-configure.log 2>&1 && cmake --build build/mid --target moekit-bench -j 6 >$O/mid-build.log 2>&1 ) & MP=$!
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh $O/b >$O/build.txt 2>&1; tail -n 1 $O/build.txt
[ -x $BB ] || { echo "no build"; bash tools/scripts/pack_out.sh $O; exit 1; }
T=$B/tests/moekit_cuda_tests
timeout 150 $T --gtest_filter="Sm90ExpertMlp.*:Preload.*:Sm90Faults.*" >$O/tests.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure|differ" $O/tests.log | head -20
grep -E "phases \]   (first GEMM1|consumers done|activation|GEMM2: MMAs)|phases \] expert_mlp" $O/tests.log | head -40
wait $MP
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
Q="$CHK --preset qwen3-30b-a3b --tokens 16,64,256 --scheme bf16,fp8_per_tensor"
if [ -x $MB ]; then
  echo "== A/B s55-next (mid) -> this tree, expert_mlp forced"
  timeout 170 bash tools/scripts/ab_bench.sh $O/ab-mid-s57 ${REPS:-2} "env MOEKIT_PATH=expert_mlp $MB" "env MOEKIT_PATH=expert_mlp $BB" $Q 2>&1 \
    | grep -E "^\| (qwen|TP8)|failed" | head -n 10
fi
if [ $(left) -gt 200 ]; then  # the whole GPU suite (the tree to merge), then the cluster A/B with what is left
  MOEKIT_STEPS=gpu-suite MOEKIT_T_GPU=170 bash tools/scripts/gpu_check.sh $O/suite >$O/suite.txt 2>&1
  tail -n 3 $O/suite.txt; grep -E "tests passed|tests failed|\(Failed\)|Timeout|FAILED  \]" $O/suite/gpu_tests.log | head -10
fi
if [ $(left) -gt 90 ]; then
  echo "== the cluster form (B, forced) against auto (A): qwen3-235b, deepseek-v3 TP8 (left $(left)s)"
  timeout $(( $(left) - 25 )) bash tools/scripts/ab_bench.sh $O/ab-cluster 1 "$BB" "env MOEKIT_PATH=expert_mlp $BB" \
    $CHK --preset qwen3-235b-a22b,deepseek-v3 --tokens 16,64,256 --scheme bf16,fp8_per_tensor 2>&1 | grep -E "^\| (qwen|deep|TP8)|failed" | head -n 24
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

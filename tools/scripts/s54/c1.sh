#!/usr/bin/env bash
# One device call: build this branch and main's tree (.ab/base, tools/scripts/ab_base.sh main); the
# expert_mlp tests and its phase breakdown; then the A/B main -> branch (the timer off) at
# qwen3-30b TP8 bf16 and fp8 M = 16, 64, 256 with expert_mlp forced, two repeats, check on.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-580}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh $O/b >$O/build.txt 2>&1; tail -n 2 $O/build.txt
B=build/cuda-release; BB=$B/tools/bench/moekit-bench
[ -x $BB ] || { echo "no build"; bash tools/scripts/pack_out.sh $O; exit 1; }
timeout 120 $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.*:Sm90Faults.*" >$O/t-expert-mlp.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/t-expert-mlp.log | tr '\n' ' ')"
grep "phases" $O/t-expert-mlp.log | head -80
if [ -d .ab/base ] && [ $(left) -gt 200 ]; then
  cmake -S .ab/base -B build/base -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
    >$O/base-configure.log 2>&1 && cmake --build build/base --target moekit-bench -j 16 >$O/base-build.log 2>&1
  [ -x build/base/tools/bench/moekit-bench ] && timeout $(( $(left) - 20 )) bash tools/scripts/ab_bench.sh $O/ab 2 \
    "env MOEKIT_PATH=expert_mlp build/base/tools/bench/moekit-bench" "env MOEKIT_PATH=expert_mlp $BB" \
    --backend cuda --preset qwen3-30b-a3b --tp 8 --tokens 16,64,256 --scheme bf16,fp8_per_tensor \
    --no-baseline --no-host-time 2>&1 | grep -E "^\| qwen|TP8" | head -n 10
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

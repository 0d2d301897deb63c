#!/usr/bin/env bash
# Branch s55-next's device call (README beside this): build; the expert_mlp tests with the phase
# table; A/B main (.ab/base) -> this branch, expert_mlp forced, qwen3-30b TP8 bf16 / fp8 M = 16, 64,
# 256; A/B of MOEKIT_EXPERT_MLP_EVICT_FIRST 0 -> 1; the kernel's SASS.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-570}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh $O/b >$O/build.txt 2>&1; tail -n 2 $O/build.txt
B=build/cuda-release; BB=$B/tools/bench/moekit-bench
[ -x $BB ] || { echo "no build"; bash tools/scripts/pack_out.sh $O; exit 1; }
( cmake -S .ab/base -B build/base -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
    >$O/base-configure.log 2>&1 && cmake --build build/base --target moekit-bench -j 8 >$O/base-build.log 2>&1 ) &
BP=$!
f=$(find $B -name "expert_mlp_sm90.cu.o" | head -1)
cuobjdump --dump-sass $f 2>&1 | grep -cE "LDL|STL" | sed 's/^/local-memory instructions in expert_mlp: /'
timeout 150 $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.*:Preload.*:Sm90Gemv.*PhaseBreakdown:Sm90Tokmajor.PhaseBreakdown" >$O/t.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/t.log | tr '\n' ' ')"
grep -E "FAILED|phases" $O/t.log | head -90
wait $BP
if [ -x build/base/tools/bench/moekit-bench ] && [ $(left) -gt 150 ]; then
  timeout $(( $(left) - 90 )) bash tools/scripts/ab_bench.sh $O/ab 2 \
    "env MOEKIT_PATH=expert_mlp build/base/tools/bench/moekit-bench" "env MOEKIT_PATH=expert_mlp $BB" \
    --backend cuda --preset qwen3-30b-a3b --tp 8 --tokens 16,64,256 --scheme bf16,fp8_per_tensor \
    --no-baseline --no-host-time 2>&1 | grep -E "^\| qwen|TP8" | head -n 10
fi
if [ $(left) -gt 80 ]; then
  timeout $(( $(left) - 20 )) bash tools/scripts/ab_bench.sh $O/ab-evict 2 \
    "env MOEKIT_PATH=expert_mlp MOEKIT_EXPERT_MLP_EVICT_FIRST=0 $BB" "env MOEKIT_PATH=expert_mlp MOEKIT_EXPERT_MLP_EVICT_FIRST=1 $BB" \
    --backend cuda --preset qwen3-30b-a3b --tp 8 --tokens 16,64,256 --scheme bf16,fp8_per_tensor \
    --no-baseline --no-host-time 2>&1 | grep -E "^\| qwen|TP8" | head -n 10
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

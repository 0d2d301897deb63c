#!/usr/bin/env bash
# Session 56's first device call (branch s56): build this tree, main (.ab/base) and branch
# s55-next (.ab/mid); the expert_mlp, preload and fault tests with the phase table; memcheck of the
# small case; A/B main -> s55-next and s55-next -> this tree (fp8: the kernel as the quantization's
# programmatic dependent, the first w13 stages before the slot list), expert_mlp forced,
# qwen3-30b TP8 bf16 / fp8 M = 16, 64, 256; then the evict-first hint if time is left.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-580}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
B=build/cuda-release; BB=$B/tools/bench/moekit-bench
build_tree() {  # $1 source dir, $2 build dir
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
    >$O/$(basename $2)-configure.log 2>&1 && cmake --build $2 --target moekit-bench -j 5 >$O/$(basename $2)-build.log 2>&1
}
( build_tree .ab/base build/base ) & BP=$!
( build_tree .ab/mid build/mid ) & MP=$!
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh $O/b >$O/build.txt 2>&1; tail -n 2 $O/build.txt
[ -x $BB ] || { echo "no build"; bash tools/scripts/pack_out.sh $O; exit 1; }
f=$(find $B -name "expert_mlp_sm90.cu.o" | head -1)
cuobjdump --dump-sass $f 2>&1 | grep -cE "LDL|STL" | sed 's/^/local-memory instructions in expert_mlp: /'
timeout 150 $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.*:Preload.*:Sm90Faults.*" >$O/t.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/t.log | tr '\n' ' ')"
grep -E "FAILED|phases|^ *(cta|last|sum|units)" $O/t.log | head -60
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/moekit_cuda_tests \
  --gtest_filter="Sm90ExpertMlp.SmallForSanitizers" >$O/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.log | head -1)"
wait $BP $MP
ARGS="--backend cuda --preset qwen3-30b-a3b --tp 8 --tokens 16,64,256 --scheme bf16,fp8_per_tensor --no-baseline --no-host-time --check"
if [ -x build/mid/tools/bench/moekit-bench ] && [ $(left) -gt 200 ]; then
  echo "== A/B s55-next (mid) -> this tree"
  timeout 150 bash tools/scripts/ab_bench.sh $O/ab-mid-s56 2 \
    "env MOEKIT_PATH=expert_mlp build/mid/tools/bench/moekit-bench" "env MOEKIT_PATH=expert_mlp $BB" $ARGS 2>&1 | grep -E "^\| qwen|TP8" | head -n 10
fi
if [ -x build/base/tools/bench/moekit-bench ] && [ -x build/mid/tools/bench/moekit-bench ] && [ $(left) -gt 150 ]; then
  echo "== A/B main (base) -> s55-next (mid)"
  timeout 150 bash tools/scripts/ab_bench.sh $O/ab-base-mid 2 \
    "env MOEKIT_PATH=expert_mlp build/base/tools/bench/moekit-bench" "env MOEKIT_PATH=expert_mlp build/mid/tools/bench/moekit-bench" $ARGS 2>&1 | grep -E "^\| qwen|TP8" | head -n 10
fi
if [ $(left) -gt 100 ]; then
  echo "== A/B evict-first 0 -> 1 (this tree)"
  timeout $(( $(left) - 25 )) bash tools/scripts/ab_bench.sh $O/ab-evict 2 \
    "env MOEKIT_PATH=expert_mlp MOEKIT_EXPERT_MLP_EVICT_FIRST=0 $BB" "env MOEKIT_PATH=expert_mlp MOEKIT_EXPERT_MLP_EVICT_FIRST=1 $BB" \
    $ARGS 2>&1 | grep -E "^\| qwen|TP8" | head -n 10
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

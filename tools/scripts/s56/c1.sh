#!/usr/bin/env bash
# Branch s56's device call (README beside this): build this tree, main (.ab/base) and branch
# s55-next (.ab/mid); the expert_mlp tests (the cluster form's first run), preload and fault tests;
# memcheck of the small cases (one CTA a unit and a cluster of three; racecheck is in c3.sh); the cluster
# form against auto at qwen3-235b and deepseek-v3 TP8; then A/B s55-next -> this tree and main ->
# s55-next at qwen3-30b TP8, expert_mlp forced. Every step has a timeout (a cluster deadlock must
# not eat the call).
#   carry [".deps", ".ab/base", ".ab/mid"]; run tools/scripts/ab_base.sh main and
#   tools/scripts/ab_base.sh s55-next .ab/mid, then tools/scripts/stamp_tree.sh, right before.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
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
cuobjdump --dump-sass $f >$O/expert_mlp.sass 2>&1
echo "expert_mlp SASS: $(grep -cE 'LDL|STL' $O/expert_mlp.sass) local-memory, $(grep -c 'HGMMA\|QGMMA' $O/expert_mlp.sass) GMMA instructions"
T=$B/tests/moekit_cuda_tests
# Small cases first (one CTA a unit, a cluster of three), then the cluster tests, then the rest:
# each under its own timeout, so a hang names its test.
i=0
for f in "Sm90ExpertMlp.SmallForSanitizers" "Sm90ExpertMlp.ClusterSlices*" \
         "Sm90ExpertMlp.*:Preload.*:Sm90Faults.*:-Sm90ExpertMlp.SmallForSanitizers:Sm90ExpertMlp.ClusterSlices*"; do
  i=$((i + 1))
  timeout 150 $T --gtest_filter="$f" >$O/t$i.log 2>&1
  echo "tests [$f] rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/t$i.log | tr '\n' ' ')"
  grep -E "FAILED|Failure|differ|phases|^ *(cta|last|sum|units)" $O/t$i.log | head -40
done
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 $T --gtest_filter="Sm90ExpertMlp.SmallForSanitizers" >$O/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.log | head -1)"
wait $BP $MP
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
if [ $(left) -gt 240 ]; then
  echo "== the cluster form (B, forced) against auto (A): qwen3-235b, deepseek-v3 TP8"
  timeout 200 bash tools/scripts/ab_bench.sh $O/ab-cluster 1 "$BB" "env MOEKIT_PATH=expert_mlp $BB" \
    $CHK --preset qwen3-235b-a22b,deepseek-v3 --tokens 16,64,256 --scheme bf16,fp8_per_tensor 2>&1 | grep -E "^\| (qwen|deep)|TP8|failed" | head -n 16
fi
Q="$CHK --preset qwen3-30b-a3b --tokens 16,64,256 --scheme bf16,fp8_per_tensor"
if [ -x build/mid/tools/bench/moekit-bench ] && [ $(left) -gt 150 ]; then
  echo "== A/B s55-next (mid) -> this tree, expert_mlp forced"
  timeout 140 bash tools/scripts/ab_bench.sh $O/ab-mid-s56 2 \
    "env MOEKIT_PATH=expert_mlp build/mid/tools/bench/moekit-bench" "env MOEKIT_PATH=expert_mlp $BB" $Q 2>&1 | grep -E "^\| qwen|TP8|failed" | head -n 10
fi
if [ -x build/base/tools/bench/moekit-bench ] && [ -x build/mid/tools/bench/moekit-bench ] && [ $(left) -gt 100 ]; then
  echo "== A/B main (base) -> s55-next (mid), expert_mlp forced"
  timeout $(( $(left) - 20 )) bash tools/scripts/ab_bench.sh $O/ab-base-mid 2 \
    "env MOEKIT_PATH=expert_mlp build/base/tools/bench/moekit-bench" "env MOEKIT_PATH=expert_mlp build/mid/tools/bench/moekit-bench" $Q 2>&1 | grep -E "^\| qwen|TP8|failed" | head -n 10
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

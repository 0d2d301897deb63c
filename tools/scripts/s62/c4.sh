#!/usr/bin/env bash
# Branch s62's last device call, on its final code (one slot hand-off: every consumer thread
# arrives after place_window): gpu_check.sh's build and GPU suite, memcheck and racecheck of
# Sm90ExpertMlp.SmallForSanitizers (the session's device time was short for the full filters); then
# main (.ab/mid) -> this tree at qwen3-30b TP8 (the one-CTA form) M = 16..256 and qwen3-235b TP8
# (the cluster form) M = 32..256, both schemes, two repeats.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid, then tools/scripts/stamp_tree.sh.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-330}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU" | tee $O/gpu.txt
B=build/cuda-release; BB=$B/tools/bench/moekit-bench; MB=build/mid/tools/bench/moekit-bench
( cmake -S .ab/mid -B build/mid -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
    >$O/mid-configure.log 2>&1 && cmake --build build/mid --target moekit-bench -j 4 >$O/mid-build.log 2>&1 ) & MP=$!
MOEKIT_STEPS=configure,build,gpu-suite,memcheck,racecheck MOEKIT_T_GPU=200 MOEKIT_T_MEMCHECK=60 MOEKIT_T_RACECHECK=60 \
  MOEKIT_SANITIZER_FILTER=Sm90ExpertMlp.SmallForSanitizers MOEKIT_RACECHECK_FILTER=Sm90ExpertMlp.SmallForSanitizers bash tools/scripts/gpu_check.sh $O/check >$O/check.txt 2>&1
sed -n '/moekit gpu_check:/,$p' $O/check.txt | head -14; echo "(left $(left)s)"
wait $MP
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
if [ -x $MB ] && [ -x $BB ] && [ $(left) -gt 60 ]; then
  echo "== main -> tree, qwen3-30b TP8 (left $(left)s)"
  timeout $(( $(left) - 10 )) bash tools/scripts/ab_bench.sh $O/ab-main-tree 2 "$MB" "$BB" $CHK --preset qwen3-30b-a3b \
    --tokens 16,32,64,128,256 --scheme bf16,fp8_per_tensor 2>&1 | grep -E "^\| (qwen|TP8)|failed" | head -n 14
fi
if [ -x $MB ] && [ -x $BB ] && [ $(left) -gt 40 ]; then
  echo "== main -> tree, qwen3-235b TP8 (left $(left)s)"
  timeout $(( $(left) - 15 )) bash tools/scripts/ab_bench.sh $O/ab-main-tree-235b 2 "$MB" "$BB" $CHK --preset qwen3-235b-a22b \
    --tokens 32,64,128,256 --scheme bf16,fp8_per_tensor 2>&1 | grep -E "^\| (qwen|TP8)|failed" | head -n 12
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

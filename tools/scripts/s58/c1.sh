#!/usr/bin/env bash
# Branch s58's first device call. s57 measured 0.881-1.007x (median 0.927) against s55-next at
# qwen3-30b TP8 (expert_mlp forced): the one-CTA kernel carried the cluster form's code (the peer
# pushes in every store of h, the rolled store/absmax pass, GEMM2's chunk-a-group loop). s58
# compiles the one-CTA form without it (ExpertMlp<kOp, kCluster>). Builds this tree and s55-next
# (.ab/mid); the expert_mlp, preload and fault tests with their phase tables; A/B s55-next -> this
# tree (two repeats); fp8 with MOEKIT_PDL=0 against the default (the quantization -> expert_mlp
# edge); the cluster form against auto; the GPU suite if time is left. Every step has a timeout.
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
grep -E "phases \]   (first GEMM1|consumers done|activation|GEMM2: MMAs)|phases \] expert_mlp" $O/tests.log | head -24
wait $MP
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
Q="$CHK --preset qwen3-30b-a3b --tokens 16,64,256 --scheme bf16,fp8_per_tensor"
if [ -x $MB ]; then
  echo "== A/B s55-next (mid) -> this tree, expert_mlp forced"
  timeout 170 bash tools/scripts/ab_bench.sh $O/ab-mid-s58 ${REPS:-2} "env MOEKIT_PATH=expert_mlp $MB" "env MOEKIT_PATH=expert_mlp $BB" $Q 2>&1 \
    | grep -E "^\| (qwen|TP8)|failed" | head -n 10
fi
echo "== fp8: MOEKIT_PDL=0 (A) against the default (B), this tree, expert_mlp forced (left $(left)s)"
timeout 80 bash tools/scripts/ab_bench.sh $O/ab-pdl 1 "env MOEKIT_PATH=expert_mlp MOEKIT_PDL=0 $BB" "env MOEKIT_PATH=expert_mlp $BB" \
  $CHK --preset qwen3-30b-a3b --tokens 16,64,256 --scheme fp8_per_tensor 2>&1 | grep -E "^\| (qwen|TP8)|failed" | head -n 6
if [ $(left) -gt 150 ]; then
  echo "== the cluster form (B, forced) against auto (A): qwen3-235b, deepseek-v3 TP8 (left $(left)s)"
  timeout 110 bash tools/scripts/ab_bench.sh $O/ab-cluster 1 "$BB" "env MOEKIT_PATH=expert_mlp $BB" \
    $CHK --preset qwen3-235b-a22b,deepseek-v3 --tokens 16,64,256 --scheme bf16,fp8_per_tensor >/dev/null 2>&1
  python3 - $O/ab-cluster <<'PY'
import json, sys, glob
d = sys.argv[1]
def rows(f): return {(r['preset'], r['scheme'], r['tokens']): r for r in json.load(open(f))['rows']}
a, b = rows(glob.glob(d + '/a-1.json')[0]), rows(glob.glob(d + '/b-1.json')[0])
for k in sorted(a):
    if k in b: print(k, a[k]['dispatch'], a[k]['us'], b[k]['us'], round(a[k]['us'] / b[k]['us'], 3), b[k]['check_passed'])
PY
fi
if [ $(left) -gt 200 ]; then
  MOEKIT_STEPS=gpu-suite MOEKIT_T_GPU=$(( $(left) - 30 )) bash tools/scripts/gpu_check.sh $O/suite >$O/suite.txt 2>&1
  tail -n 3 $O/suite.txt; grep -E "tests passed|tests failed|\(Failed\)|Timeout|FAILED  \]" $O/suite/gpu_tests.log | head -10
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

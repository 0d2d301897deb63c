#!/usr/bin/env bash
# Branch s59's device call: expert_mlp's activation computed once a unit (in place over the gate
# accumulators; the stores read it back), where fp8's dynamic scale ran it twice (absmax, then the
# stores: 8.3-8.5 µs a unit at qwen3-30b TP8 fp8 against bf16's 3.5-4.4, session 58's phase table).
# Builds this tree and main (.ab/mid, moekit-bench only); the expert_mlp, preload and fault tests
# with their phase tables; A/B main -> this tree (qwen3-30b TP8 both schemes, qwen3-235b TP8 M = 64,
# auto, two repeats); then main's TP8 grid with its report (H100: against 155edf1) with what is left.
#   carry [".deps", ".ab/mid"]; tools/scripts/ab_base.sh main .ab/mid, then tools/scripts/stamp_tree.sh.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU" | tee $O/gpu.txt
case "$GPU" in *H200*) PREV=bench/results/2026-12-05-795e23e-h200-grid-tp8.json ;; *) PREV=bench/results/2026-12-05-155edf1-h100-grid-tp8.json ;; esac
B=build/cuda-release; BB=$B/tools/bench/moekit-bench; MB=build/mid/tools/bench/moekit-bench
( cmake -S .ab/mid -B build/mid -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
    >$O/mid-configure.log 2>&1 && cmake --build build/mid --target moekit-bench -j 6 >$O/mid-build.log 2>&1 ) & MP=$!
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh $O/b >$O/build.txt 2>&1; tail -n 1 $O/build.txt
[ -x $BB ] || { echo "no build"; bash tools/scripts/pack_out.sh $O; exit 1; }
timeout 100 $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.*:Preload.*:Sm90Faults.*" >$O/tests.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ') (left $(left)s)"
grep -E "FAILED|Failure|differ" $O/tests.log | head -20
grep -E "phases \]   (first GEMM1|consumers done|activation|GEMM2: MMAs)|phases \] expert_mlp" $O/tests.log | head -24
wait $MP
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
if [ -x $MB ]; then
  echo "== A/B main (mid) -> this tree, auto (left $(left)s)"
  timeout 100 bash tools/scripts/ab_bench.sh $O/ab-main-s59 ${REPS:-2} "$MB" "$BB" $CHK --preset qwen3-30b-a3b,qwen3-235b-a22b \
    --tokens 16,64,256 --scheme bf16,fp8_per_tensor 2>&1 | grep -E "^\| (qwen|TP8)|failed" | head -n 16
  if [ $(left) -gt 120 ]; then
    echo "== main's TP8 grid (left $(left)s)"
    timeout $(( $(left) - 20 )) $MB --backend cuda --preset all --tp 8 --tokens 1,2,4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor \
      --check --no-host-time --json $O/grid-tp8.json >$O/grid-tp8.log 2>&1
    echo "grid tp8 rc=$?"
    python3 tools/scripts/grid_report.py $O/grid-tp8.json --previous $PREV --out $O/grid-tp8-report.md 2>&1 | head -n 4
  fi
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

#!/usr/bin/env bash
# Session 56's third device call (any tree with branch s56's switches): build; the two A/B switches
# of the per-expert MLP path, same build, two repeats, check on: MOEKIT_EXPERT_MLP_QUANT_ONE_CTA
# 0 -> 1 (fp8: hidden's scale from one quantization CTA that the kernel overlaps) at qwen3-30b TP8
# (auto: expert_mlp there) and the cluster form forced at qwen3-235b / deepseek-v3 TP8; then
# MOEKIT_EXPERT_MLP_EVICT_FIRST 0 -> 1 at qwen3-30b TP8, bf16 and fp8; then token-major's 2-CTA
# multicast (MOEKIT_TOKMAJOR_CLUSTER=2) with its stage release now fence-free, against clusters of 1.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh $O/b >$O/build.txt 2>&1; tail -n 2 $O/build.txt
B=build/cuda-release; BB=$B/tools/bench/moekit-bench
[ -x $BB ] || { echo "no build"; bash tools/scripts/pack_out.sh $O; exit 1; }
timeout 90 $B/tests/moekit_cuda_tests --gtest_filter="Sm90ExpertMlp.QuantOneCtaGivesTheSameBits:Sm90ExpertMlp.EvictFirstHintGivesTheSameBits" >$O/t.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/t.log | tr '\n' ' ')"
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 3 $B/tests/moekit_cuda_tests \
  --gtest_filter="Sm90ExpertMlp.SmallForSanitizers" >$O/racecheck.log 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $O/racecheck.log | head -1) (the cluster pushes may be reported falsely: read it)"
CHK="--backend cuda --tp 8 --no-baseline --no-host-time --check"
echo "== MOEKIT_EXPERT_MLP_QUANT_ONE_CTA 0 -> 1, qwen3-30b TP8 fp8 (auto)"
timeout 150 bash tools/scripts/ab_bench.sh $O/ab-onecta-q30 2 "env MOEKIT_EXPERT_MLP_QUANT_ONE_CTA=0 $BB" \
  "env MOEKIT_EXPERT_MLP_QUANT_ONE_CTA=1 $BB" $CHK --preset qwen3-30b-a3b --tokens 16,32,64,128 --scheme fp8_per_tensor \
  2>&1 | grep -E "^\| qwen|TP8|failed" | head -n 8
if [ $(left) -gt 200 ]; then
  echo "== MOEKIT_EXPERT_MLP_QUANT_ONE_CTA 0 -> 1, the cluster form forced, qwen3-235b / deepseek-v3 TP8 fp8"
  timeout 180 bash tools/scripts/ab_bench.sh $O/ab-onecta-cluster 2 "env MOEKIT_PATH=expert_mlp MOEKIT_EXPERT_MLP_QUANT_ONE_CTA=0 $BB" \
    "env MOEKIT_PATH=expert_mlp MOEKIT_EXPERT_MLP_QUANT_ONE_CTA=1 $BB" $CHK --preset qwen3-235b-a22b,deepseek-v3 --tokens 16,32,64 \
    --scheme fp8_per_tensor 2>&1 | grep -E "^\| (qwen|deep)|TP8|failed" | head -n 10
fi
if [ $(left) -gt 100 ]; then
  echo "== MOEKIT_EXPERT_MLP_EVICT_FIRST 0 -> 1, qwen3-30b TP8 (expert_mlp forced)"
  timeout $(( $(left) - 20 )) bash tools/scripts/ab_bench.sh $O/ab-evict 2 \
    "env MOEKIT_PATH=expert_mlp MOEKIT_EXPERT_MLP_EVICT_FIRST=0 $BB" "env MOEKIT_PATH=expert_mlp MOEKIT_EXPERT_MLP_EVICT_FIRST=1 $BB" \
    $CHK --preset qwen3-30b-a3b --tokens 16,64,256 --scheme bf16,fp8_per_tensor 2>&1 | grep -E "^\| qwen|TP8|failed" | head -n 10
fi
if [ $(left) -gt 120 ]; then
  # Token-major's 2-CTA weight multicast with the peer's stage release at CTA scope (no MEMBAR.ALL.GPU
  # a stage): its tests, then forced against the default (clusters of 1) at prefill and TP8 sizes.
  timeout 60 $B/tests/moekit_cuda_tests --gtest_filter="Sm90TokMajorGemm.*" >$O/t-tokmajor.log 2>&1
  echo "tokmajor tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $O/t-tokmajor.log | tr '\n' ' ')"
  echo "== MOEKIT_TOKMAJOR_CLUSTER default -> 2 (multicast), token-major forced"
  timeout $(( $(left) - 20 )) bash tools/scripts/ab_bench.sh $O/ab-multicast 1 "env MOEKIT_PATH=tokmajor $BB" \
    "env MOEKIT_PATH=tokmajor MOEKIT_TOKMAJOR_CLUSTER=2 $BB" --backend cuda --no-baseline --no-host-time --check \
    --preset mixtral-8x7b,qwen3-30b-a3b --tp 1,8 --tokens 512,2048,4096 --scheme bf16 2>&1 | grep -E "^\| (mix|qwen)|failed" | head -n 14
fi
echo "done, left $(left)s"
bash tools/scripts/pack_out.sh $O

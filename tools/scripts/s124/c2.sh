#!/usr/bin/env bash
# s124 c2 of 3 (run in session 81 on an H100, c1 and c2 only: results in docs/perf.md "Session 81"; c1.sh says what the tree holds): on the same warm machine (both builds kept), the
# A/Bs main -> tree of s123 (auto at M = 1: TP8 every preset and scheme, where the CUDA-core GEMV
# kernel runs qwen3-30b and the bf16 points, the tensor-core kernel's fp8 ones a control; TP1
# qwen3-30b, qwen3-235b, gpt-oss bf16), s119 (auto's token-major points: mixtral TP8 M = 16..256,
# deepseek-v3 TP8 M = 64..256, both schemes) and s122 with s124 (forced Swap-AB at M * k <= 16: TP1
# gpt-oss, mixtral, qwen3-235b fp8 M = 1, 2, 4, auto's Swap-AB points there; the chain's GEMMs and
# its routing launch, which MOEKIT_SWAPAB_PLAIN / MOEKIT_ROUTING_PLAIN split in one build where it
# gains); check on.
# carry [".deps", ".ab/mid"]; LIMIT seconds (default 430).
set -u
LIMIT=${LIMIT:-430}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
wait_main_build || { echo "main's build failed"; tail -5 "$O/mid-build.log"; finish; exit 1; }
ARGS="--backend cuda --no-baseline --no-host-time --check"
AB_SECONDS=100 REPS=2 ab plain-gemv1 "$MB" "$BB" $ARGS --tp 8 \
  --preset all --tokens 1 --scheme bf16,fp8_per_tensor
AB_SECONDS=55 REPS=2 ab plain-gemv1-tp1 "$MB" "$BB" $ARGS --tp 1 \
  --preset qwen3-30b-a3b,qwen3-235b-a22b,gpt-oss-120b --tokens 1 --scheme bf16
AB_SECONDS=125 REPS=2 ab plain-tm "$MB" "$BB" $ARGS --tp 8 \
  --preset mixtral-8x7b,deepseek-v3 --tokens 16,64,128,256 --scheme bf16,fp8_per_tensor
AB_SECONDS=$(( $(left) - 15 )) REPS=2 ab plain-swapab "$MB" "$BB" $ARGS --tp 1 --path swapab \
  --preset gpt-oss-120b,mixtral-8x7b,qwen3-235b-a22b --tokens 1,2,4 --scheme fp8_per_tensor
finish

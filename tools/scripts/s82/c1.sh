#!/usr/bin/env bash
# Branch s82's device call (session 64's last device minutes, LIMIT 190): fp8_per_tensor's dynamic
# hidden scale past the one-CTA size as one cooperative launch (absmax, grid barrier, quantization)
# in place of the absmax word's memset and the absmax + quantization launches (the per-expert MLP chain),
# against MOEKIT_QUANT_COOP=0 in the same build:
#   1. build; Sm90Quant.* (the new PerTensorCooperativeMatchesCpuBitwise), the per-expert MLP
#      kernel's fp8 tests (QuantOneCtaGivesTheSameBits: the one-CTA kernel's bits against the
#      cooperative launch's), the fused-experts fp8 per-tensor combos (every path's chain);
#   2. A/B MOEKIT_QUANT_COOP=0 -> default, auto, fp8_per_tensor, qwen3-30b and qwen3-235b TP8 (the per-expert MLP
#      chains) and mixtral TP8 (token-major routing in GEMM1: the launch after its memset).
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-190}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90Quant.*:Sm90ExpertMlp.QuantOneCtaGivesTheSameBits:Sm90ExpertMlp.Fp8PerTensorMatchesReference:*AllCombosFp8PerTensor*:*TileBoundaryMFp8PerTensor*" 45
REPS=2 AB_SECONDS=$(( $(left) - 10 )) ab coop "env MOEKIT_QUANT_COOP=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset qwen3-30b-a3b,qwen3-235b-a22b,mixtral-8x7b --tokens 16,64,256 --scheme fp8_per_tensor
finish

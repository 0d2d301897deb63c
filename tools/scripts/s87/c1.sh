#!/usr/bin/env bash
# Session 65, branch s87: Swap-AB GEMM2's b2 and per-channel w2 scales staged by the producer (one
# bulk copy each with a tile's first K stage) instead of the consumers' global loads, which had not
# returned by the epilogue of gpt-oss fp8's two-stage tiles (s86: the bias conversion 7.7 % of
# GEMM2's samples; the producer waiting on free stages). ~7 min:
#   1. build; the Swap-AB, gpt-oss preset, fuzz and dispatch tests (the new
#      Sm90SwapAbGemm.Gemm2StagedRowValuesMatchTheLoads among them), memcheck on the new test;
#   2. A/B MOEKIT_SWAPAB_ROW_VALS=0 -> default: gpt-oss TP8 M = 16 / 64 / 256, fp8 per tensor /
#      channel, bf16;
#   3. gpu_check's GPU suite and memcheck; 4. the TP8 grid if time is left.
# carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-330}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SwapAbGemm.*:*PresetGptOss120b*" 80
sanitize memcheck "Sm90SwapAbGemm.Gemm2StagedRowValuesMatchTheLoads" 60
REPS=2 AB_SECONDS=90 ab rowvals "env MOEKIT_SWAPAB_ROW_VALS=0 $BB" "$BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --preset gpt-oss-120b --tokens 16,64,256 --scheme fp8_per_tensor,fp8_per_channel,bf16
MOEKIT_STEPS=gpu-suite,memcheck timeout $(( $(left) - 20 )) bash tools/scripts/gpu_check.sh "$O/check" >"$O/check.txt" 2>&1
echo "gpu_check rc=$? (left $(left)s)"; grep -E "gpu-suite|memcheck|racecheck|tests passed|SUMMARY" "$O/check.txt" | head -8
grep -E "^\[  FAILED" "$O/check/gpu_tests.log" 2>/dev/null | head -10
if [ $(left) -gt 100 ]; then grid_tp8 bench/results/2026-12-06-7da2461-h100-s80-grid-tp8.json; fi
finish

#!/usr/bin/env bash
# s103 (session 70), third call: c2's grid had the e4m3 per-expert MLP kernel 3-6 % slower at
# qwen3-30b TP8 fp8 M = 8 / 16 and qwen3-235b TP8 fp8 M = 4 / 8 against the grid before it (another
# H100); the kernel's PTX differs only by KernelParams' new field (w2_pairs) and the order of a few
# moves. Same-run A/B against main before this session (.ab/mid = fb539a1;
# `tools/scripts/ab_base.sh fb539a1 .ab/mid`) at those points and at the bf16 one-CTA form, plus the
# dispatch test c2 failed (now expecting the per-expert MLP path at gpt-oss fp8 M = 4 / 17).
# ~4 min; carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-330}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
wait_main_build || { echo "no mid build"; finish; exit 1; }
echo "built (left $(left)s)"
run_tests 'Sm90Dispatch.ForcedPathThatCannotRunIsNotSupported' 40
AB_SECONDS=$(( $(left) - 20 )) REPS=3 ab s103-e4m3 "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --preset qwen3-30b-a3b,qwen3-235b-a22b --tokens 4,8,16,64 --scheme fp8_per_tensor,bf16
finish

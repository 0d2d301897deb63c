#!/usr/bin/env bash
# s104 (session 71), first call: session 70's landing commit plus MOEKIT_EXPERT_MLP_AHEAD_NEXT (a
# CTA's units after its first issue a whole ring of w13 stages before their slot list) on the GPU:
# the expert_mlp, fuzz, dispatch and preload tests (AheadNextGivesTheSameBits among them), the
# switch's same-build A/B at the multi-unit shapes (expert_mlp forced), the phase table both ways
# (gpt-oss TP8 bf16 / e4m3 added), memcheck / racecheck on the small cases (several units a CTA),
# the TP8 grid against the same kind of GPU's last, the fp8 chains' kernel times. carry [".deps"].
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*:Preload.*:-Sm90ExpertMlp.PhaseBreakdown' 150
AB_SECONDS=150 REPS=2 ab ahead-next "env MOEKIT_EXPERT_MLP_AHEAD_NEXT=0 $BB" "$BB" --backend cuda --tp 8 \
  --no-baseline --no-host-time --check --path expert_mlp --preset gpt-oss-120b,qwen3-235b-a22b,deepseek-v3 \
  --tokens 16,64,256 --scheme bf16,fp8_per_tensor
phase_tables MOEKIT_EXPERT_MLP_AHEAD_NEXT 0 1
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 60
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 60
# the previous grid of the same kind of GPU
if grep -q H200 "$O/gpu.txt"; then grid_tp8 bench/results/2026-12-06-f75d4b1-h200-s69-grid-tp8.json
else grid_tp8 bench/results/2026-12-06-5dadedc-h100-s103-grid-tp8.json; fi
[ "$(left)" -gt 100 ] && timeout $(( $(left) - 30 )) bash tools/scripts/profile_kernels.sh "$BB" \
  "qwen3-30b-a3b 8 16 fp8_per_tensor" "qwen3-30b-a3b 8 64 fp8_per_tensor" "gpt-oss-120b 8 16 fp8_per_tensor" \
  > "$O/kernel-times.txt" 2>&1
echo "kernel times rc=$? (left $(left)s)"
finish

#!/usr/bin/env bash
# s104 (session 71), first call: session 70's landing commit on the GPU (s103/c4.sh's checks: the
# expert_mlp, fuzz, dispatch and preload tests, memcheck / racecheck on the small cases, the TP8
# grid against 5dadedc's), the per-expert MLP kernel's phase table with gpt-oss TP8 bf16 / e4m3
# (in Sm90ExpertMlp.PhaseBreakdown: tests.log), and the fp8 chains' kernel times at the points
# the next change is for (Nsight Compute, one kernel at a time). ~5 min; carry [".deps"].
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*:Preload.*' 150
grep -E "^\[ phases \]" "$O/tests.log" > "$O/phases.txt"; wc -l < "$O/phases.txt"
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 60
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 60
# the previous grid of the same kind of GPU
if grep -q H200 "$O/gpu.txt"; then grid_tp8 bench/results/2026-12-06-f75d4b1-h200-s69-grid-tp8.json
else grid_tp8 bench/results/2026-12-06-5dadedc-h100-s103-grid-tp8.json; fi
[ "$(left)" -gt 100 ] && timeout $(( $(left) - 30 )) bash tools/scripts/profile_kernels.sh "$BB" \
  "qwen3-30b-a3b 8 16 fp8_per_tensor" "qwen3-30b-a3b 8 64 fp8_per_tensor" "gpt-oss-120b 8 16 fp8_per_tensor" \
  "mixtral-8x7b 8 64 fp8_per_tensor" > "$O/kernel-times.txt" 2>&1
echo "kernel times rc=$? (left $(left)s)"
finish

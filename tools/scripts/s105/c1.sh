#!/usr/bin/env bash
# s105 (session 72), first call: the cluster form's pushes of h as whole 16-byte units from every
# lane (push_h) instead of a quad's first lane pushing the quad's 16 (e4m3: 8) bytes after three
# shuffles. The per-expert MLP, fuzz, dispatch and preload tests, racecheck / memcheck on the small
# cases (several units a CTA, clusters of 2-4), the phase table (the activation's stores and pushes),
# main (.ab/mid: tools/scripts/ab_base.sh <main> .ab/mid) against the tree at the cluster shapes,
# expert_mlp forced, and at auto's TP8 points; then the TP8 grid where time is left.
# ~6-9 min; carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*:Preload.*' 180
grep -E "^\[ phases \]" "$O/tests.log" > "$O/phases.txt"
grep -E "h stores and pushes|^\[ phases \] expert_mlp" "$O/phases.txt"
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 60
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 60
wait_main_build || { echo "no main build"; finish; exit 1; }
AB_SECONDS=150 REPS=2 ab forced "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --path expert_mlp --preset qwen3-235b-a22b,deepseek-v3,gpt-oss-120b,qwen3-30b-a3b --tokens 16,64,256 \
  --scheme bf16,fp8_per_tensor
AB_SECONDS=90 REPS=2 ab channel "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
  --path expert_mlp --preset qwen3-235b-a22b,deepseek-v3 --tokens 32,128 --scheme fp8_per_channel
if [ "$(left)" -gt 200 ]; then
  if grep -q H200 "$O/gpu.txt"; then grid_tp8 bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json
  else grid_tp8 bench/results/2026-12-06-5dadedc-h100-s103-grid-tp8.json; fi
fi
finish

#!/usr/bin/env bash
# s103 (session 70), fourth call, at the landing commit: KernelParams::w2_pairs and SmemLayout::h2
# moved last, so every untimed kernel but the row-pair ones compiles to the PTX of fb539a1 (main
# before this session; diffed on the CPU). The expert_mlp, fuzz and dispatch GPU tests (the
# dispatch test now at M = 66 for Swap-AB), memcheck / racecheck on the small cases, the TP8 grid
# against c2's, and the A/B against fb539a1 at the e4m3 kernel's users if the time holds.
# ~4 min (LIMIT=250 leaves out the A/B); carry [".deps", ".ab/mid"].
set -u
LIMIT=${LIMIT:-250}
source tools/scripts/device_call.sh
[ "$LIMIT" -gt 400 ] && start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*:Preload.*' 120
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 60
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 60
grid_tp8 bench/results/2026-12-06-5dadedc-h100-s103-grid-tp8.json
if [ "$LIMIT" -gt 400 ] && wait_main_build && [ "$(left)" -gt 90 ]; then
  AB_SECONDS=$(( $(left) - 20 )) REPS=2 ab s103-e4m3-final "$MB" "$BB" --backend cuda --tp 8 --no-baseline --no-host-time --check \
    --preset qwen3-30b-a3b,qwen3-235b-a22b --tokens 4,8,16,64 --scheme fp8_per_tensor
fi
finish

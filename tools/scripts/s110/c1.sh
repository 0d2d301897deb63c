#!/usr/bin/env bash
# s110: the one-CTA form's GEMM2 as Swap-AB (MOEKIT_EXPERT_MLP_G2_SWAP=1; prepared in session 76,
# compiled, never run), as long as LIMIT allows (seconds, default 420): the per-expert MLP tests
# (G2SwapMatchesReference first), the phase tables with the switch 0 / 1, the A/B 0 against 1
# (expert_mlp forced at qwen3-30b TP8 M = 1..256, both schemes), racecheck and memcheck with it on.
# carry [".deps"].
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.G2Swap*:Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' 100
grep -E "^\[ g2 swap \]" "$O/tests.log" | head -70 > "$O/g2-swap-bits.txt"; head -12 "$O/g2-swap-bits.txt"
phase_tables MOEKIT_EXPERT_MLP_G2_SWAP 0 1
for f in "$O"/phases-*.log; do
  echo "-- $(basename "$f")"
  grep -E "expert_mlp qwen3-30b|consumers done|GEMM2 tiles|GEMM2: (MMAs|stores)" "$f" | grep -A4 -E "TP8 (fp8 )?M=(8|64):" | head -20
done
[ "$(left)" -gt 60 ] && AB_SECONDS=$(( $(left) > 200 ? 120 : $(left) / 2 )) REPS=2 ab swap \
  "env MOEKIT_EXPERT_MLP_G2_SWAP=0 $BB" "env MOEKIT_EXPERT_MLP_G2_SWAP=1 $BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --path expert_mlp --preset qwen3-30b-a3b --tokens 1,2,4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
export MOEKIT_EXPERT_MLP_G2_SWAP=1
[ "$(left)" -gt 30 ] && sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 30
[ "$(left)" -gt 25 ] && sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers' 25
finish

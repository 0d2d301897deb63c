#!/usr/bin/env bash
# s107, fourth call: the phase table of the split along K (its timed instantiation, new in this
# commit) at qwen3-30b TP8 bf16 M = 1 / 4 / 8 / 16 and fp8 M = 1, R = 1 / 2 / 4: where the split's
# time goes (c1: slower than unsplit at M >= 4 though c3's bare stream holds 52 GB/s a CTA in
# clusters of 2 and 4). carry [".deps"].
set -u
LIMIT=${LIMIT:-300}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.SplitK*' 60
phase_tables MOEKIT_EXPERT_MLP_SPLIT_K 1 2 4
for v in 1 2 4; do
  grep -E "CTAs with units|GEMM1 stage landed|last stage issued|consumers done|weights \(landed|GEMM1 incl|activation, h|GEMM2 tiles|free stages" \
    "$O/phases-MOEKIT_EXPERT_MLP_SPLIT_K-$v.log" | grep -B0 -A9 -E "M=(1|8):" | head -40
done
finish

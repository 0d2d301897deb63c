#!/usr/bin/env bash
# s106, the last ~4 min of the session's device budget: push_halves' branch built, its per-expert
# MLP and fuzz tests with the phase table, racecheck and memcheck on the small cases. No A/B (the
# landing still needs c1's or c2's). carry [".deps"].
set -u
LIMIT=${LIMIT:-200}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*' $(( $(left) - 45 ))
grep -E "^\[ phases \]" "$O/tests.log" > "$O/phases.txt"
grep -E "h stores and pushes|a CTA's weights|^\[ phases \] expert_mlp" "$O/phases.txt"
sanitize racecheck Sm90ExpertMlp.SmallForSanitizers 20
sanitize memcheck Sm90ExpertMlp.SmallForSanitizers 20
finish

#!/usr/bin/env bash
# s109 c4, the landing check with the warm warp on by default: the per-expert MLP, fuzz and
# dispatch tests while LIMIT allows (seconds, default 180). carry [".deps"].
set -u
LIMIT=${LIMIT:-180}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests 'Sm90ExpertMlp.*:Sm90Fuzz.*:Sm90Dispatch.*-Sm90ExpertMlp.PhaseBreakdown' $(( $(left) - 12 ))
grep -cE "^\[       OK \]" "$O/tests.log"
finish

#!/usr/bin/env bash
# Branch s74's last call, on an H200 (the issue's GPU): the landing form (the quads inline, past one
# scalar round; c4's out-of-line form taken back: it routed M = 256 in 3.1 µs where the inline form
# took 2.3). Build; the routing, fault, expert_mlp, dispatch and token-major route tests; the TP8
# grid against the H200 grid of f75d4b1 (session 62); the phase table.
#   carry [".deps"]; tools/scripts/stamp_tree.sh first.
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
run_tests "Sm90SlotRouting.*:Sm90Faults.*:Sm90ExpertMlp.*:Sm90Dispatch.*:Sm90TokmajorRoute.*:-*PhaseBreakdown*" 150
grid_tp8 bench/results/2026-12-06-f75d4b1-h200-s69-grid-tp8.json
phase_tables MOEKIT_EXPERT_MLP_LEAN_GATHER 1
finish

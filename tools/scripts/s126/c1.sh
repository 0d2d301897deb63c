#!/usr/bin/env bash
# s126 c1 (session 82): main after the router's gpt-oss TP8 fp8_per_tensor range reached 1024 slots
# (docs/router.md "Session 82"; s125's Swap-AB plain kernels and permutation-only routing landed
# before it). This call: the tree's build, the dispatch / per-expert MLP / PDL tests the change
# touches, then the grids while LIMIT allows: TP8 (bf16 + fp8_per_tensor) against this GPU's last and
# TP1 against this GPU's last.
# PREBUILT=1 (how session 82 ran it, with too little device time left for a build there): the
# binaries built here instead, .deps/prebuilt/bins.tar.xz, made after tools/scripts/stamp_tree.sh
# and ninja (so their build info names the commit) by
#   tar cf - -C build/cuda-release tests/moekit_cuda_tests tools/bench/moekit-bench | xz -9e > .deps/prebuilt/bins.tar.xz
# (7 MB; the two binaries are ~60 MB each, past the 64 MiB transfer with the tree).
# carry [".deps"]; LIMIT seconds (default 420).
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
if [ "${PREBUILT:-0}" = 1 ]; then
  mkdir -p "$B" && tar xJf .deps/prebuilt/bins.tar.xz -C "$B" || { echo "no prebuilt binaries"; finish; exit 1; }
else
  build_tree || exit 1
fi
echo "built (left $(left)s)"
run_tests 'Sm90Dispatch.*:Sm90ExpertMlp.AutoTakes*:Sm90Pdl.*' 90
[ "$(left)" -gt 60 ] && grid_tp8
if grep -q H200 "$O/gpu.txt"; then PREV1=bench/results/2026-12-06-1e58526-h200-grid-tp1.json
else PREV1=bench/results/2026-12-07-1664c34-h100-s125-grid-tp1.json; fi
[ "$(left)" -gt 80 ] && grid_tp1 "$PREV1"
finish

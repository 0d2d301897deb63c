#!/usr/bin/env bash
# s126 c1 on binaries built here (session 82, when the device time left could not pay for a build
# there): .deps/prebuilt/bins.tar.xz holds this tree's moekit_cuda_tests and moekit-bench for sm_90a
# (`tar cf - -C build/cuda-release tests/moekit_cuda_tests
# tools/bench/moekit-bench | xz -9e > .deps/prebuilt/bins.tar.xz` after tools/scripts/stamp_tree.sh and ninja, so their build info names
# the commit). Then c1.sh's steps: the tests the change touches and the grids. carry [".deps"].
set -u
LIMIT=${LIMIT:-300}
source tools/scripts/device_call.sh
mkdir -p "$B" && tar xJf .deps/prebuilt/bins.tar.xz -C "$B" || { echo "no prebuilt binaries"; finish; exit 1; }
run_tests 'Sm90Dispatch.*:Sm90ExpertMlp.AutoTakes*:Sm90Pdl.*' 90
[ "$(left)" -gt 60 ] && grid_tp8
if grep -q H200 "$O/gpu.txt"; then PREV1=bench/results/2026-12-06-1e58526-h200-grid-tp1.json
else PREV1=bench/results/2026-12-07-1664c34-h100-s125-grid-tp1.json; fi
if [ "$(left)" -gt 80 ]; then
  timeout $(( $(left) - 15 )) $BB --backend cuda --preset all --tp 1 --tokens 1,2,4,8,16,32,64,128,256 \
    --scheme bf16,fp8_per_tensor --check --no-host-time --json "$O/grid-tp1.json" >"$O/grid-tp1.log" 2>&1
  echo "grid tp1 rc=$? (left $(left)s)"
  python3 tools/scripts/grid_report.py "$O/grid-tp1.json" --previous "$PREV1" --out "$O/grid-tp1-report.md" 2>&1 | head -n 4
fi
finish

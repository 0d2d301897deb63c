#!/usr/bin/env bash
# Per-kernel device time of moekit's launches at a few benchmark points, read with Nsight Compute
# (clocks left alone). Answers "where does the time of one call go" without a timeline tool.
#   tools/scripts/profile_kernels.sh BENCH "preset tp M scheme" ...
# Prints one table per point: kernel, grid, block, duration (ns), DRAM bytes read.
set -u
BENCH=$1; shift
RAW=${PROFILE_RAW_DIR:-${OUT:-/tmp}/ncu}
mkdir -p "$RAW"
for point in "$@"; do
  set -- $point
  echo "### $point"
  # -c 14: the warm-up call's kernels (moekit launches at most 7 per call).
  ncu --clock-control none --kernel-name-base demangled -k regex:sm90_kernel -c 14 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size --csv \
      "$BENCH" --preset "$1" --tp "$2" --tokens "$3" --scheme "$4" --iters 5 >"$RAW/$1_tp$2_M$3_$4.csv" 2>&1
  python3 -c '
import csv, sys
lines = open(sys.argv[1]).read().splitlines()
start = next((i for i, l in enumerate(lines) if l.startswith(chr(34) + "ID")), None)
if start is None: sys.exit(print("  (no kernels profiled; raw output in", sys.argv[1], ")"))
rows = list(csv.reader(lines[start:]))
h = rows[0]; ki, mi, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
idx = h.index("ID")
per = {}
for r in rows[1:]:
    if len(r) <= vi: continue
    per.setdefault(r[idx], {"name": r[ki].split("(")[0][-70:]})[r[mi]] = r[vi]
for k in sorted(per, key=int):
    d = per[k]
    print("  %-70s grid %-8s block %-5s %10s ns %14s B" % (d["name"], d.get("launch__grid_size"), d.get("launch__block_size"),
          d.get("gpu__time_duration.sum"), d.get("dram__bytes_read.sum")))
' "$RAW/$1_tp$2_M$3_$4.csv"
done

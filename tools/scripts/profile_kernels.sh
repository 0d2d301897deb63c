#!/usr/bin/env bash
# Per-kernel device time of moekit's launches at a few benchmark points, read with Nsight Compute
# (clocks left alone). Answers "where does the time of one call go" without a timeline tool.
#   tools/scripts/profile_kernels.sh BENCH "preset tp M scheme" ...
# Prints one table per point: kernel, grid, block, duration (ns), DRAM bytes read, their rate, and
# the kernel time of one steady call where the path starts each call with the one-CTA routing launch.
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
def num(v):
    try: return float(str(v).replace(",", ""))
    except ValueError: return None
ks = sorted(per, key=int)
for k in ks:
    d = per[k]
    ns, b = num(d.get("gpu__time_duration.sum")), num(d.get("dram__bytes_read.sum"))
    rate = " %6.2f TB/s" % (b / ns / 1e3) if ns and b else ""
    print("  %-70s grid %-8s block %-5s %10s ns %14s B%s" % (d["name"], d.get("launch__grid_size"), d.get("launch__block_size"),
          d.get("gpu__time_duration.sum"), d.get("dram__bytes_read.sum"), rate))
# One steady call: the kernels from the second one-CTA routing launch (each call of a multi-launch
# path starts with it; the first is the warm-up call) up to the next.
starts = [i for i, k in enumerate(ks) if "routing_sm90_kernel" in per[k]["name"] and per[k].get("launch__grid_size") == "1"]
if len(starts) >= 3:
    call = ks[starts[1]:starts[2]]
    tot = sum(num(per[k].get("gpu__time_duration.sum")) or 0 for k in call)
    print("  one steady call: %d kernels, %.1f us of kernel time" % (len(call), tot / 1e3))
' "$RAW/$1_tp$2_M$3_$4.csv"
done

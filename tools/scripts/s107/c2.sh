#!/usr/bin/env bash
# s107, second call: why the split along K ran slower (c1: qwen3-30b TP8 fp8 M = 1 26.1 -> 28.7 µs
# at R = 2, bf16 M = 8 35.4 -> 40.3). Nsight Compute's kernel time and DRAM bytes of the
# expert_mlp launch at R = 1 / 2 / 4 (fp8 M = 1, bf16 M = 1 and 8), then its per-instruction
# warp-stall sampling at fp8 M = 1, R = 1 and R = 2 (stall_report.py). carry [".deps"].
set -u
LIMIT=${LIMIT:-300}
source tools/scripts/device_call.sh
build_bench || exit 1
echo "bench built (left $(left)s)"
ARGS="--backend cuda --iters 1 --no-baseline --no-host-time --path expert_mlp --preset qwen3-30b-a3b --tp 8"
for pt in "fp8_per_tensor 1" "bf16 1" "bf16 8"; do
  set -- $pt
  for r in 1 2 4; do
    [ "$(left)" -gt 40 ] || break
    env MOEKIT_EXPERT_MLP_SPLIT_K=$r timeout 30 ncu --clock-control none -k regex:expert_mlp -c 3 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__cluster_dim_x \
      $BB $ARGS --scheme $1 --tokens $2 >"$O/ncu-$1-M$2-R$r.txt" 2>&1
    echo "$1 M=$2 R=$r: $(grep -E 'gpu__time_duration|dram__bytes_read|launch__grid_size' "$O/ncu-$1-M$2-R$r.txt" |
      awk '{print $1"="$NF}' | tr '\n' ' ') (left $(left)s)"
  done
done
for r in 1 2; do
  [ "$(left)" -gt 45 ] || break
  env MOEKIT_EXPERT_MLP_SPLIT_K=$r OUT=$O timeout $(( $(left) > 80 ? 60 : $(left) - 20 )) \
    bash tools/scripts/stall_sampling.sh $BB expert_mlp 2 --no-baseline --no-host-time --path expert_mlp \
    --preset qwen3-30b-a3b --tp 8 --scheme fp8_per_tensor --tokens 1 >"$O/stalls-R$r.md" 2>&1
  echo "stalls R=$r rc=$? (left $(left)s)"; head -40 "$O/stalls-R$r.md"
done
finish

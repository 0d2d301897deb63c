#!/usr/bin/env bash
# Same-run A/B of the decode path's cluster size (docs/decode.md, choose_tiling's cost model):
# moekit-bench with the decode path forced, once with the model's cluster choice and once per
# forced size (MOEKIT_DECODE_CLUSTER=1|2|4|8; a size that does not fit a point falls back to the
# model's), correctness check on; then tools/scripts/decode_cluster_table.py over the runs.
#
#   tools/scripts/decode_cluster_ab.sh OUT [PRESETS] [TPS] [TOKENS] [SCHEMES]
#   defaults: all presets, TP 8, tokens 1..64, bf16
set -u
cd "$(dirname "$0")/../.."
OUT=${1:?usage: decode_cluster_ab.sh OUT [PRESETS] [TPS] [TOKENS] [SCHEMES]}
PRESETS=${2:-all}
TPS=${3:-8}
TOKENS=${4:-1..64}
SCHEMES=${5:-bf16}
BENCH=${MOEKIT_BUILD_DIR:-build/cuda-release}/tools/bench/moekit-bench
mkdir -p "$OUT"
rc=0
for c in model 1 2 4 8; do
  if [ $c = model ]; then unset MOEKIT_DECODE_CLUSTER; else export MOEKIT_DECODE_CLUSTER=$c; fi
  timeout "${MOEKIT_T_CLUSTER:-200}" "$BENCH" --backend cuda --preset "$PRESETS" --tp "$TPS" --tokens "$TOKENS" \
    --scheme "$SCHEMES" --path decode --no-host-time --json "$OUT/cluster-$c.json" >"$OUT/cluster-$c.log" 2>&1 ||
    { echo "cluster $c: moekit-bench failed (rc $?), $OUT/cluster-$c.log"; rc=1; }
  echo "cluster $c: $(grep -c 'CHECK FAILED' "$OUT/cluster-$c.log") check failures"
done
unset MOEKIT_DECODE_CLUSTER
python3 tools/scripts/decode_cluster_table.py "$OUT"/cluster-*.json | tee "$OUT/cluster-table.md"
exit $rc

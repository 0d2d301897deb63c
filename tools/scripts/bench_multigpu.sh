#!/usr/bin/env bash
# Multi-GPU MoE benchmark: one moekit-bench-multi process per GPU, at TP and EP degree --world
# (default: every visible GPU), for every preset. Rank 0 writes the JSON (bench/results format,
# rows carry mode / world / comm_us / compute_us). Refuses, running nothing, when fewer GPUs are
# visible than asked. NVLink multicast stays off: NCCL_NVLS_ENABLE=0.
#
#   tools/scripts/bench_multigpu.sh [--world 2|4|8] [--build DIR] [--json PATH] [bench args...]
#   e.g. tools/scripts/bench_multigpu.sh --world 8 --modes tp,ep --schemes bf16,fp8 --tokens 1,64,1024
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${root}/build/cuda-release"
world=""
json=""
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --world) world="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done

visible=0
if command -v nvidia-smi > /dev/null 2>&1; then
  if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    IFS=',' read -r -a ids <<< "${CUDA_VISIBLE_DEVICES}"
    visible=${#ids[@]}
  else
    visible=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  fi
fi
[[ -z "${world}" ]] && world="${visible}"
if [[ "${world}" -lt 2 ]]; then
  echo "bench_multigpu.sh: needs at least 2 GPUs (asked for ${world:-0}, ${visible} visible); nothing was run" >&2
  exit 2
fi
if [[ "${visible}" -lt "${world}" ]]; then
  echo "bench_multigpu.sh: asked for ${world} GPUs but only ${visible} are visible; nothing was run" >&2
  exit 2
fi

exe="${build}/tools/bench_multi/moekit-bench-multi"
if [[ ! -x "${exe}" ]]; then
  echo "bench_multigpu.sh: ${exe} not found: configure with CUDA and NCCL and build moekit-bench-multi" >&2
  exit 2
fi

export NCCL_NVLS_ENABLE=0
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
[[ -z "${json}" ]] && json="${root}/bench/results/multigpu-w${world}-${stamp}.json"
mkdir -p "$(dirname "${json}")"
id_file="$(mktemp -u "${TMPDIR:-/tmp}/moekit-nccl-id.XXXXXX")"
logdir="$(mktemp -d "${TMPDIR:-/tmp}/moekit-bench-multi.XXXXXX")"
trap 'rm -f "${id_file}" "${id_file}.tmp"' EXIT

pids=()
for ((r = 0; r < world; ++r)); do
  rank_args=(--world "${world}" --rank "${r}" --device "${r}" --id-file "${id_file}" "${args[@]}")
  [[ "${r}" -eq 0 ]] && rank_args+=(--json "${json}")
  if [[ "${r}" -eq 0 ]]; then
    "${exe}" "${rank_args[@]}" 2>&1 | tee "${logdir}/rank0.log" &
  else
    "${exe}" "${rank_args[@]}" > "${logdir}/rank${r}.log" 2>&1 &
  fi
  pids+=($!)
done

status=0
for ((r = 0; r < world; ++r)); do
  if ! wait "${pids[r]}"; then
    echo "bench_multigpu.sh: rank ${r} failed (log: ${logdir}/rank${r}.log)" >&2
    tail -5 "${logdir}/rank${r}.log" >&2 || true
    status=1
  fi
done
[[ "${status}" -eq 0 ]] && echo "bench_multigpu.sh: results in ${json}"
exit "${status}"

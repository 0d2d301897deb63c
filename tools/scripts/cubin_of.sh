#!/usr/bin/env bash
# Compiles one CUDA translation unit of the build to a cubin (sm_90a ELF, with -lineinfo and
# ptxas -v) for tools/scripts/kernel_code.py, with the build's own nvcc command (ninja's), no GPU:
#
#   tools/scripts/cubin_of.sh src/cuda/kernels/expert_mlp/inst/expert_mlp_sm90.cu OUT.cubin [BUILD_DIR]
#
# BUILD_DIR (default build/cuda-release) must be configured (cmake --preset cuda-release). The
# ptxas report (registers, spills) goes to OUT.cubin.log. Run it in two trees (a worktree of main
# beside the branch) and `kernel_code.py compare` says which kernels a change touched.
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
SRC=$1
OUT=$2
BUILD=${3:-build/cuda-release}
ROOT=$(git -C "$(dirname "$0")/../.." rev-parse --show-toplevel)
REL=${SRC#"$ROOT"/}
OBJ=$(ninja -C "$ROOT/$BUILD" -t targets all 2>/dev/null | grep -F "/$REL.o:" | head -n 1 | cut -d: -f1 || true)
if [ -z "$OBJ" ]; then
  echo "cubin_of.sh: no object of $REL in $ROOT/$BUILD (configure it first)" >&2
  exit 1
fi
CMD=$(ninja -C "$ROOT/$BUILD" -t commands "$OBJ" | tail -n 1)
# The object's command with -cubin in place of -c and the dependency-file flags dropped.
CMD=$(printf '%s' "$CMD" | sed -E 's/ -MD -MT [^ ]+ -MF [^ ]+//; s/ -c / -cubin /; s/ -o [^ ]+$//')
OUT_ABS=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
(cd "$ROOT/$BUILD" && eval "$CMD -Xptxas -v -o '$OUT_ABS'") >"$OUT_ABS.log" 2>&1 ||
  { tail -n 20 "$OUT_ABS.log" >&2; exit 1; }
echo "$OUT_ABS (ptxas: $OUT_ABS.log)"

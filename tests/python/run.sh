#!/usr/bin/env bash
# Build and install moekit's Python package (pip install . -> scikit-build-core -> CMake + nanobind),
# then run the Python suite with pytest. Exits non-zero on any failure, and when no test ran.
#
#   bash tests/python/run.sh                    # CI / developers: CPU reference only (see below)
#   MOEKIT_ENABLE_CUDA=ON MOEKIT_PIP_OFFLINE=1 bash tests/python/run.sh   # GPU machine (no network)
#   bash tests/python/run.sh -k fused_moe       # extra arguments go to pytest
#
# MOEKIT_ENABLE_CUDA (ON|OFF|AUTO) picks whether the extension carries the CUDA backend. It
# defaults to OFF here because CI's C++ build has already compiled the CUDA sources once and
# has no GPU to run them; the GPU machine sets ON. (A plain `pip install .` uses AUTO: CUDA when
# nvcc is found.)
# MOEKIT_PIP_OFFLINE=1: install with --no-build-isolation --no-deps, using the nanobind,
# scikit-build-core, numpy and pytest already installed (the GPU machine has no package index).
# MOEKIT_PY_BUILD_DIR: the CMake build folder (default build/python), kept between runs.
# CMAKE_ARGS: extra CMake arguments, passed through by scikit-build-core.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PYTHON:-python3}
export MOEKIT_ENABLE_CUDA=${MOEKIT_ENABLE_CUDA:-OFF}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
build_dir=${MOEKIT_PY_BUILD_DIR:-build/python}

pip_flags=(--disable-pip-version-check --no-input)
if [[ "${MOEKIT_PIP_OFFLINE:-0}" == 1 ]]; then
  pip_flags+=(--no-build-isolation --no-deps)
else
  echo "== tests/python: installing the test dependencies"
  "$PY" -m pip install --quiet "${pip_flags[@]}" nanobind scikit-build-core numpy ml_dtypes pytest
fi

echo "== tests/python: pip install . (MOEKIT_ENABLE_CUDA=$MOEKIT_ENABLE_CUDA, build dir $build_dir)"
"$PY" -m pip install --quiet "${pip_flags[@]}" . \
  -C build-dir="$build_dir" -C cmake.define.MOEKIT_ENABLE_CUDA="$MOEKIT_ENABLE_CUDA"

echo "== tests/python: pytest"
"$PY" -c "import moekit, sys; print('moekit', moekit.__version__, 'cuda:', moekit.cuda_available(), file=sys.stderr)"
set +e
"$PY" -m pytest -ra tests/python "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "tests/python: pytest collected no tests" >&2
  exit 1
fi
exit $rc

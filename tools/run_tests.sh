#!/usr/bin/env bash
# The one test command: configure and build moekit (cuda-release when nvcc is present, so every
# CUDA source compiles for sm_90a, else cpu-debug), run the C++ suites with ctest (gpu-labelled
# tests report skipped without a Hopper GPU), the CPU suite again built with AddressSanitizer and
# UndefinedBehaviorSanitizer (preset cpu-asan: the host code, validation, the router's plans and
# the CPU reference, with any undefined behaviour an abort), and then the Python tests.
#   MOEKIT_PRESET=cpu-debug bash tools/run_tests.sh   pick the preset
#   MOEKIT_JOBS=N                                     build parallelism (default: nproc)
#   MOEKIT_SANITIZE=0                                 skip the sanitizer pass
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if [[ -n "${MOEKIT_PRESET:-}" ]]; then
  preset=$MOEKIT_PRESET
elif command -v nvcc >/dev/null 2>&1; then
  preset=cuda-release
else
  preset=cpu-debug
fi
jobs=${MOEKIT_JOBS:-$(nproc)}
# Debian's system Python refuses pip installs (PEP 668, "externally managed"); the Python tests
# install their build and test tools with pip, so allow it unless the caller decided otherwise.
export PIP_BREAK_SYSTEM_PACKAGES=${PIP_BREAK_SYSTEM_PACKAGES:-1}
export PIP_ROOT_USER_ACTION=${PIP_ROOT_USER_ACTION:-ignore}
start=$SECONDS
log() { printf '[run_tests %4ds] %s\n' "$((SECONDS - start))" "$*"; }

log "configure (preset $preset)"
cmake --preset "$preset"
log "build (-j$jobs)"
cmake --build --preset "$preset" -j "$jobs"

status=0
log "ctest (preset $preset)"
ctest --preset "$preset" || status=$?

if [[ "${MOEKIT_SANITIZE:-1}" != 0 ]]; then
  log "CPU suite under AddressSanitizer + UndefinedBehaviorSanitizer (preset cpu-asan; MOEKIT_SANITIZE=0 skips)"
  if cmake --preset cpu-asan && cmake --build --preset cpu-asan -j "$jobs"; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
      build/cpu-asan/tests/moekit_cpu_tests --gtest_brief=1 || status=$?
  else
    status=1
  fi
fi

if [[ -f tests/python/run.sh ]]; then
  log "python tests (tests/python/run.sh)"
  MOEKIT_BUILD_DIR="$PWD/build/$preset" bash tests/python/run.sh || status=$?
else
  log "python tests: tests/python/run.sh not present, skipped"
fi

if ((status)); then
  log "FAILED (exit $status)"
else
  log "all passed"
fi
exit "$status"

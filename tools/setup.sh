#!/usr/bin/env bash
# Makes a fresh Debian machine ready for moekit: installs the missing system packages (apt) and
# Python packages (pip), then builds moekit (cuda-release when nvcc is present, else a CPU-only
# release build) and points build/current at it.
#   bash tools/setup.sh              install + build
#   bash tools/setup.sh --deps-only  install only (what .ci/run uses before tools/run_tests.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deps_only=0
for arg in "$@"; do
  case "$arg" in
    --deps-only) deps_only=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

log() { printf '[setup] %s\n' "$*"; }

# ---- system packages (only the missing ones) ----
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); fi
fi
need_apt=()
for pkg in cmake ninja-build g++ libgtest-dev git python3 python3-pip; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    # A python3 / pip / cmake outside dpkg (pyenv, pip-installed cmake) is fine too.
    case "$pkg" in
      python3) command -v python3 >/dev/null 2>&1 && continue ;;
      python3-pip) python3 -m pip --version >/dev/null 2>&1 && continue ;;
      cmake) command -v cmake >/dev/null 2>&1 && continue ;;
      ninja-build) command -v ninja >/dev/null 2>&1 && continue ;;
      g++) command -v g++ >/dev/null 2>&1 && continue ;;
      git) command -v git >/dev/null 2>&1 && continue ;;
    esac
    need_apt+=("$pkg")
  fi
done
# The Python extension needs Python.h of the interpreter that builds it.
if command -v python3 >/dev/null 2>&1 && ! python3 -c \
    'import os, sysconfig, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' \
    2>/dev/null; then
  need_apt+=(python3-dev)
fi
if ((${#need_apt[@]})); then
  if [[ $(id -u) -ne 0 && ${#sudo_cmd[@]} -eq 0 ]]; then
    echo "setup.sh: missing packages (${need_apt[*]}) and no root or sudo to install them" >&2
    exit 1
  fi
  log "apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
else
  log "system packages: all present"
fi

# ---- Python packages for the Python package and its tests (only the missing ones) ----
need_pip=()
for spec in nanobind:nanobind scikit-build-core:scikit_build_core numpy:numpy ml_dtypes:ml_dtypes pytest:pytest; do
  python3 -c "import ${spec#*:}" >/dev/null 2>&1 || need_pip+=("${spec%%:*}")
done
if ((${#need_pip[@]})); then
  log "pip install ${need_pip[*]}"
  # Debian's system Python is "externally managed" (PEP 668); these are build/test tools only.
  PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
    python3 -m pip install -q "${need_pip[@]}"
else
  log "python packages: all present"
fi

if ((deps_only)); then
  exit 0
fi

# ---- build ----
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=${MOEKIT_JOBS:-$(nproc)}
if command -v nvcc >/dev/null 2>&1; then
  # The CUDA backend compiles for sm_90a with or without a GPU on this machine.
  log "nvcc found: building the cuda-release preset (-j$jobs)"
  cmake --preset cuda-release >/dev/null
  cmake --build --preset cuda-release -j "$jobs"
  dir=cuda-release
else
  # No CUDA toolkit: a release build of the CPU reference (fast enough for the presets' small M).
  log "no nvcc: building the CPU reference only, release (build/cpu-release, -j$jobs)"
  cmake -S . -B build/cpu-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_ENABLE_CUDA=OFF >/dev/null
  cmake --build build/cpu-release -j "$jobs"
  dir=cpu-release
fi
ln -sfn "$dir" build/current
log "built build/$dir (build/current points there)"
log "run the main job:  build/current/tools/bench/moekit-bench --preset qwen3-30b-a3b --tokens 1,4,16"

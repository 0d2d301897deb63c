#!/usr/bin/env bash
# THE one GPU script: on a Hopper machine with no network, from the working tree, configure and
# build for sm_90a, run the GPU and CPU suites, compute-sanitizer (memcheck, racecheck) on a small
# subset, and the quick benchmark when moekit-bench exists. Every step runs whatever failed
# before it; logs and JSON go to $1 (or $OUT, or ./gpu-out); exit status is nonzero if any failed.
#
#   tools/scripts/gpu_check.sh [out_dir]
# Environment: MOEKIT_BUILD_DIR (build/cuda-release), MOEKIT_JOBS (16), MOEKIT_GPU_FILTER (ctest -R
# regex for the GPU suite), MOEKIT_SANITIZER_FILTER / MOEKIT_RACECHECK_FILTER (gtest filters),
# MOEKIT_T_<STEP> per-step time limits in seconds (CONFIGURE BUILD GPU CPU MEMCHECK RACECHECK BENCH),
# MOEKIT_COMMIT (the commit to record: moekit-bench's JSON and env.txt; give it literally when the
# tree was copied to the machine without its current git metadata, where `git rev-parse` there
# answers an older HEAD).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT_DIR=${1:-${OUT:-$ROOT/gpu-out}}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUILD=${MOEKIT_BUILD_DIR:-$ROOT/build/cuda-release}
JOBS=${MOEKIT_JOBS:-16}
SAN_FILTER=${MOEKIT_SANITIZER_FILTER:-'Sm90FusedMoe.ZeroTokens/*:Sm90FusedMoe.KEqualsE/*:Sm90FusedMoe.ExpertMapWithRemoteExperts/*:Sm90FusedMoe.Fp8PerTensorStaticScales/*:Sm90FusedMoe.AllTokensOnOneExpert/*:Sm90Dispatch.*:Sm90SwapAbGemm.SplitKMatchesReference:Shapes/Sm90EpBookkeeping.*:Sm90TokMajorGemm.DynamicScheduleSmall:Sm90Faults.*'}
RACE_FILTER=${MOEKIT_RACECHECK_FILTER:-'Sm90FusedMoe.KEqualsE/*:Sm90FusedMoe.Fp8PerTensorStaticScales/*:Sm90SwapAbGemm.Bf16GateUpMatchesReference:Shapes/Sm90EpBookkeeping.*:Sm90TokMajorGemm.DynamicScheduleSmall'}
SCRIPT_START=$(date +%s)

declare -a STEP_NAMES=() STEP_RCS=() STEP_SECS=() STEP_LOGS=()

# run_step NAME TIMEOUT_SECONDS LOGFILE CMD...: run, never stop, record rc and time.
run_step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local t0=$(date +%s)
  echo "=== [$name] $* (limit ${limit}s, log $log)"
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  local rc=$?
  local dt=$(($(date +%s) - t0))
  [ $rc -eq 124 ] && echo "    timed out after ${limit}s" | tee -a "$log"
  echo "    rc=$rc (${dt}s)"; tail -n 5 "$log" | sed 's/^/    | /'
  STEP_NAMES+=("$name"); STEP_RCS+=("$rc"); STEP_SECS+=("$dt"); STEP_LOGS+=("$(basename "$log")")
  return $rc
}
skip_step() {
  echo "=== [$1] skipped: $2"
  STEP_NAMES+=("$1"); STEP_RCS+=("skip"); STEP_SECS+=(0); STEP_LOGS+=("$2")
}

{
  echo "date: $(date -u +%FT%TZ)"
  if [ -n "${MOEKIT_COMMIT:-}" ]; then
    echo "commit: $MOEKIT_COMMIT (MOEKIT_COMMIT; git here says $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
  else
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | wc -l) changed paths"
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  nvcc --version 2>&1 | tail -n 2
  cmake --version | head -n 1
  nproc
} >"$OUT_DIR/env.txt" 2>&1
cat "$OUT_DIR/env.txt"

# ---- configure + build ----
CONFIG_ARGS=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_ENABLE_CUDA=ON
             -DMOEKIT_BUILD_TESTS=ON -DMOEKIT_BUILD_TOOLS=ON -DMOEKIT_PTXAS_VERBOSE=ON)
if [ -d "$ROOT/.deps/googletest" ]; then
  CONFIG_ARGS+=(-DMOEKIT_GTEST_SOURCE_DIR="$ROOT/.deps/googletest")
fi
run_step configure "${MOEKIT_T_CONFIGURE:-120}" "$OUT_DIR/configure.log" cmake "${CONFIG_ARGS[@]}"
CONFIGURED=$?
if [ $CONFIGURED -eq 0 ]; then
  # -k 0: build every target that can be built, so one broken file does not hide the rest.
  run_step build "${MOEKIT_T_BUILD:-300}" "$OUT_DIR/build.log" cmake --build "$BUILD" -j "$JOBS" -- -k 0
  grep -E "spill (stores|loads)" "$OUT_DIR/build.log" | grep -v " 0 bytes spill stores, 0 bytes spill loads" \
    >"$OUT_DIR/ptxas_spills.txt" || true
else
  skip_step build "configure failed"
fi

GPU_TESTS="$BUILD/tests/moekit_cuda_tests"

# ---- test suites ----
if [ -d "$BUILD" ] && [ $CONFIGURED -eq 0 ]; then
  GPU_R=()
  [ -n "${MOEKIT_GPU_FILTER:-}" ] && GPU_R=(-R "$MOEKIT_GPU_FILTER")
  if [ -x "$GPU_TESTS" ]; then
    run_step gpu-suite "${MOEKIT_T_GPU:-300}" "$OUT_DIR/gpu_tests.log" \
      ctest --test-dir "$BUILD" -L gpu "${GPU_R[@]}" -j 4 --timeout ${MOEKIT_TEST_TIMEOUT:-150} --output-on-failure \
      --output-junit "$OUT_DIR/gpu_tests.xml"
  else
    skip_step gpu-suite "no $GPU_TESTS"
  fi
  run_step cpu-suite "${MOEKIT_T_CPU:-150}" "$OUT_DIR/cpu_tests.log" \
    ctest --test-dir "$BUILD" -L cpu -j "$JOBS" --timeout 140 --output-on-failure \
    --output-junit "$OUT_DIR/cpu_tests.xml"
else
  skip_step gpu-suite "no build"
  skip_step cpu-suite "no build"
fi

# ---- compute-sanitizer on a small subset ----
if [ -x "$GPU_TESTS" ] && command -v compute-sanitizer >/dev/null 2>&1; then
  run_step memcheck "${MOEKIT_T_MEMCHECK:-120}" "$OUT_DIR/memcheck.log" \
    compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
    "$GPU_TESTS" --gtest_filter="$SAN_FILTER"
  run_step racecheck "${MOEKIT_T_RACECHECK:-120}" "$OUT_DIR/racecheck.log" \
    compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 3 --print-limit 20 \
    "$GPU_TESTS" --gtest_filter="$RACE_FILTER"
else
  skip_step memcheck "no test binary or compute-sanitizer"
  skip_step racecheck "no test binary or compute-sanitizer"
fi

# ---- quick benchmark (helper C's moekit-bench), when built ----
BENCH="$BUILD/tools/bench/moekit-bench"
[ -x "$BENCH" ] || BENCH=$(find "$BUILD" -path "*install*" -prune -o -type f -name moekit-bench -perm -u+x -print 2>/dev/null | head -n 1)
if [ -n "$BENCH" ]; then
  run_step bench "${MOEKIT_T_BENCH:-150}" "$OUT_DIR/bench.log" \
    "$BENCH" --quick --backend cuda --json "$OUT_DIR/bench.json"
else
  skip_step bench "no moekit-bench binary"
fi

# ---- summary ----
FAILED=0
{
  echo
  echo "moekit gpu_check: $(date -u +%FT%TZ), $(( $(date +%s) - SCRIPT_START ))s total, out: $OUT_DIR"
  printf "%-11s %-7s %6s  %s\n" step result secs log
  for i in "${!STEP_NAMES[@]}"; do
    rc=${STEP_RCS[$i]}
    if [ "$rc" = skip ]; then res=SKIP
    elif [ "$rc" = 0 ]; then res=ok
    elif [ "$rc" = 124 ]; then res=TIMEOUT; FAILED=1
    else res="FAIL($rc)"; FAILED=1
    fi
    printf "%-11s %-7s %6s  %s\n" "${STEP_NAMES[$i]}" "$res" "${STEP_SECS[$i]}" "${STEP_LOGS[$i]}"
  done
  if [ -f "$OUT_DIR/gpu_tests.log" ]; then
    echo "gpu suite: $(grep -E "tests passed|tests failed" "$OUT_DIR/gpu_tests.log" | tail -n 1)," \
      "$(grep -c "(Skipped)" "$OUT_DIR/gpu_tests.log") skipped"
    grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)" "$OUT_DIR/gpu_tests.log" | head -n 20
  fi
  if [ -f "$OUT_DIR/cpu_tests.log" ]; then
    echo "cpu suite: $(grep -E "tests passed|tests failed" "$OUT_DIR/cpu_tests.log" | tail -n 1)"
  fi
  for t in memcheck racecheck; do
    [ -f "$OUT_DIR/$t.log" ] && echo "$t: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT_DIR/$t.log" | tail -n 1)"
  done
  if [ -s "$OUT_DIR/ptxas_spills.txt" ]; then
    echo "ptxas: $(wc -l <"$OUT_DIR/ptxas_spills.txt") kernel(s) spill (ptxas_spills.txt)"
  fi
} | tee "$OUT_DIR/summary.txt"
exit $FAILED

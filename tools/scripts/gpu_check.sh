#!/usr/bin/env bash
# THE one GPU script: on a Hopper machine with no network, from the working tree, configure and
# build for sm_90a, run the GPU and CPU suites, compute-sanitizer (memcheck, racecheck) on a small
# subset, and the quick benchmark when moekit-bench exists, with its correctness check against the
# CPU reference (on by default: a point that fails it fails the step). Every step runs whatever
# failed before it; logs and JSON go to $1 (or $OUT, or ./gpu-out); exit status is nonzero if any failed.
#
#   tools/scripts/stamp_tree.sh          # where the tree is copied from, right before copying it
#   tools/scripts/gpu_check.sh [out_dir] # on the GPU machine
# Provenance: the build bakes the commit, a dirty flag and the working tree's hash into the
# library (moekit::build_info(); moekit-bench's JSON, env.txt). It reads git where .git exists; a
# copy without .git (the GPU machine) is read from build-info.json, which stamp_tree.sh writes at
# the repository root. That file is untracked and deliberately NOT git-ignored: the copy to the GPU
# machine takes tracked and untracked-not-ignored files, so it travels with the tree; do not commit
# it. The build checks it against the files (per-file SHA-256): a tree edited after stamping is
# recorded as dirty with a stale tree hash. MOEKIT_COMMIT is only a last resort (no git, no stamp),
# with a warning.
# Environment: MOEKIT_BUILD_DIR (build/cuda-release), MOEKIT_JOBS (16), MOEKIT_GPU_FILTER (ctest -R
# regex for the GPU suite), MOEKIT_GPU_EXCLUDE (ctest -E regex: tests left out of it),
# MOEKIT_SANITIZER_FILTER / MOEKIT_RACECHECK_FILTER (gtest filters), MOEKIT_T_<STEP> per-step time
# limits in seconds (CONFIGURE BUILD GPU CPU MEMCHECK RACECHECK BENCH).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT_DIR=${1:-${OUT:-$ROOT/gpu-out}}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUILD=${MOEKIT_BUILD_DIR:-$ROOT/build/cuda-release}
JOBS=${MOEKIT_JOBS:-16}
SAN_FILTER=${MOEKIT_SANITIZER_FILTER:-'Sm90FusedMoe.ZeroTokens/*:Sm90FusedMoe.KEqualsE/*:Sm90FusedMoe.ExpertMapWithRemoteExperts/*:Sm90FusedMoe.Fp8PerTensorStaticScales/*:Sm90FusedMoe.AllTokensOnOneExpert/*:Sm90Dispatch.*:Sm90SwapAbGemm.SplitKMatchesReference:Sm90SwapAbGemm.WideStagesMatchReference:Sm90SwapAbGemm.PlainSmallForSanitizers:Sm90RoutingQuant.*:Shapes/Sm90EpBookkeeping.*:Sm90TokMajorGemm.DynamicScheduleSmall:Sm90TokMajorGemm.EarlyWeightsSmall:Sm90TokmajorRoute.SmallForSanitizers:Sm90TokMajorGemm.KshortGemm2Small:Sm90ExpertMlp.SmallForSanitizers:Sm90Faults.*:Sm90Quant.*:Sm90Combine.*:Sm90RopeQuant.*-Sm90RopeQuant.SeventyThousandTokensInt64Offsets'}
RACE_FILTER=${MOEKIT_RACECHECK_FILTER:-'Sm90FusedMoe.KEqualsE/*:Sm90FusedMoe.Fp8PerTensorStaticScales/*:Sm90SwapAbGemm.Bf16GateUpMatchesReference:Sm90SwapAbGemm.WideStagesBitwiseEqualToOneBlock:Sm90SwapAbGemm.Gemm2ManyItemsPerCta:Sm90SwapAbGemm.PlainSmallForSanitizers:Shapes/Sm90EpBookkeeping.*:Sm90TokMajorGemm.DynamicScheduleSmall:Sm90TokMajorGemm.EarlyWeightsSmall:Sm90TokmajorRoute.SmallForSanitizers:Sm90TokMajorGemm.KshortGemm2Small:Sm90ExpertMlp.SmallForSanitizers'}
SCRIPT_START=$(date +%s)

declare -a STEP_NAMES=() STEP_RCS=() STEP_SECS=() STEP_LOGS=()

# MOEKIT_STEPS: a comma list of the steps to run (configure,build,gpu-suite,cpu-suite,memcheck,
# racecheck,bench; default all), so that one lease can split the script over two calls (the
# second one reuses the first one's build directory).
STEPS=",${MOEKIT_STEPS:-configure,build,gpu-suite,cpu-suite,memcheck,racecheck,bench},"
# run_step NAME TIMEOUT_SECONDS LOGFILE CMD...: run, never stop, record rc and time.
run_step() {
  local name=$1 limit=$2 log=$3
  shift 3
  if [[ "$STEPS" != *",$name,"* ]]; then
    echo "=== [$name] skipped: not in MOEKIT_STEPS"
    STEP_NAMES+=("$name"); STEP_RCS+=("skip"); STEP_SECS+=(0); STEP_LOGS+=("not in MOEKIT_STEPS")
    return 0
  fi
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
  # Before the build: what the tree says (git here, else the stamp); after it, the build's own
  # record (moekit-bench --build-info, appended below) is the one the results carry.
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # A copied tree may sit under a stale .git (the device machine's, 2026-12-02: its HEAD was the
    # previous session's commit): when build-info.json stamps the same files, its commit is the
    # tree's, and the line says what git claimed.
    bash tools/scripts/stamp_tree.sh --stdout | python3 -c '
import json, os, sys
d = json.load(sys.stdin)
line = "%s %s tree %s" % (d["commit"], "dirty" if d["dirty"] else "clean", d["tree"])
if os.path.exists("build-info.json"):
    b = json.load(open("build-info.json"))
    if b.get("tree") == d["tree"] and b.get("commit") != d["commit"]:
        print("tree (build-info.json, the same files): %s %s tree %s (the git here says %s)"
              % (b["commit"], "dirty" if b["dirty"] else "clean", b["tree"], d["commit"]))
        sys.exit(0)
print("tree (git): " + line)'
  elif [ -f build-info.json ]; then
    echo "tree (build-info.json, not yet checked against the files): $(python3 -c 'import json; d=json.load(open("build-info.json")); print(d["commit"], "dirty" if d["dirty"] else "clean", "tree", d["tree"], "stamped", d["date"])')"
  else
    echo "tree: unknown (no .git and no build-info.json: run tools/scripts/stamp_tree.sh before copying the tree)"
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
  grep -E "moekit build info|build-info.json is stale" "$OUT_DIR/configure.log" "$OUT_DIR/build.log" 2>/dev/null \
    | tail -n 2 | sed 's/^[^:]*://' >>"$OUT_DIR/env.txt"
else
  skip_step build "configure failed"
fi

GPU_TESTS="$BUILD/tests/moekit_cuda_tests"

# ---- test suites ----
if [ -d "$BUILD" ] && [ $CONFIGURED -eq 0 ]; then
  GPU_R=()
  [ -n "${MOEKIT_GPU_FILTER:-}" ] && GPU_R=(-R "$MOEKIT_GPU_FILTER")
  [ -n "${MOEKIT_GPU_EXCLUDE:-}" ] && GPU_R+=(-E "$MOEKIT_GPU_EXCLUDE")
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
  run_step memcheck "${MOEKIT_T_MEMCHECK:-240}" "$OUT_DIR/memcheck.log" \
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
  echo "build_info (baked into the build): $("$BENCH" --build-info 2>&1)" >>"$OUT_DIR/env.txt"
  # --check is on by default: every point against the CPU reference (a token sample where the
  # full reference would be slow); a failed point makes the step fail.
  run_step bench "${MOEKIT_T_BENCH:-300}" "$OUT_DIR/bench.log" \
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
  if [ -f "$OUT_DIR/bench.json" ]; then
    python3 - "$OUT_DIR/bench.json" <<'PY'
import json, sys
sys.path.insert(0, "tools/scripts")
import bench_rows
d = json.load(open(sys.argv[1]))
print(f"bench: commit {d.get('commit')}, dirty {d.get('dirty')}; " + bench_rows.check_summary(d["rows"]))
print(bench_rows.ratio_table([r for r in d["rows"] if r.get("path", "auto") == "auto"]))
PY
  fi
  if [ -s "$OUT_DIR/ptxas_spills.txt" ]; then
    echo "ptxas: $(wc -l <"$OUT_DIR/ptxas_spills.txt") kernel(s) spill (ptxas_spills.txt)"
  fi
} | tee "$OUT_DIR/summary.txt"
exit $FAILED

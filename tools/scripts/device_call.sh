#!/usr/bin/env bash
# The pieces every branch's device call repeats (sessions 55-62 copied them script to script),
# sourced by a call script run on the device machine from the repository root with $OUT set:
#   source tools/scripts/device_call.sh     # LIMIT (seconds, default 585) before sourcing
#   start_main_build                        # main's moekit-bench from .ab/mid, in the background
#                                           # (MID_JOBS jobs, default 4: 16 where this tree is built)
#   build_tree || exit 1                    # this tree: gpu_check.sh's configure and build
#   build_bench || exit 1                   # this tree's moekit-bench alone (calls that only time)
#   run_tests FILTER [SECONDS]              # the GPU tests, their summary and failures
#   ab NAME "A prefix" "B prefix" ARGS...   # ab_bench.sh into $O/ab-NAME, its summary rows
#   sanitize TOOL FILTER [SECONDS]          # compute-sanitizer TOOL on the GPU tests FILTER, its summary
#   phase_tables VAR VALUE...               # Sm90ExpertMlp.PhaseBreakdown once per VAR=VALUE
#   grid_tp8 [PREVIOUS.json]                # the TP8 grid (auto, baselines, check on) and its report
#                                           # against PREVIOUS (default prev_grid_tp8: this GPU's last)
#   grid_tp1 [PREVIOUS.json]                # the TP1 grid the same way (default prev_grid_tp1)
#   grid_if_gains NAME [MIN]                # grid_tp8 where A/B NAME's median reached MIN (1.005)
#   swapab_times NAME BIN BENCH_ARGS...     # Swap-AB GEMM1 / GEMM2 kernel times (Nsight Compute), one line
#   finish                                  # pack $O (pack_out.sh)
# Sets O ($OUT), B (the build), BB (its moekit-bench), MB (main's, once start_main_build ran).
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
O=$OUT; mkdir -p "$O"
B=build/cuda-release; BB=$B/tools/bench/moekit-bench; MB=build/mid/tools/bench/moekit-bench; MAIN_PID=
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee "$O/gpu.txt"

# main (tools/scripts/ab_base.sh main .ab/mid before the call; carry ".ab/mid"), bench only.
start_main_build() {
  ( cmake -S .ab/mid -B build/mid -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
      >"$O/mid-configure.log" 2>&1 && cmake --build build/mid --target moekit-bench -j "${MID_JOBS:-4}" >"$O/mid-build.log" 2>&1 ) &
  MAIN_PID=$!
}
wait_main_build() { [ -n "$MAIN_PID" ] && wait "$MAIN_PID"; [ -x "$MB" ]; }

build_tree() {
  MOEKIT_STEPS=configure,build bash tools/scripts/gpu_check.sh "$O/b" >"$O/build.txt" 2>&1
  tail -n 1 "$O/build.txt"
  [ -x "$BB" ] || { echo "no build"; finish; return 1; }
}

build_bench() {  # moekit-bench alone, no tests: sets BB to it
  cmake -S . -B build/bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_BUILD_TESTS=OFF \
    -DMOEKIT_GTEST_SOURCE_DIR=$PWD/.deps/googletest >"$O/configure.log" 2>&1 &&
    cmake --build build/bench --target moekit-bench -j 16 >"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; return 1; }
  BB=build/bench/tools/bench/moekit-bench
}

run_tests() {  # gtest filter, time limit
  timeout "${2:-200}" $B/tests/moekit_cuda_tests --gtest_filter="$1" >"$O/tests.log" 2>&1
  echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$O/tests.log" | tr '\n' ' ') (left $(left)s)"
  grep -E "FAILED|Failure|differ" "$O/tests.log" | head -20
}

ab() {  # name "A prefix" "B prefix" bench args...
  local n=$1 a=$2 b=$3; shift 3
  echo "== $n (left $(left)s)"
  timeout "${AB_SECONDS:-120}" bash tools/scripts/ab_bench.sh "$O/ab-$n" "${REPS:-2}" "$a" "$b" "$@" 2>&1 |
    grep -E "^\| (qwen|deep|mix|gpt|TP)|failed" | head -n 14
}

sanitize() {  # tool (memcheck, racecheck), gtest filter, time limit
  timeout "${3:-100}" compute-sanitizer --tool "$1" $B/tests/moekit_cuda_tests --gtest_filter="$2" >"$O/$1.log" 2>&1
  echo "$1 rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/$1.log" | tail -1) (left $(left)s)"
}

phase_tables() {  # environment variable, its values: $O/phases-VAR-VALUE.log each
  local var=$1 v; shift
  for v in "$@"; do
    env "$var=$v" timeout 60 $B/tests/moekit_cuda_tests --gtest_filter=Sm90ExpertMlp.PhaseBreakdown \
      >"$O/phases-$var-$v.log" 2>&1
    echo "phases $var=$v rc=$? (left $(left)s)"
  done
}

# The last TP8 grid of record on this machine's GPU kind (grid_tp8's default comparison): PREV_H100 /
# PREV_H200 override it.
prev_grid_tp8() {
  if grep -q H200 "$O/gpu.txt"; then echo "${PREV_H200:-bench/results/2026-12-06-8bedaec-h200-s104-grid-tp8.json}"
  else echo "${PREV_H100:-bench/results/2026-12-08-7ce5bf7-h100-s128-grid-tp8.json}"; fi
}

grid_tp8() {  # [the previous grid of the same GPU, for grid_report.py's comparison; default prev_grid_tp8]
  local prev=${1:-$(prev_grid_tp8)}
  timeout $(( $(left) - 15 )) $BB --backend cuda --preset all --tp 8 --tokens 1,2,4,8,16,32,64,128,256 \
    --scheme bf16,fp8_per_tensor --check --no-host-time --json "$O/grid-tp8.json" >"$O/grid-tp8.log" 2>&1
  echo "grid tp8 rc=$? (left $(left)s)"
  python3 tools/scripts/grid_report.py "$O/grid-tp8.json" --previous "$prev" --out "$O/grid-tp8-report.md" 2>&1 | head -n 4
}

# The last TP1 grid of record on this machine's GPU kind (grid_tp1's default comparison).
prev_grid_tp1() {
  if grep -q H200 "$O/gpu.txt"; then echo "${PREV1_H200:-bench/results/2026-12-06-1e58526-h200-grid-tp1.json}"
  else echo "${PREV1_H100:-bench/results/2026-12-08-7ce5bf7-h100-s128-grid-tp1.json}"; fi
}

grid_tp1() {  # [the previous grid of the same GPU; default prev_grid_tp1]
  local prev=${1:-$(prev_grid_tp1)}
  timeout $(( $(left) - 15 )) $BB --backend cuda --preset all --tp 1 --tokens 1,2,4,8,16,32,64,128,256 \
    --scheme bf16,fp8_per_tensor --check --no-host-time --json "$O/grid-tp1.json" >"$O/grid-tp1.log" 2>&1
  echo "grid tp1 rc=$? (left $(left)s)"
  python3 tools/scripts/grid_report.py "$O/grid-tp1.json" --previous "$prev" --out "$O/grid-tp1-report.md" 2>&1 | head -n 4
}

swapab_times() {  # name, moekit-bench binary, its arguments (one call: --iters 1): $O/ncu-NAME.txt
  local n=$1 bin=$2; shift 2
  timeout 30 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum -k regex:swapab_sm90_kernel \
    -c 2 "$bin" --backend cuda --iters 1 --no-baseline --no-host-time "$@" >"$O/ncu-$n.txt" 2>&1
  echo "ncu $n: $(grep -A8 'swapab_sm90_kernel<' "$O/ncu-$n.txt" | grep -E 'gpu__time' | awk '{print $NF}' | tr '\n' ' ') us (GEMM1 GEMM2; left $(left)s)"
}

# The TP8 grid (against prev_grid_tp8) where A/B NAME's median (B/A over its points) reached MIN
# (default 1.005) and time is left.
grid_if_gains() {  # ab name, [min median]
  local med
  med=$(grep -m1 "^| TP8 M<=256 |" "$O/ab-$1/compare.md" 2>/dev/null | awk -F'|' '{print $4}')
  echo "median B/A ($1): $med"
  [ -n "$med" ] && python3 -c "import sys; sys.exit(0 if float('$med') >= ${2:-1.005} else 1)" && [ "$(left)" -gt 60 ] || return 0
  grid_tp8
}

finish() { echo "done, left $(left)s"; bash tools/scripts/pack_out.sh "$O"; }

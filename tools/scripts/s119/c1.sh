#!/usr/bin/env bash
# s119 c1 (prepared in session 80; measured in session 81 inside tools/scripts/s124's tree: 1.007x
# median against main's build on an H100, 0.988-1.033x, not landed; docs/perf.md "Session 81"): the token-major
# kernels' kPlain twins
# (tools/scripts/s119/plain_tokmajor.patch: the common call, no bias, the operand's own scale mode,
# the router weight on the output, no phase timer, GEMM1 silu, the chain's output types, fixed at
# compile time as the per-expert MLP kernel's kPlain; MOEKIT_TOKMAJOR_PLAIN=0 keeps the general
# ones). Code (cubin .text, sm_90a, compiled here): GEMM1 226-228 -> 48-50 KB, GEMM2 266 -> 65 KB,
# the ping-pong GEMM2 238 -> 56 KB, GEMM1 with the routing 248-251 -> 72-75 KB; 168 registers and no
# spill either way. The per-expert MLP kernel's plain form ran 1.06-1.13x median (session 80).
# Builds: this tree (gpu_check) and main's moekit-bench (.ab/mid) beside it; the whole GPU suite
# (Sm90TokmajorPlain.BitwiseEqualToGeneral among it, Preload's counts); A/B main -> tree where
# auto runs token-major (mixtral TP8 M = 16..256, deepseek-v3 TP8 M = 64..256, both schemes; check
# on); racecheck / memcheck of the small token-major cases; where the A/B's median gains, the grid.
# carry [".deps", ".ab/mid"]; LIMIT seconds (default 560). Stage:
#   git checkout -b s119 main && git apply tools/scripts/s119/plain_tokmajor.patch && git commit -qam s119
#   tools/scripts/ab_base.sh main .ab/mid && tools/scripts/stamp_tree.sh
set -u
LIMIT=${LIMIT:-560}
source tools/scripts/device_call.sh
start_main_build
build_tree || exit 1
echo "built (left $(left)s)"
run_tests '*-Sm90ExpertMlp.PhaseBreakdown' 200
ARGS="--backend cuda --tp 8 --no-baseline --no-host-time --check"
if wait_main_build; then
  AB_SECONDS=120 REPS=2 ab plain "$MB" "$BB" $ARGS --preset mixtral-8x7b --tokens 16,32,64,128,256 --scheme bf16,fp8_per_tensor
  AB_SECONDS=90 REPS=2 ab plain-ds "$MB" "$BB" $ARGS --preset deepseek-v3 --tokens 64,128,256 --scheme bf16,fp8_per_tensor
else
  echo "main's build failed"; tail -5 "$O/mid-build.log"
fi
sanitize racecheck 'Sm90TokmajorTmaA.SmallForSanitizers' 40
sanitize memcheck 'Sm90TokmajorTmaA.SmallForSanitizers' 30
grid_if_gains plain
finish

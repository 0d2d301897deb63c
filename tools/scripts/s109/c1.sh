#!/usr/bin/env bash
# s109: the warm warp (MOEKIT_EXPERT_MLP_WARM_ACT=1), as long as LIMIT allows (seconds, default
# 420): the SASS of the untimed one-CTA kernels against main's (.ab/em/em-main.o, compiled on the
# workstation; one call site of consume must keep one copy of the activation: MUFU.EX2 counts), the
# per-expert MLP tests, the phase tables with the switch 0 / 1, the A/B 0 against 1
# (expert_mlp forced at qwen3-30b TP8, the one-CTA form, M = 4..256, both schemes), racecheck and
# memcheck with it on. carry [".deps", ".ab/em"].
set -u
LIMIT=${LIMIT:-420}
source tools/scripts/device_call.sh
build_tree || exit 1
echo "built (left $(left)s)"
OBJ=build/cuda-release/CMakeFiles/moekit_cuda.dir/src/cuda/kernels/expert_mlp/inst/expert_mlp_sm90.cu.o
for o in .ab/em/em-main.o "$OBJ"; do
  [ -f "$o" ] || continue
  cuobjdump -sass "$o" > "$O/sass-$(basename "$o").txt" 2>&1
  echo "== $o"
  awk '/Function :/{if (name != "") print name, n, ex2; name=$3; n=0; ex2=0} /\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]\*\//{n++} /MUFU.EX2/{ex2++} END{print name, n, ex2}' \
    "$O/sass-$(basename "$o").txt" | grep -E "ILNS0_7OperandE[012]ELb0ELb0ELb0ELb0E" | sed 's/_ZN6moekit4cuda10expert_mlp22expert_mlp_sm90_kernel//'
done
run_tests 'Sm90ExpertMlp.*-Sm90ExpertMlp.PhaseBreakdown' 100
phase_tables MOEKIT_EXPERT_MLP_WARM_ACT 0 1
for f in "$O"/phases-*.log; do
  echo "-- $(basename "$f")"
  grep -E "expert_mlp qwen3-30b|routed|first weights|first GEMM1 stage landed|consumers done|GEMM1 incl|activation, h|act: values|GEMM2 tiles|GEMM2: stores" "$f" | grep -A9 -E "TP8 (fp8 )?M=(1|8|64):" | head -30
done
[ "$(left)" -gt 60 ] && AB_SECONDS=$(( $(left) > 200 ? 110 : $(left) / 2 )) REPS=2 ab warm \
  "env MOEKIT_EXPERT_MLP_WARM_ACT=0 $BB" "env MOEKIT_EXPERT_MLP_WARM_ACT=1 $BB" --backend cuda --tp 8 --no-baseline \
  --no-host-time --check --path expert_mlp --preset qwen3-30b-a3b --tokens 4,8,16,32,64,128,256 --scheme bf16,fp8_per_tensor
export MOEKIT_EXPERT_MLP_WARM_ACT=1
[ "$(left)" -gt 30 ] && sanitize racecheck 'Sm90ExpertMlp.SmallForSanitizers' 30
[ "$(left)" -gt 25 ] && sanitize memcheck 'Sm90ExpertMlp.SmallForSanitizers' 25
finish

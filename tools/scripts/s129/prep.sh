#!/usr/bin/env bash
# s129 prep (run here, before c1): the bisect trees of the qwen3-30b TP8 fp8_per_channel slowdown
# (session 83: main 0.900x of 2f78ff0 in one run; two w13 boxes are not the cause). Each tree is a
# commit's files as tools/scripts/ab_base.sh writes them, less docs/, python/ and tools/scripts/ (a
# moekit-bench build needs none of them), so that three trees and the working tree fit the device's
# 64 MiB transfer. The stamps were made before the pruning, so their builds name the commit but may
# call the tree dirty.
#   .ab/mid  2f78ff0  the last grid where the points ran fast
#   .ab/b1   17a2276  two w13 boxes (78ba862) and the warm pass's code, before the warm warp
#   .ab/b2   3cfff2e  the warm warp on (kThreads 160 -> 192 in every expert_mlp kernel)
# then carry [".deps/googletest", ".ab/mid", ".ab/b1", ".ab/b2"].
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
for spec in mid:2f78ff0 b1:17a2276 b2:3cfff2e; do
  d=.ab/${spec%%:*}
  bash tools/scripts/ab_base.sh "${spec#*:}" "$d"
  rm -rf "$d/docs" "$d/python" "$d/tools/scripts"
done
du -sh .ab/mid .ab/b1 .ab/b2

#!/usr/bin/env bash
# s107, third call: tools/bench/tma_stream_probe.cu (run as tools/scripts/s107/tpc_stream.cu), a
# bare TMA ring's rate a CTA with few CTAs streaming, alone and in clusters of 2 / 4 (is a CTA's
# ~39 GB/s its SM's or shared with its TPC's other SM?). No build of moekit; ~1 minute. carry [].
set -u
O=$OUT; mkdir -p "$O"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee "$O/gpu.txt"
nvcc -std=c++17 -O2 -arch=sm_90a -Isrc -Iinclude -o /tmp/tpc_stream tools/bench/tma_stream_probe.cu 2>"$O/nvcc.log" || { tail "$O/nvcc.log"; exit 1; }
timeout 120 /tmp/tpc_stream | tee "$O/tpc-stream.md"

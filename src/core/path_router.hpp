// The kernel-path router of the CUDA backend: per call, either the fused single launch or which
// GEMM implementation runs GEMM1 and GEMM2 (Swap-AB wgmma, token-major wgmma or the mma.sync
// grouped GEMM) and with which split-K, from host-known sizes only (the per-expert token counts live on the device; the host never syncs). Host code,
// no CUDA: backend.cu asks the kernels' can_implement and hands the answers in; the CPU tests
// call choose_paths directly. The heuristic's constants sit in one table (kRouterTable) to retune.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "moekit/problem.hpp"

namespace moekit::detail {

/// The GEMM implementations one GEMM of a call can run on.
enum class GemmImpl : int {
  kMma,     ///< mma.sync grouped GEMM, 64-row token tiles (src/cuda/kernels/mma/)
  kSwapab,  ///< Swap-AB wgmma + TMA (src/cuda/kernels/swapab/): weights on wgmma's M side
  kTokmajor,///< token-major wgmma, 128-token tiles, warp-specialized (src/cuda/kernels/tokmajor/)
};
const char* gemm_impl_name(GemmImpl impl) noexcept;  ///< "mma", "swapab", "tokmajor"

/// The names Options::path / MOEKIT_PATH accept, in the order error messages list them.
/// "fused" is the cooperative single-launch path; "tokmajor" the token-major wgmma path;
/// "decode" the single-launch decode path (src/cuda/kernels/decode/); "gemv" the GEMV decode
/// path (src/cuda/kernels/gemv/: one cooperative launch on the CUDA cores); "expert_mlp" the
/// per-expert MLP kernel (src/cuda/kernels/expert_mlp/: one CTA an expert's token tile through both
/// GEMMs, then the combine).
inline constexpr const char* kPathNames[] = {"auto", "mma", "swapab", "fused", "tokmajor", "decode", "gemv",
                                             "expert_mlp"};

/// The heuristic's constants, in one place.
struct RouterTable {
  // Swap-AB (weights on wgmma's 64-row side, an expert's tokens on the N side) vs the mma.sync
  // token-major tiles, as measured on the H200 with `moekit-bench --path auto,mma,swapab`
  // (bench/results/2026-11-29-5b311f8-h200-paths.json; docs/router.md has the table):
  // - bf16: Swap-AB up to 24 expected tokens per touched expert (16 still wins: mixtral M=64 and
  //   gpt-oss M=256 still win by 4-12%; at 64 tokens/expert mma's 64x128 tiles reuse weights better);
  // - fp8: up to 48 (16 wins, 64 loses).
  // - past these, the token-major wgmma path (kernels/tokmajor/) when it can run the GEMM: it beat
  //   mma at every point measured from M = 1024 on (mixtral bf16 M=8192: 13.1 vs 24.4 ms; fp8:
  //   7.8 vs 24.4 ms; bench/results/2026-11-29-66ab841-h200-prefill.json), else mma.
  // - small bf16 shards (N < 256, e.g. qwen3-30b at TP8, N = 96): Swap-AB only up to 32 slots; with
  //   2N = 192 rows its 64-row tiles and one-stage GEMM2 items cost more than they stream.
  // Retuned from the path sweep after the Swap-AB metadata / tiles-per-item change (commit f522c23,
  // H200, 2026-11-29, bench/results/2026-11-29-f522c23-h200-paths.json):
  // - mid shards (256 <= N < 512: deepseek-v3 N = 256, gpt-oss N = 360 at TP8), bf16: Swap-AB only
  //   up to 2 tokens per expert, 17 since session 26 (below; deepseek M=16, 1.3/expert: 346 vs
  //   400 µs mma; M=64, 2.3/expert: 548 vs 517 mma, while gpt-oss at 2.3/expert: 276 vs 284 — 6 %
  //   won, 3 % lost), mma above, token-major past the prefill limit.
  // - fp8 on any shard under 512 (N < 512): Swap-AB up to 8 tokens per expert (17 since session
  //   26) whatever the slot count (qwen3-30b TP8 M=16: 83 vs 89 µs mma; M=64: 109 vs 111), then token-major (M=256,
  //   16/expert: 146 vs 164 mma vs 167 Swap-AB; qwen3-235b: 294 vs 320; deepseek M=256, 8/expert:
  //   586 vs 609) — the mma path runs fp8 through f16 unpacking.
  double swapab_max_tokens_per_expert_bf16 = 24.0;
  // fp8 was 48 until session 21: with the bias loads issued together (5a1abae), token-major took
  // gpt-oss-120b TP1 fp8 M = 1024 (32 tokens/expert) at 1028 against Swap-AB's 1247 us; at M = 512
  // (16 tokens/expert) 994 against 1010, at M = 256 969 against 912 (same run, check on,
  // bench/results/2026-12-02-5a1abae-h200-gptoss-paths.json). Only the late crossovers read it
  // (biases, or a GEMM token-major cannot run).
  double swapab_max_tokens_per_expert_fp8 = 24.0;
  std::int64_t small_n = 256;
  double small_n_max_slots = 32.0;
  std::int64_t mid_n = 512;
  // Session 26 (H200, 2026-12-02, same-run sweep of every path forced, check on;
  // bench/results/2026-12-02-74717a5-h200-gptoss-tp8-paths.md): with Swap-AB's GEMM2 on 8-byte
  // rows and two CTAs an SM (session 25), Swap-AB is the fastest path at gpt-oss TP8 (N = 360, the
  // preset that reaches these two lines: its biases take the late crossovers) from 2 to 16
  // tokens/expert in both schemes: bf16 M = 64 223.4 against mma's 259.8 us, M = 256 255.6 / 289.1,
  // M = 512 301.8 / 318.2; fp8 M = 256 202.4 against token-major + mma's 250.4, M = 512 243.5 /
  // 275.7. At 32 tokens/expert (M = 1024) token-major wins (bf16 340.4 against 390.7, fp8 310.2
  // against 328.4), which the prefill limit above already picks in bf16. Both were 2 (bf16) and 8
  // (fp8) until then; 17 keeps M = 512's 16.0 expected tokens/expert inside.
  double mid_n_max_tokens_per_expert_bf16 = 17.0;
  double mid_n_max_tokens_per_expert_fp8 = 17.0;
  // Swap-AB split-K (choose_swapab_split below; the plan passes it to the launcher): the
  // largest S in {1, 2, 4, 8} with items x S x 2 <= SMs and >= 4 x S K stages (128 bytes each)
  // before doubling: split only to fill SMs that would otherwise idle. Measured against a rule
  // that also splits to fill a partial last wave (S up to 8 wherever items x S reach 90 % wave
  // efficiency; H200, commit d8a2d07, bench/results/2026-11-29-d8a2d07-h200-split-{fill,waves}.json,
  // 80 decode points): it lost wherever it changed S, down to 0.66x (mixtral TP8 M=2: 76.5 vs 115 µs
  // with S = 8; qwen3-30b TP1 M=1: 50.9 vs 65.0 with S = 4): the cluster reduction and the shorter
  // per-rank K loop cost more than the idle SMs of a partial wave. Measured again in session 22
  // with the wide stages (MOEKIT_SWAPAB_SPLIT forced, 4f59b65, docs/router.md "Session 22"): split 2
  // against 1 0.81-0.87x at TP1 fp8 (gpt-oss M = 1: 180 items, a partial second wave), 0.58-0.70x
  // at TP8 fp8.
  int max_split_k = 8;
  int min_k_stages_per_rank = 4;
  // The single-launch fused path, when it can run the call (RouterInputs::fused_ok), for the
  // smallest shards (N <= fused_max_n) and at most this many local slots. Measured on the H200
  // (commit f522c23, bench/results/2026-11-29-f522c23-h200-fused.json, cooperative launch):
  // qwen3-30b TP8 (N = 96) M=1 27.7 µs fused vs 36.0 Swap-AB (fp8 27.2 vs 40.4), M=2 36.2 vs 45.5;
  // M=4 56.0 vs 49.7; at N = 192 (qwen3-235b TP8) it already loses at M=1 (57.7 vs 46.8), and
  // more so with a larger N: its weight stream is slower than Swap-AB's TMA pipeline, it wins
  // only where the launches and latencies of the multi-launch chain dominate.
  // The early token-major crossover, where token-major can run both GEMMs and the experts carry
  // no biases. Retuned from the same-run path sweep after token-major's 93d0e90 epilogues and the
  // LDS/STS change (H200, commit cda930d, 2026-11-29, bench/results/2026-11-29-cda930d-h200-paths.json:
  // every preset, TP 1 and 8, bf16 and fp8_per_tensor, M = 1..1024, paths mma, swapab, tokmajor):
  // - Swap-AB up to 32 local slots (M <= 4 at k = 8): it wins at 1-2 tokens where its 64-row weight
  //   tiles and split-K fill the SMs (qwen3-235b TP8 M=1: 47.0 vs 69.1 µs token-major); from 64
  //   slots token-major wins almost everywhere, by up to 1.45x (deepseek-v3 TP8 fp8 M=128: 305.7
  //   vs 442.2; qwen3-235b TP8 bf16 M=256: 211.5 vs 303.6 mma). Losses it accepts: qwen3-30b TP1
  //   M=8 (173.6 vs 161.9, 7 %), deepseek-v3 TP8 bf16 M=4 on Swap-AB (143.3 vs 132.4 token-major).
  // - tiny shards (N < tiny_n, qwen3-30b TP8, N = 96): Swap-AB up to 64 slots, then bf16 on mma
  //   while tokens/expert <= 3 (M=16: 77.5 mma vs 77.7 token-major, M=32: 87.7 vs 88.7), token-major
  //   above (M=64: 90.6 vs 99.2); fp8 goes token-major past 64 slots (M=16: 71.4 vs 83.1 Swap-AB).
  // - experts with biases (gpt-oss-120b, the only such preset) keep the crossovers above: there
  //   token-major lost at every M <= 512 (TP1 bf16 M=64: 1579 vs 1384 Swap-AB; TP8 bf16 M=256: 413
  //   vs 322 mma). Ncu at M=256: both token-major GEMMs stream at 3.6-4.0 TB/s at TP1 against
  //   Swap-AB's 3.9-4.3, and GEMM2 at TP8 (K = 360) takes 225 µs against mma's 138; the bias is a
  //   proxy for that shape, its cause is not measured yet (docs/router.md).
  double early_swapab_max_slots = 32.0;
  // bf16 leaves Swap-AB past 16 slots (session 20, same-run path sweep on the H200, check on,
  // bench/results/2026-12-02-86c683c-h200-paths-tp{8,1}.json): token-major at 32 slots, mixtral TP8
  // M = 16 106.7 against Swap-AB's 114.0 µs, mixtral TP1 M = 16 668.0 against 681.7, deepseek-v3
  // TP1 M = 4 660.6 against 683.0; fp8 keeps 32 (qwen3-30b TP1 M = 4 Swap-AB 74.1 against
  // token-major 81.9, mixtral TP8 / TP1 M = 16 within 1.3 %).
  double early_swapab_max_slots_bf16 = 16.0;
  // Calls on at most few_experts experts (mixtral's 8) have bounds of their own here and in the
  // GEMV tensor-core rule (gemv_mma_few_experts_max_tokens*).
  std::int64_t few_experts = 16;
  // bf16 and fp8_per_tensor on few experts (mixtral) leave Swap-AB past 10 slots, and the TP1-sized
  // clause below (fp8_mid) does not take them. fp8 from session 37 (same-run sweep of the paths
  // forced, two passes, check on; bench/results/2026-12-03-4b50020-h200-router-sweep*): token-major
  // at mixtral TP8 M = 9, 12, 16 70.1 / 74.7 / 74.5 µs against Swap-AB's 73.8 / 78.3 / 78.8, TP1
  // M = 9, 12, 16 330.9 / 368.2 / 367.1 against 338.3 / 369.3 / 369.9. From 16 down to 10 slots
  // (both schemes) in session 39 (TP1 forced sweep at 9666b2d and a same-run A/B at 1684afd, three
  // repeats, check on; bench/results/2026-12-04-9666b2d-h200-paths-tp1.{json,md},
  // 2026-12-04-1684afd-h200-router-ab.{json,md}): token-major at M = 6 / 8 605.8 / 607.6 µs against
  // Swap-AB's 633.6 / 635.0 (bf16), 330.7 / 331.1 against 334.2 / 337.9 (fp8); Swap-AB at M = 5 (10
  // slots) 533.8 against 560.7 (bf16), 285.6 against 310.6 (fp8). At TP8 the GEMV rules take
  // mixtral up to M = 8 / 9 first.
  double early_swapab_max_slots_few_experts = 10.0;
  // fp8_per_tensor on the few experts' shards (N < few_experts_shard_max_n: mixtral TP8) keeps
  // Swap-AB up to 16 slots, the plain kernels' rows (1664c34), where gemv(mma) no longer takes them
  // (gemv_mma_few_experts_max_tokens_per_tensor_shard): M = 8 69.8 µs against gemv(mma)'s 79.3
  // (session 83, the sweep named there).
  double early_swapab_max_slots_few_experts_shard_fp8 = 16.0;
  std::int64_t few_experts_shard_max_n = 2048;
  // fp8_per_channel on the TP8 shards (tiny_n <= N < mid_n: deepseek-v3, qwen3-235b) keeps
  // Swap-AB up to this many slots: its token-major GEMMs stream slower than per tensor's (session
  // 39, TP8 forced sweep at 9666b2d, check on;
  // bench/results/2026-12-04-9666b2d-h200-paths-tp8-channel.{json,md}):
  // deepseek-v3 M = 16 / 32 / 64 Swap-AB 181.5 / 233.5 / 293.4 µs against token-major's 218.4 /
  // 256.2 / 298.2; qwen3-235b M = 32 / 64 146.5 / 167.1 against 166.9 / 171.3; at M = 128 (1024
  // slots) token-major leads (352.9 against 354.8; 176.3 against 178.9).
  double channel_swapab_max_slots = 512.0;
  // fp8 on TP1-sized experts (N >= mid_n) of a hidden size up to early_swapab_fp8_max_k keeps
  // Swap-AB past those slots while the tokens per expert stay at most this many (session 22, with
  // Swap-AB's wide stages: forced sweep at 4f59b65, H200, bench/results/2026-12-02-4f59b65-h200-paths.json:
  // qwen3-30b TP1 fp8 M = 8 Swap-AB 102.5 against token-major's 112.3 us, M = 16 147.5 / 152.2,
  // M = 32 188.6 / 196.9, M = 64 (~4 tokens/expert) 217.7 / 205.0; qwen3-235b TP1 M = 8..32
  // 1.01-1.03x; deepseek-v3 TP1 (K = 7168) 0.99-1.00x, left on token-major; TP8 shards (N < 512)
  // lose on Swap-AB there: qwen3-235b TP8 fp8 M = 8 94.4 against 73.1).
  double early_swapab_fp8_max_tokens_per_expert = 2.5;
  std::int64_t early_swapab_fp8_max_k = 4096;
  // fp8_block128 in the early crossover keeps Swap-AB much longer: token-major's block128 tiles are
  // 128 weight columns wide (per tensor 256) and wait for each K group's wgmmas before promoting
  // them, so it streams slower. The same-run sweep of session 27 (every GEMM path forced next to
  // auto, TP 1 and 8, M = 1..256, check on; bench/results/2026-12-03-36bbc7d-h200-block128-paths.md)
  // had Swap-AB ahead of token-major by 1.10-1.36x from 8 up to 1024 local slots on the TP8
  // shards (N < mid_n: deepseek-v3 M = 8 124.5 vs 169.4 µs, M = 128 333.7 vs 398.5; qwen3-235b
  // M = 128 173.4 vs 190.2) and behind from 2048 (deepseek-v3 M = 256 461.4 vs 428.9, qwen3-235b
  // 217.8 vs 195.7); on TP1-sized experts (N >= mid_n) ahead up to 16 tokens per expert
  // (deepseek-v3 M = 32 1064.0 vs 1388.9; qwen3-235b M = 256, 16.0 tokens an expert, 711.6 vs
  // 833.2; mixtral TP8 M = 64 85.0 vs 87.1) and behind at 32 (mixtral M = 128: 507.3 vs 467.7 at
  // TP1, 113.1 vs 89.0 at TP8).
  double block128_swapab_max_slots = 1024.0;            // N < mid_n
  double block128_swapab_max_tokens_per_expert = 24.0;  // N >= mid_n
  std::int64_t tiny_n = 128;
  double tiny_n_swapab_max_slots = 64.0;
  double tiny_n_mma_max_tokens_per_expert_bf16 = 3.0;
  std::int64_t fused_max_n = 128;
  double fused_max_slots = 16.0;
  // On since the cooperative launch (fused launcher): the earlier failures (a graph-replay
  // mismatch and hangs) came from a test harness race on the legacy stream and from CTAs not
  // guaranteed co-resident; the stress test (Sm90FusedSingleLaunch.StressStreamsGraphsEagerUnderLoad)
  // and the suite pass on the H200 since.
  bool fused_in_auto = true;
  // The single-launch decode path (kernels/decode/), when it can run the call
  // (RouterInputs::decode_ok: bf16 and every fp8 scheme), ahead of everything
  // else on TP shards: N < decode_tiny_n up to decode_tiny_n_max_slots local slots, N <
  // decode_small_n up to decode_small_n_max_slots, N < decode_mid_n up to decode_mid_n_max_slots.
  // From the same-run sweeps of decode (every cluster size forced, and the cost model's choice;
  // H200, 2026-12-01, commit 6434031, bench/results/2026-12-01-6434031-h200-decode-cluster-ab.json)
  // against the previous auto choice (MOEKIT_DECODE=0, the grid at 875d60a,
  // bench/results/2026-12-01-875d60a-h200-decode-grid.json), bf16, TP8: qwen3-30b (N = 96) wins
  // M = 1..64 (M=1 17.9 vs 28.0 µs, M=8 37.3 vs 59.0, M=64 72.5 vs 85.4); deepseek-v3 (N = 256)
  // and qwen3-235b (N = 192) win M = 1..4 once the cluster is right (deepseek M=2 73.1 vs 83.8;
  // qwen3-235b M=4 62.6 vs 80.1), tie at 8 (within 3 %; the whole-grid A/B at 91e5b36 under the
  // write flush had deepseek M=8 on decode 5 % slower than token-major: left out), win again at
  // 16 (236.6 vs 272.2; left out with 8) and lose from 32;
  // gpt-oss (N = 360, k = 4) wins M = 1, 2 (28.0 vs 36.6, 40.2 vs 43.1) and loses from 4;
  // mixtral (N = 1792) M = 1, 2 within 3 % (left out); TP1 loses but for qwen3-30b M = 8, 16.
  // fp8_per_tensor (the split call with dynamic scales; same run, bench/results/
  // 2026-12-01-cc86fd0-h200-decode-sweep-fp8.json): qwen3-30b wins M = 1..32 (M=1 24.6 vs 27.3,
  // M=8 39.5 vs 52.4, M=32 64.4 vs 74.4) and loses at 64 (90.3 vs 77.7); deepseek-v3 and
  // qwen3-235b win M = 1..4 (45.0 vs 62.9, 90.5 vs 100.5; 32.9 vs 42.3, 56.2 vs 64.9) and lose
  // from 8; mixtral M = 1 loses (40.9 vs 39.7); gpt-oss (N = 360 fp8: rows of 360 bytes) declines.
  // Since token-major GEMM2's ping-pong consumers (session 19, docs/tokmajor.md) qwen3-30b fp8
  // M = 32 (256 slots) runs faster token-major: 57.6 vs 60.1 µs, same-run sweep with the check on
  // (bench/results/2026-12-02-a6fb45b-h200-pingpong-paths.json), so fp8 takes decode up to 128.
  // bf16 on N < decode_small_n takes it up to 128 slots since session 20: the GEMV rules take
  // qwen3-235b TP8 up to M = 16 and deepseek-v3 TP8 up to M = 13 (the tensor-core GEMV kernel's
  // shared memory: its token rows), so what moves is deepseek-v3 TP8 M = 14..16, where decode won
  // in every sweep at M = 16 (236.6 against token-major's 272.2 µs at 6434031; 237.2 against 265.0
  // at 86c683c; 237.4 against 263.0 at ab8148a, two passes; check on, bench/results/
  // 2026-12-02-{86c683c-h200-paths-tp8,ab8148a-h200-retune-ds8-*}.json) and lost at 32 (350.2
  // against 299.8).
  // fp8_block128 (one kBlock128 launch, no split; session 27, same-run sweep, check on, decode
  // forced against the previous auto choice, bench/results/2026-12-03-b18eaab-h200-decode-block128-sweep-tp{8,1}.json):
  // qwen3-30b TP8 (N = 96; Swap-AB and token-major decline its GEMM1: N % 64 != 0) wins M = 1..128
  // (M=1 22.1 vs 29.8 µs, M=8 36.5 vs 83.2, M=128 98.0 vs 117.5) and loses at 256 (163.5 vs
  // 147.1); deepseek-v3 and qwen3-235b TP8 win M = 1 (45.0 vs 59.4; 32.9 vs 38.1) and lose or tie
  // at M = 2 and 4 (70.7 vs 62.4; 48.0 vs 44.0); mixtral TP8 M = 1 ties; TP1 loses everywhere.
  // fp8_per_channel (session 28: one kChannel launch at N <= 128, else kChannelUp + kChannelDown;
  // same-run sweep, decode forced against the previous auto choice, check on,
  // bench/results/2026-12-03-a3ee14c-h200-decode-channel-sweep.md): qwen3-30b TP8 (N = 96) wins
  // M = 8..64 (M=8 35.9 vs gemv(mma)'s 39.9 µs, M=32 54.3 vs token-major's 83.9, M=64 77.8 vs
  // 85.4) and loses at M = 1..4 (23.5 vs 18.8 at M = 1: gemv(mma) keeps those,
  // gemv_mma_channel_tiny_n_max_tokens) and from 128 (99.6 vs 87.6); mixtral TP8 (N = 1792) wins
  // M = 1 (42.3 vs Swap-AB's 46.3; 45.5 vs 47.9 in the session's first sweep) and ties at 2;
  // deepseek-v3, qwen3-235b TP8 lose everywhere (gemv(mma) up to 16 tokens, 0.68-0.95x);
  // gpt-oss TP8 declines (360-byte fp8 rows); TP1 loses everywhere (0.48-0.91x).
  std::int64_t decode_tiny_n = 128;
  // bf16 on N < 128: 256 slots since session 46 (was 512): at qwen3-30b TP8 M = 64 token-major
  // with the routing in GEMM1 and the static K-short GEMM2 took 64.6 µs against decode's 70.8, at
  // M = 32 61.2 against 58.2 (same run, check on; docs/router.md "Session 46").
  double decode_tiny_n_max_slots = 256.0;
  double decode_tiny_n_max_slots_fp8 = 128.0;
  double decode_tiny_n_max_slots_block128 = 1024.0;
  std::int64_t decode_small_n = 320;
  double decode_small_n_max_slots = 128.0;
  double decode_small_n_max_slots_fp8 = 32.0;
  double decode_small_n_max_slots_block128 = 8.0;
  double decode_tiny_n_max_slots_channel = 512.0;
  double decode_small_n_max_slots_channel = -1.0;
  std::int64_t decode_mid_n = 512;
  double decode_mid_n_max_slots = 8.0;
  double decode_mid_n_max_slots_channel = -1.0;
  // fp8_per_channel only: N < decode_large_n up to this many slots (mixtral TP8 M = 1).
  std::int64_t decode_large_n = 2048;
  double decode_large_n_max_slots_channel = 2.0;
  // fp8_per_channel on N < decode_tiny_n keeps gemv(mma) up to this many tokens and leaves the
  // rest of its rule (up to gemv_mma_max_tokens) to decode, where decode can run.
  double gemv_mma_channel_tiny_n_max_tokens = 4.0;
  bool decode_in_auto = true;
  // The per-expert MLP kernel (kernels/expert_mlp/), when it can run the call (bf16 / fp16, and
  // fp8_per_tensor and fp8_per_channel by the switches below, at N = 96: qwen3-30b TP8), ahead of everything else from expert_mlp_min_slots to expert_mlp_max_slots
  // local slots. Session 54's same-run A/B on an H100 (MOEKIT_EXPERT_MLP 0 against 1 at 2c40191,
  // two repeats, check on; bench/results/2026-12-05-2c40191-h100-expert-mlp-ab-tp8.md), qwen3-30b
  // TP8 bf16, against the previous auto choice: M = 16 / 32 / 64 / 128 / 256 (128..2048 slots)
  // 1.09-1.11x (M = 64 73.4 -> 67.0 µs, M = 256 79.3 -> 72.6), M = 8 (64 slots) 0.97x, M = 1..4
  // 0.37-0.72x (8..31 experts: one SM streams each expert's 1.1 MB alone). Past 2048 slots not
  // measured. Session 61's same-run path sweep (expert_mlp forced against auto, H100, two repeats,
  // check on; bench/results/2026-12-06-d10f69f-h100-s67-expert-mlp-sweep-tp8.md) moved the start
  // down to 96 slots for bf16 / fp16 (M = 12: 44.7 against gemv(mma)'s 46.9 µs, M = 14 45.6 against
  // 49.2; M = 10 43.3 against 40.3 stays on gemv(mma)) and to expert_mlp_fp8_min_slots = 48 for
  // fp8_per_tensor (M = 6..14 1.08-1.31x: M = 8 29.2 against 33.6 µs, M = 14 30.3 against 39.7;
  // M = 5 29.2 against 26.0 stays on gemv(mma)). Session 62's producer lean gather (a unit's live
  // token rows only, 1.15-1.23x at M = 8) and its same-run path sweep (H100, two repeats, check on;
  // bench/results/2026-12-06-3f3c453-h100-s68-path-sweep-tp8.md) moved them to 48 (bf16 M = 6 / 8 /
  // 10: 34.0 / 34.7 / 35.4 against gemv(mma)'s 35.5 / 39.1 / 40.4 µs; M = 5 33.8 against 30.5 stays)
  // and 40 (fp8 M = 5: 24.8 against 26.1; M = 4 24.6 against 23.1 stays). Session 80's kPlain
  // kernels (the common call's features at compile time, half the code; docs/perf.md "Session 80")
  // and its same-run sweep (H100, c6e1d5f, two repeats, check on, best of two;
  // bench/results/2026-12-07-c6e1d5f-h100-s118-router-sweep.md) moved them to 32 (bf16 M = 4 / 5:
  // 26.7 / 27.8 against gemv's 27.9 and gemv(mma)'s 30.8 µs; M = 3 26.3 against 23.0 stays) and 24
  // (fp8 M = 3 / 4: 20.1 / 20.3 against gemv(mma)'s 20.9 / 23.2; M = 2 20.2 against 17.4 stays).
  // A call of other features (gelu, biases, the weight on the input) runs the general kernel there.
  double expert_mlp_min_slots = 32.0;
  double expert_mlp_fp8_min_slots = 24.0;
  double expert_mlp_max_slots = 2048.0;
  bool expert_mlp_in_auto = true;
  // fp8_per_tensor on it (hidden quantized first, each unit's own intermediate scale), over the
  // same slot range. Session 54's sweep had it at 0.74-0.97x of auto (dde9273, H100; M = 64 69.2
  // against token-major's 55.3 µs); session 55's activation and epilogue (the kernel's cold code and
  // warp 0's stores, docs/perf.md "Session 55") brought it ahead. Same-run A/B against the previous
  // auto choice (548c1ac, H100, two repeats, check on; bench/results/2026-12-05-548c1ac-h100-
  // expert-mlp-auto-ab-tp8.md): qwen3-30b TP8 fp8 M = 16 / 32 / 64 / 128 / 256 1.19-1.29x (M = 16
  // 43.3 -> 34.7 µs on gemv(mma) before, M = 64 55.5 -> 44.7 on token-major before).
  bool expert_mlp_fp8_in_auto = true;
  // fp8_per_channel on its one-CTA form (hidden quantized a token row at a time, the intermediate a
  // slot row at a time, the weights' channel scales staged in shared memory; the cluster form
  // declines it), from expert_mlp_channel_min_slots to expert_mlp_max_slots. Session 64's same-run
  // A/B (s79, H100, two repeats, check on; bench/results/2026-12-06-db16506-h100-s79-channel-ab-tp8*),
  // qwen3-30b TP8, against the previous auto choice: M = 8 / 16 / 64 / 256 (64..2048 slots) 1.31 /
  // 1.61 / 1.91 / 2.10x (M = 64 79.4 -> 41.6 µs on decode before, M = 256 97.0 -> 46.3 on token-major),
  // M = 4 (32 slots) 27.9 against 28.9 and M = 1 / 2 17.7 / 19.0 against 27.1 / 29.3 stay.
  double expert_mlp_channel_min_slots = 48.0;
  bool expert_mlp_channel_in_auto = true;
  // ... and on the cluster form (N = 97..256, expert_mlp_cluster_min_n / _max_n; the ranks exchange
  // their slices' row absmaxes) from _cluster_min_slots to _cluster_max_slots, one rule for every
  // round count. Session 64's same-run A/B (s80, H100, two repeats, check on;
  // bench/results/2026-12-06-6ab2554-h100-s80-channel-cluster-ab-tp8.md), auto against expert_mlp
  // forced: qwen3-235b TP8 (N = 192) M = 8 / 16 / 32 / 64 / 128 / 256 1.16 / 1.22 / 1.38 / 1.47 / 1.52 /
  // 1.50x (M = 128 200.1 -> 131.3 µs on token-major before), M = 4 (32 slots) 1.00x, M = 1 / 2 0.49
  // / 0.71x; deepseek-v3 TP8 (N = 256, clusters of 3) M = 4..256 1.09-1.37x (M = 128 420.1 -> 306.4),
  // M = 1 / 2 0.52 / 0.82x. Past 2048 slots not measured (deepseek-v3's scales and tables stop
  // fitting in shared memory near there: expert_mlp_supported).
  double expert_mlp_channel_cluster_min_slots = 32.0;
  double expert_mlp_channel_cluster_max_slots = 2048.0;
  // The shards auto sends to it: intermediate_size from expert_mlp_auto_min_n to _max_n (N = 96:
  // one CTA a unit, measured above). The narrower shards it also runs (N = 16..80: qwen3-30b at
  // TP16) run forced by name until a same-run sweep measures them (docs/router.md).
  double expert_mlp_auto_min_n = 96.0;
  double expert_mlp_auto_max_n = 96.0;
  // The cluster form (clusters of ceil(N / 96) CTAs) in auto from expert_mlp_cluster_min_n to _max_n
  // (N = 192: qwen3-235b TP8, clusters of 2) and expert_mlp_cluster_min_slots to _max_slots local
  // slots, both schemes. Session 58's same-run sweep against the previous auto choice (H100,
  // ba47a2b, two repeats, check on; bench/results/2026-12-06-ba47a2b-h100-cluster-vs-auto-sweep-tp8.md):
  // qwen3-235b TP8 M = 24..512 (192..4096 slots) bf16 1.040-1.061x, fp8 1.023-1.058x (M = 64 bf16
  // 226.8 -> 215.5 µs); M = 20 (160 slots) bf16 0.996x, fp8 1.091x; M = 16 (128) 0.94-0.97x.
  // deepseek-v3 TP8 (N = 256, clusters of 3) stayed off: at M = 4..32 it ran 0.86-1.18x, up and
  // down with M (M = 12, 16, 18 ahead; 14, 20 behind: the units' rounds over 39 clusters of 3).
  // Session 62 (the lean gather; the same sweep as expert_mlp_min_slots): the cluster form's units
  // run in rounds over the clusters resident at once (RouterInputs::expert_mlp_clusters), and a
  // call whose units fit one round wins from few slots, one that needs two only from more:
  // qwen3-235b TP8 (66 clusters of 2 on an H100) M = 8 (64 slots, ~50 experts) bf16 94.3 against
  // gemv(mma)'s 102.8 µs, fp8 57.2 against 67.6, fp8 M = 4 41.8 against 44.7, but M = 12 (96 slots,
  // ~68 experts: two rounds) 153.1 against 132.4 and 95.1 against 88.8, M = 16 (128) ahead again
  // (159.0 / 97.9 against 169.5 / 102.4); deepseek-v3 TP8 (39 clusters of 3) fp8 M = 4 72.5
  // against 87.8, M = 16 / 32 154.8 / 209.8 against 188.3 / 220.0, bf16 M = 16 / 32 276.7 / 378.2
  // against 295.2 / 386.4, M = 64 (512 slots) behind token-major (bf16 509.6 against 498.8). So:
  // from expert_mlp_cluster_min_slots where the expected units (distinct local experts of the
  // slots under uniform routing) exceed the resident clusters, from the one-round minimum per
  // scheme where they fit; up to expert_mlp_cluster_max_slots at N <= 192 and to
  // expert_mlp_cluster_wide_max_slots past it (clusters of 3), in bf16 / fp16 to
  // expert_mlp_cluster_wide_bf16_max_slots: deepseek-v3 bf16 M = 32 (256 slots) ran 303.1 µs on it
  // in an H200 grid against token-major's 291.1 in the grid before (ed8a823; 378.2 against 386.4
  // in the H100's same-run sweep), so it stays on token-major. Session 80 (the kPlain kernels, the
  // same sweep as expert_mlp_min_slots): one round from 40 slots in bf16 / fp16 (qwen3-235b M = 5 /
  // 6 / 7: 70.0 / 81.9 / 85.6 against gemv(mma)'s 77.1 / 92.2 / 94.4 µs, deepseek-v3 M = 5 144.8
  // against 161.7; M = 4 level at both) and 24 in fp8 (deepseek-v3 M = 3 53.9 against 65.0,
  // qwen3-235b M = 3 34.1 against 35.0; M = 2 stays: qwen3-235b 32.0 against 31.2).
  double expert_mlp_cluster_min_n = 97.0;
  double expert_mlp_cluster_max_n = 256.0;
  double expert_mlp_cluster_min_slots = 128.0;
  double expert_mlp_cluster_one_round_min_slots = 40.0;
  double expert_mlp_cluster_one_round_fp8_min_slots = 24.0;
  double expert_mlp_cluster_max_slots = 4096.0;
  double expert_mlp_cluster_wide_n = 193.0;  // from here: clusters of 3 and more
  double expert_mlp_cluster_wide_max_slots = 256.0;
  double expert_mlp_cluster_wide_bf16_max_slots = 128.0;
  // Clusters of four, N = expert_mlp_quad_min_n .. _max_n (gpt-oss TP8: N = 360, biases,
  // swiglu_oai), bf16 / fp16 from expert_mlp_quad_min_slots to _max_slots (fp8_per_tensor below).
  // Session 69's same-run sweep (H100, 677e71d, check on;
  // bench/results/2026-12-06-677e71d-h100-s102-gptoss-paths*), gpt-oss TP8 bf16, expert_mlp forced
  // against auto: M = 8 / 16 / 32 / 64 / 128 (32..512 slots) 74.7 / 129.3 / 190.6 / 258.6 / 311.8
  // against 89.1 (gemv(mma)) / 143.9 / 201.3 / 278.5 / 315.1 µs (Swap-AB): 1.19 / 1.11 / 1.06 / 1.08
  // / 1.01x; M = 4 54.1 against 52.8 (gemv), M = 256 322.4 against 317.6 (Swap-AB) stay.
  double expert_mlp_quad_min_n = 289.0;
  double expert_mlp_quad_max_n = 384.0;
  double expert_mlp_quad_min_slots = 32.0;
  double expert_mlp_quad_max_slots = 512.0;
  // fp8_per_tensor on the clusters of four (since session 70 the kernel runs e4m3 at N = 360: w2
  // as row pairs), from expert_mlp_quad_fp8_min_slots to _max_slots. Session 70's same-run sweep
  // (H100, 1d6143a, check on; bench/results/2026-12-06-1d6143a-h100-s103-gptoss-fp8-paths*), gpt-oss
  // TP8 fp8_per_tensor, expert_mlp forced against auto: M = 4 / 8 / 16 / 32 / 64 (16..256 slots)
  // 42.6 / 53.8 / 90.8 / 127.2 / 164.8 against 44.4 / 68.0 (gemv(mma)) / 94.3 / 128.6 / 171.8 µs
  // (Swap-AB): 1.04 / 1.26 / 1.04 / 1.01 / 1.04x; M = 1 / 2 (38.4 / 39.2 against 21.7 / 30.8) and
  // M = 128 / 256 (202.0 / 210.3 against 197.2 / 202.9) stayed. Session 82's same-run sweep (H100,
  // 1664c34, check on; bench/results/2026-12-07-1664c34-h100-s125-gpt-oss-tp8-path-sweep.json): the
  // kernel, since its plain instantiations, ran M = 64 / 128 / 256 in 151.7 / 178.5 / 187.5 µs
  // against Swap-AB's 171.2 / 197.6 / 208.4 (1.13 / 1.11 / 1.11x), so the range reaches 1024 slots.
  double expert_mlp_quad_fp8_min_slots = 16.0;
  double expert_mlp_quad_fp8_max_slots = 1024.0;
  // The GEMV decode path (kernels/gemv/), when it can run the call (RouterInputs::gemv_ok), ahead
  // of everything else: bf16 up to gemv_max_tokens_bf16 tokens and gemv_max_slots_bf16 local
  // slots; fp8 up to gemv_max_tokens_fp8 tokens and gemv_max_slots_fp8 slots on experts of at
  // most gemv_fp8_max_expert_elems (N x K) weights per matrix (past that its e4m3 conversions on
  // the CUDA cores cost more than the stream). From the same-run sweep of gemv forced against the
  // previous auto choice (MOEKIT_GEMV=0; H200, 2026-12-01, every preset, TP 1 and 8, M = 1..64,
  // check on; bench/results/2026-12-01-7a4bad9-h200-gemv-sweep.json, docs/gemv.md): bf16 wins at every
  // M <= 4 point within 1.00x (ties: deepseek-v3 and mixtral TP8 M = 4, qwen3-235b and gpt-oss TP1
  // M = 4) up to 1.45x (qwen3-235b TP8 M = 1: 22.5 vs 32.8 µs) and loses from M = 8 (but gpt-oss
  // TP8), down to 0.44x; fp8 wins at TP8 M = 1, 2 (qwen3-30b M = 1: 15.9 vs 24.1 µs) but mixtral
  // M = 2 (0.97) and at TP1 only on qwen3-30b (N x K = 1.6 M); deepseek-v3, mixtral TP1 lose
  // (0.79-0.83), qwen3-235b TP1 ties at M = 1 and loses at 2.
  double gemv_max_tokens_bf16 = 4.0;
  double gemv_max_slots_bf16 = 32.0;
  double gemv_max_tokens_fp8 = 2.0;
  double gemv_max_slots_fp8 = 16.0;
  double gemv_fp8_max_expert_elems = 4194304.0;
  bool gemv_in_auto = true;
  // The GEMV path's tensor-core kernel (kernels/gemv/kernel_mma_sm90.cuh), when it can run the call
  // (RouterInputs::gemv_mma_ok), ahead of the rule above: on expert matrices of at most
  // gemv_mma_max_expert_elems (N x K) weights with N < gemv_mma_max_n, or any such N on at most
  // few_experts experts up to gemv_mma_few_experts_max_tokens tokens (mixtral TP8);
  // bf16 above gemv_mma_min_tokens_bf16 tokens (from it on the few experts) up to
  // gemv_mma_max_tokens, fp8 up to
  // gemv_mma_max_tokens but not at M <= gemv_mma_fp8_small_m on experts below
  // gemv_mma_tiny_elems weights (qwen3-30b TP8 M = 1: the CUDA-core kernel, 16.2-16.4 µs
  // against 17.2; at M = 2 the tensor-core kernel since session 20, 18.4 against 20.0-20.2, same-run
  // sweep at 86c683c, check on; it had lost there at df51b2f, before its e4m3 split). From the
  // same-run-comparable sweeps of the kernel forced (H200, 2026-12-01, every preset, TP 1 and 8,
  // check on; bench/results/2026-12-01-df51b2f-h200-gemv-mma-*.json, docs/gemv.md): against the
  // previous auto choice it wins 1.03-1.37x at TP8 bf16 M = 8, 16 (qwen3-30b, qwen3-235b, gpt-oss,
  // mixtral M = 4, 8; deepseek-v3 ties), fp8 M = 1..16 (deepseek-v3, qwen3-235b, mixtral M <= 8, qwen3-30b
  // from M = 2), and loses at TP1 (0.71-0.99 but qwen3-235b fp8 M = 1) and from M = 32.
  // fp8_per_channel (only this kernel runs it on the GEMV path): the shards (N < gemv_mma_max_n)
  // up to gemv_mma_max_tokens, qwen3-30b at M = 1, 2 included: forced gemv against auto's chain at
  // 0abf3fb (bench/results/2026-12-01-0abf3fb-h200-gemv-per-channel-ab*, check on) 1.10-2.16x on
  // the shards at M <= 8 and 1.00-2.16x at 16, mixtral 0.86-0.98x. Since session 39 (TP8 forced
  // sweep at 9666b2d, check on; bench/results/2026-12-04-9666b2d-h200-paths-tp8-channel.{json,md}) the wide
  // clause below bounds it too (M = 16: gpt-oss 120.0 µs against Swap-AB's 96.8, deepseek-v3 202.4
  // against 181.5) and the few-experts clause takes mixtral TP8 (gemv(mma) at M = 1 / 2 / 4 / 8
  // 37.9 / 53.9 / 69.8 / 74.4 against decode's 42.4 and Swap-AB's 57.0 / 75.9 / 79.2; at M = 16
  // 92.5 against 87.9).
  // fp8_per_tensor on shard experts of at least gemv_mma_fp8_large_elems weights (deepseek-v3
  // TP8, N x K = 1.8 M) up to gemv_mma_fp8_large_max_tokens, ahead of the wide clause below. It was
  // 4 from session 19 (token-major's ping-pong GEMM2 won M = 8, 16 then: 115.7 vs 126.5 µs, 164.1 vs
  // 177.5, bench/results/2026-12-02-a6fb45b-h200-pingpong-paths.json); since the kernel's sessions
  // 20-36 it wins again (session 37, same-run sweep, two passes, check on;
  // bench/results/2026-12-03-{49a6c3c-h200-paths-tp8,4b50020-h200-router-sweep}*): M = 5, 6, 12, 16
  // 89.9 / 94.2 / 146.9 / 158.6 µs against token-major's 91.6 / 99.4 / 164.6 / 167.3; M = 8 118.4
  // against 116.8 (1.4 % lost, kept for the simpler rule). qwen3-235b TP8 (0.8 M) keeps it: 63.6 /
  // 97.2 against token-major's 73.1 / 104.1 at M = 8 / 16 (session 19); 88.9 against 107.6 at 16
  // (session 37).
  // fp8_per_tensor on shard experts below gemv_mma_tiny_elems weights (qwen3-30b TP8, N = 96)
  // up to gemv_mma_fp8_tiny_max_tokens (past gemv_mma_max_tokens): the same session-37 sweep had
  // it at M = 20, 24, 32 47.1 / 51.6 / 57.8 µs against token-major's 54.7 / 56.7 / 58.6, and
  // behind from 40 (62.8 against 58.8; 48: 77.3 against 59.6). 32 -> 20 in session 54: sessions
  // 46-48 made the token-major chain 1.06-1.11x faster there, and a same-run sweep on an H100 (two
  // passes, check on; bench/results/2026-12-05-ce04616-h100-router-sweep-qwen30-fp8.{json,md}) has
  // gemv(mma) at M = 16 / 20 / 24 / 28 / 32 43.4 / 50.1 / 54.2 / 57.1 / 61.0 µs against
  // token-major's 49.4 / 49.9 / 50.5 / 51.6 / 54.3: level at 20, behind from 24 (1.05-1.13x).
  double gemv_mma_max_expert_elems = 8388608.0;
  std::int64_t gemv_mma_max_n = 512;
  double gemv_mma_few_experts_max_tokens = 8.0;
  // fp8_per_tensor on TP1-sized experts (N >= gemv_mma_max_n, more than few_experts experts) of at
  // most gemv_mma_tp1_fp8_max_elems weights at one token, and up to
  // gemv_mma_tp1_fp8_small_max_tokens on experts of at most gemv_mma_tp1_fp8_small_elems (qwen3-30b
  // TP1, N x K = 1.6 M). Session 39's TP1 forced sweep (9666b2d, check on; bench/results/
  // 2026-12-04-9666b2d-h200-paths-tp1.{json,md}): qwen3-235b M = 1 63.7 µs against Swap-AB's 72.1,
  // deepseek-v3 (14.7 M) M = 1 113.7 against 120.6, qwen3-30b M = 2 / 4 45.3 / 66.9 against the
  // CUDA-core kernel's 48.9 and Swap-AB's 72.9, gpt-oss M = 1 level (59.2 against 58.5); behind at
  // M = 2 on deepseek-v3 (212.1 against 203.6) and at M = 8 on qwen3-30b (101.7 against 96.9);
  // mixtral (58.7 M) M = 1 141.6 against 115.1. The A/B at 1684afd (three repeats, check on;
  // bench/results/2026-12-04-1684afd-h200-router-ab.{json,md}) had gpt-oss (8.3 M, biases) M = 1
  // behind (63.1 against Swap-AB's 59.2): experts with biases keep Swap-AB.
  double gemv_mma_tp1_fp8_max_elems = 16777216.0;
  double gemv_mma_tp1_fp8_small_elems = 2097152.0;
  double gemv_mma_tp1_fp8_small_max_tokens = 4.0;
  // fp8_per_tensor on the few experts (mixtral TP8): one token more, from session 37's two sweeps
  // (gemv(mma) at M = 9 68.2 and 67.5 µs against token-major's 70.1 and 70.8; at M = 10 78.1
  // against 74.6; bench/results/2026-12-03-4b50020-h200-router-sweep-mixtral-*,
  // 2026-12-04-0d13d58-h200-router-sweep-fp8-*).
  double gemv_mma_few_experts_max_tokens_fp8 = 9.0;
  // fp8_per_tensor on the few experts' shards (N < few_experts_shard_max_n: mixtral TP8): gemv(mma)
  // up to this many tokens, then Swap-AB's plain kernels (at most 16 rows, 1664c34) while the slots
  // fit early_swapab_max_slots_few_experts_shard_fp8, then gemv(mma) again up to
  // gemv_mma_few_experts_max_tokens_fp8 (M = 9, 18 slots: the general Swap-AB kernel and token-major
  // were behind it there, session 37). Session 83's same-run sweep on an H100 at 7ce5bf7 (Swap-AB
  // forced beside auto, check on; bench/results/2026-12-08-7ce5bf7-h100-s128-sweep-swapab-plain.*):
  // Swap-AB at M = 2 / 4 / 8 44.4 / 61.0 / 69.8 µs against gemv(mma)'s 49.8 / 66.8 / 79.3
  // (1.09-1.14x); M = 1 stays on gemv(mma) (34.7 against 36.2). fp8_per_channel keeps gemv(mma).
  double gemv_mma_few_experts_max_tokens_per_tensor_shard = 1.0;
  double gemv_mma_min_tokens_bf16 = 4.0;
  double gemv_mma_max_tokens = 16.0;
  double gemv_mma_fp8_small_m = 1.0;
  double gemv_mma_tiny_elems = 524288.0;
  double gemv_mma_fp8_large_elems = 1572864.0;
  double gemv_mma_fp8_large_max_tokens = 16.0;
  double gemv_mma_fp8_tiny_max_tokens = 20.0;
  // bf16 on the same smallest shard experts (qwen3-30b TP8) up to gemv_mma_bf16_tiny_max_tokens,
  // ahead of decode: session 37's bf16 sweep (two passes, check on;
  // bench/results/2026-12-04-7a04552-h200-router-sweep-bf16-*) had it at M = 17, 20 47.0 / 52.1 µs
  // against decode's 50.4 / 54.5 and level at 24 (58.1 against 57.4).
  double gemv_mma_bf16_tiny_max_tokens = 20.0;
  // fp8_per_tensor on shard experts from gemv_mma_tiny_elems to gemv_mma_wide_elems weights
  // (qwen3-235b TP8, N x K = 0.8 M) up to gemv_mma_fp8_mid_max_tokens: session 37's last sweep (one
  // pass, check on; bench/results/2026-12-04-0d13d58-h200-router-sweep-fp8-*) had it at M = 17 / 18
  // / 20 95.2 / 104.4 / 107.5 µs against token-major's 106.0 / 109.1 / 110.4; at M = 32 it loses
  // (140.4 against 119.5, the 49a6c3c sweep).
  double gemv_mma_fp8_mid_max_tokens = 20.0;
  // Shard experts of at least gemv_mma_wide_elems weights (gpt-oss TP8, N x K = 1.04 M; deepseek-v3
  // TP8, 1.8 M), both schemes: only up to gemv_mma_wide_max_tokens. Session 26's sweep (above,
  // mid_n_*): at gpt-oss TP8 M = 16 Swap-AB took 92.1 us against gemv(mma)'s 108.0 (fp8) and 124.4
  // against 132.1 (bf16); at M = 8 they tie (65.6 / 64.8 fp8) or gemv(mma) wins (84.4 / 77.2 bf16).
  // deepseek-v3 bf16 at M = 16 already runs decode (gemv(mma) cannot hold its 16 token rows).
  double gemv_mma_wide_elems = 1.0e6;
  double gemv_mma_wide_max_tokens = 8.0;
  bool gemv_mma_in_auto = true;
};
inline constexpr RouterTable kRouterTable{};

/// The GEMV path's kernels: the CUDA-core one and the tensor-core one.
enum class GemvKernel { kCuda, kMma };

/// What the caller learned from the kernels for this call (can_implement of Swap-AB per GEMM).
struct RouterInputs {
  int sm_count = 132;
  const char* forced = nullptr;     ///< Options::path / MOEKIT_PATH; null or "" = "auto"
  bool swapab_ok[2] = {true, true}; ///< GEMM1, GEMM2
  std::string swapab_why[2];        ///< the reason when not ok
  bool tokmajor_ok[2] = {false, false};  ///< the token-major wgmma path can run GEMM1, GEMM2
  std::string tokmajor_why[2];
  bool fused_ok = false;            ///< a single-launch fused path can run this call
  /// Why not ("": the path is not built in this version of moekit, which a forced path's error
  /// then says; empty by default so that an eager call allocates no text it never reads).
  std::string fused_why;
  bool decode_ok = false;           ///< the single-launch decode path can run this call
  bool decode_in_auto = true;       ///< auto may pick it (MOEKIT_DECODE=0 turns that off: A/Bs)
  std::string decode_why;           ///< why not ("": not built in this version, as fused_why)
  bool expert_mlp_ok = false;       ///< the per-expert MLP kernel can run this call
  bool expert_mlp_in_auto = true;   ///< auto may pick it (MOEKIT_EXPERT_MLP=0 turns that off: A/Bs)
  /// The cluster form's clusters of ceil(N / 96) CTAs resident together on this device (its units
  /// at once); 0: unknown or the one-CTA form (the cluster form's one-round band is then off).
  int expert_mlp_clusters = 0;
  std::string expert_mlp_why;       ///< why not ("": not built in this version, as fused_why)
  bool gemv_cuda_ok = false;        ///< the GEMV decode path's CUDA-core kernel can run this call
  bool gemv_mma_ok = false;         ///< the GEMV decode path's tensor-core kernel can run this call
  bool gemv_ok() const { return gemv_cuda_ok || gemv_mma_ok; }  ///< the GEMV path can run it
  bool gemv_in_auto = true;         ///< auto may pick it (MOEKIT_GEMV=0 turns that off: A/Bs)
  std::string gemv_why;             ///< why neither kernel can ("": not built in this version)
  bool gemv_mma_in_auto = true;     ///< auto may pick it (MOEKIT_GEMV_MMA=0 turns that off: A/Bs)
  /// MOEKIT_GEMV_KERNEL (gemv_kernel_override): a GEMV plan takes this kernel where it can run
  /// (none: the router's choice).
  std::optional<GemvKernel> gemv_kernel;
  /// MOEKIT_SWAPAB_SPLIT (swapab_split_override): every Swap-AB GEMM of the plan takes this cluster
  /// split (1, 2, 4 or 8) instead of choose_swapab_split's (none: the router's choice). For sweeps.
  std::optional<int> swapab_split;
  /// MOEKIT_GEMM2_PATH (gemm2_impl_override): GEMM2 of an automatic GEMM plan takes this kernel
  /// where it can run it (none: the router's choice). For A/Bs of mixed plans.
  std::optional<GemmImpl> gemm2_impl;
  /// Fill DispatchPlan::reason for an automatic choice (a forced one says "forced" either way).
  /// run_moe turns it off unless MOEKIT_LOG_DISPATCH prints it: the string costs host time per
  /// eager call and nothing else reads it. The choice itself does not depend on it.
  bool want_reason = true;
};

struct GemmChoice {
  GemmImpl impl = GemmImpl::kMma;
  int split_k = 0;  ///< Swap-AB: the cluster split passed to the launcher (1, 2, 4, 8); 0 for mma
};

/// The router's answer for one call.
struct DispatchPlan {
  std::string requested = "auto";  ///< the path name asked for ("auto" when none)
  bool fused = false;              ///< run the single-launch fused path (gemm[] unused then)
  bool decode = false;             ///< run the single-launch decode path (gemm[] unused then)
  bool gemv = false;               ///< run the GEMV decode path (gemm[] unused then)
  bool expert_mlp = false;         ///< run the per-expert MLP kernel, then the combine (gemm[] unused)
  GemvKernel gemv_kernel = GemvKernel::kCuda;  ///< ... with this kernel
  GemmChoice gemm[2];              ///< GEMM1, GEMM2
  std::string reason;              ///< why, in one line
  // Numbers the decision was made from (also printed).
  double local_slots = 0;          ///< expected slots routed to local experts
  double touched = 0;              ///< expected local experts with at least one slot
  double tokens_per_expert = 0;    ///< local_slots / touched

  /// The GEMV path on the tensor-core kernel.
  bool gemv_mma() const { return gemv && gemv_kernel == GemvKernel::kMma; }
  /// "gemm1=swapab(split_k=8) gemm2=mma", "fused", "decode", "gemv", "gemv(mma)" or "expert_mlp"
  /// (split_k shown when above 1).
  std::string describe() const;
  /// The MOEKIT_LOG_DISPATCH line (no trailing newline): problem, request, choice, reason.
  std::string log_line(const MoeProblem& problem) const;
};

/// Choose the paths of one call. Deterministic: a pure function of its arguments.
/// Throws Error(kInvalidArgument) for an unknown forced name (listing kPathNames) and
/// Error(kNotSupported) when a forced path cannot run the problem (never a silent fallback).
DispatchPlan choose_paths(const MoeProblem& problem, const RouterInputs& in);
/// The same with bare answers (the CPU tests' form).
DispatchPlan choose_paths(const MoeProblem& problem, int sm_count, const char* forced, bool swapab_ok1,
                          bool swapab_ok2);

/// Swap-AB split-K of one GEMM of `problem` (gemm = 1 or 2) on `sm_count` SMs.
int swapab_split_k(const MoeProblem& problem, int gemm, int sm_count);
/// Swap-AB work items of one GEMM (the same count as the launcher's max_items in
/// src/cuda/kernels/swapab/launch_sm90.cu, so the router predicts its grid): groups of `tiles_per_item` 64-row weight tiles over n_out, times the 64-token chunks
/// the experts' rows (at most `rows` in all) can form: min(E, rows) + rows / 64.
std::int64_t swapab_max_items(std::int64_t n_out, std::int64_t num_experts, std::int64_t rows, int tiles_per_item = 1);
/// The split rule itself (RouterTable), from the GEMM's work items (64-row tiles x expert
/// chunks) and K stages (128 bytes each); the plan's GemmChoice::split_k carries it to the
/// Swap-AB launcher, which takes it as given.
int choose_swapab_split(std::int64_t items, int sm_count, std::int64_t k_stages);

/// MOEKIT_DECODE is not "0" (read at every call): auto may pick the single-launch decode path.
/// Forcing it by name works either way.
bool decode_in_auto_enabled() noexcept;
/// MOEKIT_EXPERT_MLP: auto may take the per-expert MLP kernel unless it is "0".
bool expert_mlp_in_auto_enabled() noexcept;

/// MOEKIT_GEMV is not "0" (read at every call): auto may pick the GEMV decode path. Forcing it by
/// name works either way.
bool gemv_in_auto_enabled() noexcept;
/// False when MOEKIT_GEMV_MMA=0: auto then never takes the GEMV path's tensor-core kernel (A/Bs).
bool gemv_mma_in_auto_enabled() noexcept;
/// MOEKIT_GEMV_KERNEL (read at every call; A/Bs and tests): unset or "" none (the router's choice),
/// "cuda", "mma" or "ring" (the tensor-core kernel's ring variant, which auto never takes) that
/// kernel wherever it can run. Throws Error(kInvalidArgument) for any other value.
std::optional<GemvKernel> gemv_kernel_override();
/// MOEKIT_GEMM2_PATH (read at every call; A/Bs of a mixed plan): unset or "" none; "mma",
/// "swapab" or "tokmajor" moves GEMM2 of an automatic GEMM plan (not decode, GEMV, fused or a
/// forced path) to that kernel where it can run it (RouterInputs::gemm2_impl).
/// Error(kInvalidArgument) otherwise.
std::optional<GemmImpl> gemm2_impl_override();
/// MOEKIT_SWAPAB_SPLIT: unset or empty -> none; "1", "2", "4", "8" -> that Swap-AB cluster split;
/// anything else -> Error(kInvalidArgument). Read at every call (RouterInputs::swapab_split).
std::optional<int> swapab_split_override();

/// Whether a call that asks for `forced` (null / "" / "auto", or a path name) can end on one of
/// the two decode paths: auto, "decode" or "gemv". The CUDA backend plans such a call from the
/// decode and GEMV answers alone first (plan_call). Throws, as choose_paths does, for an unknown
/// name.
bool may_take_decode(const char* forced);

/// MOEKIT_LOG_DISPATCH is set to something other than "" or "0" (read at every call).
bool log_dispatch_enabled() noexcept;

}  // namespace moekit::detail

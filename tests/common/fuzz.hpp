// The CPU half of the GPU fuzz test (tests/cuda/test_fuzz.cpp): seeded random small MoE problems
// over every option the API takes, and their full printout. Problem i of a run depends only on
// (seed, i), so a failure reproduces with MOEKIT_FUZZ_SEED=<seed> and its index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/moe_case.hpp"

namespace moekit::testing {

/// The fuzz run's seed: MOEKIT_FUZZ_SEED (decimal or 0x hex), else kDefaultFuzzSeed.
inline constexpr std::uint64_t kDefaultFuzzSeed = 20261201;
std::uint64_t fuzz_seed_from_env();
/// Problems per run: MOEKIT_FUZZ_COUNT, else `fallback`. Throws std::invalid_argument on garbage.
int fuzz_count_from_env(int fallback);
/// The first problem index of a run: MOEKIT_FUZZ_FIRST, else 0 (to rerun one failing problem).
int fuzz_first_from_env();
/// Problems per run by default: a GPU run of them takes well under a minute on an H200.
inline constexpr int kDefaultFuzzCount = 300;

/// The kernel paths a CUDA call can be forced onto (Options::path); "auto" must run every problem.
const std::vector<std::string>& fuzz_paths();

/// One drawn problem: the case (shapes, scheme, routing, options) and how it is called.
struct FuzzProblem {
  std::uint64_t run_seed = 0;
  int index = 0;
  CaseSpec spec;
  bool fused_moe = false;  ///< routed from the logits in the call (fused_moe); else fused_experts
  /// Weights of a fp8 problem stored with K or N that the fast paths cannot take as rows (odd sizes):
  /// the call may then be declined (kNotSupported) by every path, auto included; see may_decline_all.
  bool odd_sizes = false;
  /// Multiply-adds of the CPU reference, M * k * 3 * K * N (the draw keeps it small).
  std::int64_t reference_macs() const;
  /// True when even "auto" may refuse it with kNotSupported: rows that are not a multiple of 4
  /// bytes or odd K / N (the mma path's documented limits, docs/router.md).
  bool may_decline_all() const;
};

/// Problem `index` of the run seeded `run_seed`. Always a valid call (moekit::describe accepts it).
FuzzProblem draw_fuzz_problem(std::uint64_t run_seed, int index);

/// Every field of the problem on one line, then the command that reruns it.
std::string describe_fuzz_problem(const FuzzProblem& p);

}  // namespace moekit::testing

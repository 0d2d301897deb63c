// Seeded fuzz test of the CUDA backend against the CPU reference (label gpu): a few hundred random
// small problems per run (tests/common/fuzz.hpp draws them: E incl. odd, k incl. k = E, K and N
// off the tiles, M on and past tile edges, every scheme, routing, activation, biases, expert_map
// with -1, apply_router_weight_on_input, static scales, fp16), each run on every path name
// (auto, mma, swapab, tokmajor, fused, decode, gemv; a forced path may decline with kNotSupported, auto
// only the odd sizes docs/router.md lists) and compared row by row (tests/common/compare.hpp). A
// failure prints the seed, the whole problem and the command that reruns it alone.
//   MOEKIT_FUZZ_SEED   run seed (default kDefaultFuzzSeed)
//   MOEKIT_FUZZ_COUNT  problems (default kDefaultFuzzCount = 300)
//   MOEKIT_FUZZ_FIRST  index of the first problem (default 0)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/compare.hpp"
#include "common/cuda_test.hpp"
#include "common/device_case.hpp"
#include "common/fuzz.hpp"
#include "common/moe_case.hpp"
#include "common/tolerance.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

// Runs problem `p` on every path; returns the number of failures (each reported with the problem).
int run_problem(const FuzzProblem& p, std::map<std::string, int>& ran, std::map<std::string, int>& declined) {
  const std::string where = describe_fuzz_problem(p);
  const CaseSpec& s = p.spec;
  const CallMode mode = p.fused_moe ? CallMode::kFusedMoe : CallMode::kFusedExperts;
  int failures = 0;
  MoeCase c = make_case(s);
  std::vector<float> ref;
  if (s.M > 0) ref = reference_output(c);
  DeviceCase d(c);
  for (const std::string& path : fuzz_paths()) {
    std::vector<std::int32_t> ids;
    std::vector<float> wts;
    std::vector<std::uint16_t> bits;
    try {
      bits = d.run(s.M, mode, path, nullptr, mode == CallMode::kFusedMoe ? &ids : nullptr,
                   mode == CallMode::kFusedMoe ? &wts : nullptr);
    } catch (const Error& e) {
      const bool may_decline = path != "auto" || p.may_decline_all();
      if (e.status() == Status::kNotSupported && may_decline) {
        ++declined[path];
        continue;
      }
      ADD_FAILURE() << "path " << path << " threw " << status_name(e.status()) << ": " << e.what() << "\n" << where;
      ++failures;
      continue;
    }
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      // A device fault poisons the context: every later call would fail too. Stop the run here.
      ADD_FAILURE() << "path " << path << ": a kernel failed on the device: " << cudaGetErrorString(err) << "\n" << where;
      return failures + 1000;
    }
    ++ran[path];
    if (s.M == 0) continue;
    if (mode == CallMode::kFusedMoe && ids != c.topk_ids) {
      ADD_FAILURE() << "path " << path << ": GPU routing chose other experts than the CPU\n" << where;
      ++failures;
      continue;
    }
    const ::testing::AssertionResult ok =
        rows_match(to_float(bits, s.act_dtype), ref, s.K, s.scheme, "path " + path);
    if (!ok) {
      ADD_FAILURE() << ok.message() << "\n" << where;
      ++failures;
    }
  }
  return failures;
}

TEST(Sm90Fuzz, RandomProblemsMatchReference) {
  SKIP_WITHOUT_SM90();
  const std::uint64_t seed = fuzz_seed_from_env();
  const int first = fuzz_first_from_env();
  const int count = fuzz_count_from_env(kDefaultFuzzCount);
  std::cout << "[ FUZZ     ] MOEKIT_FUZZ_SEED=" << seed << " MOEKIT_FUZZ_FIRST=" << first
            << " MOEKIT_FUZZ_COUNT=" << count << "\n";
  RecordProperty("fuzz_seed", std::to_string(seed));
  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, int> ran, declined;
  int failed_problems = 0;
  for (int i = first; i < first + count; ++i) {
    const FuzzProblem p = draw_fuzz_problem(seed, i);
    const int f = run_problem(p, ran, declined);
    failed_problems += f > 0;
    if (f >= 1000 || failed_problems >= 10) {
      ADD_FAILURE() << "stopping after problem " << i << " (" << failed_problems << " failing problems)";
      break;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ FUZZ     ] seed " << seed << ": " << count << " problems in " << secs << " s; ran / declined per path:";
  for (const std::string& path : fuzz_paths()) std::cout << " " << path << " " << ran[path] << "/" << declined[path];
  std::cout << "\n";
  EXPECT_EQ(failed_problems, 0) << "seed " << seed;
  // Every path ran some problems (a path that declines everything would be tested by nothing).
  if (count >= 100)
    for (const std::string& path : fuzz_paths()) EXPECT_GT(ran[path], 0) << "path " << path << " ran no problem";
}

}  // namespace
}  // namespace moekit::testing

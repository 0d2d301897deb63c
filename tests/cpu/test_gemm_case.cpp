// The GEMM harness's host side (tests/common/gemm_case.hpp), which every grouped-GEMM GPU test
// trusts: the one-entry cache hands back the data it drew for the same case and draws again for
// any field the data depends on; what it hands back equals a fresh draw; the reference of a small
// GEMM2 equals an independent loop over the uploaded bytes, and its owned rows are the routed slots.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/gemm_case.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

GemmCase small_gemm2() {
  GemmCase c;
  c.epilogue = GemmEpilogue::kBiasWeightScatter;
  c.rows = {2, 0, 3, 1};
  c.N = 40;
  c.K = 24;
  c.top_k = 2;
  c.seed = 7;
  return c;
}

bool same_data(const GemmHostData& a, const GemmHostData& b) {
  return a.P == b.P && a.M == b.M && a.S == b.S && a.max_rows == b.max_rows && a.out_rows == b.out_rows &&
         a.offsets == b.offsets && a.sorted_slots == b.sorted_slots && a.a_bytes == b.a_bytes &&
         a.b_bytes == b.b_bytes && a.bias_bytes == b.bias_bytes && a.a_scale == b.a_scale && a.b_scale == b.b_scale &&
         a.owned == b.owned && a.ref.size() == b.ref.size() &&
         std::memcmp(a.ref.data(), b.ref.data(), a.ref.size() * sizeof(double)) == 0 &&
         a.topk_weights.size() == b.topk_weights.size() &&
         std::memcmp(a.topk_weights.data(), b.topk_weights.data(), a.topk_weights.size() * 4) == 0 &&
         a.sorted_weights.size() == b.sorted_weights.size() &&  // NaN past the routed rows: bytes, not ==
         std::memcmp(a.sorted_weights.data(), b.sorted_weights.data(), a.sorted_weights.size() * 4) == 0;
}

TEST(GemmHarness, CacheReusesTheSameCaseOnly) {
  GemmCase c = small_gemm2();
  const auto first = cached_gemm_host_data(c);
  // The launch's options are not part of the data: the same entry.
  c.out_dtype = DType::kFp32;
  c.graph_replay = true;
  c.weights = 2;
  EXPECT_EQ(cached_gemm_host_data(c).get(), first.get());
  EXPECT_TRUE(same_data(*first, *make_gemm_host_data(c))) << "the reused entry differs from a fresh draw";
  // Every field the data depends on draws again.
  auto differs = [&](GemmCase d, const char* what) {
    const auto got = cached_gemm_host_data(d);
    EXPECT_NE(got.get(), first.get()) << what;
    EXPECT_TRUE(same_data(*got, *make_gemm_host_data(d))) << what;
    (void)cached_gemm_host_data(c);  // back to c's data for the next field
  };
  GemmCase d = c;
  d.seed = 8;
  differs(d, "seed");
  d = c;
  d.rows = {2, 0, 3, 2};
  differs(d, "rows");
  d = c;
  d.bias = true;
  differs(d, "bias");
  d = c;
  d.scheme = Scheme::kFp8PerTensor;
  differs(d, "scheme");
  d = c;
  d.K = 32;
  differs(d, "K");
  d = c;
  d.extra_rows = 5;
  differs(d, "extra_rows");
  // The reused entry of c is still c's (the test above drew others in between).
  EXPECT_TRUE(same_data(*cached_gemm_host_data(c), *make_gemm_host_data(c)));
}

TEST(GemmHarness, Gemm2ReferenceFromTheUploadedBytes) {
  // bf16 GEMM2: out[slot, n] = (sum_j a[r, j] * w2[e, n, j]) * topk_weight[slot] for the routed row r
  // of expert e; the reference must be exactly this loop over the bytes the kernel gets.
  const GemmCase c = small_gemm2();
  const auto hp = make_gemm_host_data(c);
  const GemmHostData& h = *hp;
  ASSERT_EQ(h.P, 6);
  ASSERT_EQ(h.M, 6 / 2 + 2);
  ASSERT_EQ(h.S, h.M * 2);
  ASSERT_EQ(h.out_rows, h.S);
  ASSERT_EQ(h.a_bytes.size(), static_cast<std::size_t>(h.max_rows * c.N * 2));
  ASSERT_EQ(h.b_bytes.size(), static_cast<std::size_t>(4 * c.K * c.N * 2));
  auto bf16_at = [](const std::vector<std::uint8_t>& bytes, std::size_t i) {
    std::uint16_t b;
    std::memcpy(&b, &bytes[i * 2], 2);
    return bf16_to_float(b);
  };
  std::vector<char> want_owned(static_cast<std::size_t>(h.S), 0);
  for (int e = 0; e < 4; ++e)
    for (int r = h.offsets[e]; r < h.offsets[e + 1]; ++r) {
      const int slot = h.sorted_slots[r];
      want_owned[slot] = 1;
      for (std::int64_t n = 0; n < c.K; ++n) {
        double s = 0;
        for (std::int64_t j = 0; j < c.N; ++j)
          s += static_cast<double>(bf16_at(h.a_bytes, r * c.N + j)) * bf16_at(h.b_bytes, (e * c.K + n) * c.N + j);
        s *= h.topk_weights[slot];
        EXPECT_EQ(h.ref[slot * c.K + n], s) << "slot " << slot << " column " << n;
      }
    }
  EXPECT_EQ(h.owned, want_owned);
  // Slots ascending within each expert, every routed slot once.
  for (int e = 0; e < 4; ++e)
    for (int r = h.offsets[e] + 1; r < h.offsets[e + 1]; ++r) EXPECT_LT(h.sorted_slots[r - 1], h.sorted_slots[r]);
}

}  // namespace
}  // namespace moekit::testing

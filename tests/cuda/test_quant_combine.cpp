// GPU unit tests of the activation quantization kernels (launch_quant_sm90) and the weighted
// combine (launch_combine_sm90) against CPU computations of their documented formulas, bit for
// bit: every scheme and input dtype, odd and vector-unfriendly sizes, misaligned pointers (the
// scalar paths), a device row count below the host bound, NaN-poisoned outputs (every owned
// element written, nothing else), NaN inputs that stay in their row. Skipped without sm_90.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/cuda_test.hpp"
#include "common/kernel_api.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

std::uint64_t lcg(std::uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return s >> 17;
}
float normal_ish(std::uint64_t& s) {  // sum of 4 uniforms, centred: enough spread for absmax
  float t = 0;
  for (int i = 0; i < 4; ++i) t += static_cast<float>(lcg(s) % 65536) / 65536.0f;
  return (t - 2.0f) * 1.7f;
}

std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// ---- quantization ----------------------------------------------------------------------------

struct QuantCase {
  Scheme scheme = Scheme::kFp8PerTensor;
  DType x_dtype = DType::kBf16;
  std::int64_t rows = 33, cols = 128;
  std::int64_t live = -1;     // rows_dev value (-1: no device count)
  bool static_scale = false;  // kFp8PerTensor
  bool misalign = false;      // x one element past an aligned address: the scalar path
  std::int64_t nan_row = -1;  // a row holding NaN at two columns
  std::uint64_t seed = 1;
  std::string name() const {
    std::ostringstream o;
    o << scheme_name(scheme) << " x=" << dtype_name(x_dtype) << " rows=" << rows << " cols=" << cols
      << " live=" << live << " static=" << static_scale << " misalign=" << misalign << " nan_row=" << nan_row;
    return o.str();
  }
};

void check_quant(const QuantCase& c) {
  SCOPED_TRACE(c.name());
  const std::int64_t n = c.rows * c.cols;
  const std::int64_t live = c.live < 0 ? c.rows : std::min(c.live, c.rows);
  const std::size_t es = dtype_size(c.x_dtype);
  std::uint64_t st = c.seed;
  // Host x (raw bits, one spare element in front for the misaligned case) and its values.
  std::vector<std::uint8_t> xraw(static_cast<std::size_t>(n + 1) * es);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    float v = normal_ish(st) * (1.0f + static_cast<float>((i / c.cols) % 5));  // rows of different ranges
    if (i / c.cols == c.nan_row && (i % c.cols == 1 || i % c.cols == c.cols - 1)) v = std::nanf("");
    std::uint8_t* dst = xraw.data() + static_cast<std::size_t>(i + (c.misalign ? 1 : 0)) * es;
    if (c.x_dtype == DType::kFp32) {
      std::memcpy(dst, &v, 4);
    } else {
      const std::uint16_t b = c.x_dtype == DType::kFp16 ? float_to_fp16(v) : float_to_bf16(v);
      std::memcpy(dst, &b, 2);
      v = c.x_dtype == DType::kFp16 ? fp16_to_float(b) : bf16_to_float(b);
    }
    x[static_cast<std::size_t>(i)] = v;
  }

  // Expected, by the documented rule: absmax ignores NaN (fmax from 0), scale = max(absmax / 448,
  // kMinDynamicScale), q = e4m3(x * (1 / scale)).
  const std::int64_t groups = (c.cols + kBlockQuant - 1) / kBlockQuant;
  std::vector<float> want_scale;
  const float kStatic = 3.0f / 448.0f;
  auto dyn = [](float amax) { return std::fmax(amax / kFp8Max, kMinDynamicScale); };
  auto amax_of = [&](std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
    float a = 0.f;
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t j = c0; j < std::min(c1, c.cols); ++j) a = std::fmax(a, std::fabs(x[r * c.cols + j]));
    return a;
  };
  std::int64_t scale_len = 1;
  if (c.scheme == Scheme::kFp8PerTensor) {
    want_scale = {c.static_scale ? kStatic : dyn(amax_of(0, live, 0, c.cols))};
  } else if (c.scheme == Scheme::kFp8PerChannel) {
    scale_len = c.rows;
    want_scale.assign(static_cast<std::size_t>(c.rows), std::nanf(""));
    for (std::int64_t r = 0; r < live; ++r) want_scale[r] = dyn(amax_of(r, r + 1, 0, c.cols));
  } else {
    scale_len = c.rows * groups;
    want_scale.assign(static_cast<std::size_t>(scale_len), std::nanf(""));
    for (std::int64_t r = 0; r < live; ++r)
      for (std::int64_t g = 0; g < groups; ++g)
        want_scale[r * groups + g] = dyn(amax_of(r, r + 1, g * kBlockQuant, (g + 1) * kBlockQuant));
  }
  std::vector<std::uint8_t> want_q(static_cast<std::size_t>(n), 0x5a);  // poison where not owned
  for (std::int64_t r = 0; r < live; ++r)
    for (std::int64_t j = 0; j < c.cols; ++j) {
      float s = want_scale[0];
      if (c.scheme == Scheme::kFp8PerChannel) s = want_scale[r];
      if (c.scheme == Scheme::kFp8Block128) s = want_scale[r * groups + j / kBlockQuant];
      const float inv = 1.0f / s;
      want_q[r * c.cols + j] = float_to_e4m3(x[r * c.cols + j] * inv);
    }

  // Device: q poisoned with 0x5a, scales with NaN, the absmax word zeroed.
  DeviceArena arena;
  std::uint8_t* dx = static_cast<std::uint8_t*>(arena.alloc(xraw.size()));
  CUDA_OK(cudaMemcpy(dx, xraw.data(), xraw.size(), cudaMemcpyHostToDevice));
  auto* dq = static_cast<std::uint8_t*>(arena.alloc(static_cast<std::size_t>(n)));
  CUDA_OK(cudaMemset(dq, 0x5a, static_cast<std::size_t>(n)));
  auto* dscale = arena.upload(std::vector<float>(static_cast<std::size_t>(scale_len), std::nanf("")));
  auto* dabs = arena.upload(std::vector<std::uint32_t>(1, 0u));
  auto* dstatic = arena.upload(std::vector<float>(1, kStatic));
  auto* dlive = arena.upload(std::vector<std::int32_t>(1, static_cast<std::int32_t>(live)));
  cuda::QuantParams p;
  p.scheme = c.scheme;
  p.x = dx + (c.misalign ? es : 0);
  p.x_dtype = c.x_dtype;
  p.rows = c.rows;
  p.rows_dev = c.live < 0 ? nullptr : dlive;
  p.cols = c.cols;
  p.static_scale = c.static_scale ? dstatic : nullptr;
  p.absmax = dabs;
  p.q = dq;
  p.scale = dscale;
  cuda::launch_quant_sm90(p, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<std::uint8_t> got_q = download<std::uint8_t>(dq, static_cast<std::size_t>(n));
  const std::vector<float> got_scale = download<float>(dscale, static_cast<std::size_t>(scale_len));

  int bad = 0;
  for (std::int64_t i = 0; i < scale_len; ++i) {
    const bool same = std::isnan(want_scale[i]) ? std::isnan(got_scale[i]) : float_bits(want_scale[i]) == float_bits(got_scale[i]);
    if (!same && bad++ < 5) ADD_FAILURE() << "scale[" << i << "] = " << got_scale[i] << ", expected " << want_scale[i];
  }
  for (std::int64_t i = 0; i < n; ++i)
    if (got_q[i] != want_q[i] && bad++ < 10)
      ADD_FAILURE() << "q[" << i / c.cols << ", " << i % c.cols << "] = 0x" << std::hex << int(got_q[i]) << ", expected 0x"
                    << int(want_q[i]) << std::dec << " (x = " << x[i] << (i / c.cols >= live ? ", row not live" : "")
                    << ")";
  EXPECT_EQ(bad, 0);
  // NaN stays in its row: only its two NaN elements quantize to NaN (0x7f / 0xff), the rest of the
  // row and every other row are finite.
  if (c.nan_row >= 0 && c.nan_row < live) {
    for (std::int64_t i = 0; i < live * c.cols; ++i) {
      const bool is_nan_input = std::isnan(x[i]);
      EXPECT_EQ((got_q[i] & 0x7f) == 0x7f, is_nan_input) << "element [" << i / c.cols << ", " << i % c.cols << "]";
    }
  }
}

TEST(Sm90Quant, PerTensorMatchesCpuBitwise) {
  SKIP_WITHOUT_SM90();
  for (DType dt : {DType::kBf16, DType::kFp16, DType::kFp32}) {
    QuantCase c;
    c.x_dtype = dt;
    check_quant(c);                      // dynamic, one CTA
    c.rows = 300, c.cols = 200;          // 60 K elements: absmax pass + quantize pass
    check_quant(c);
    c.static_scale = true;
    check_quant(c);
    c.static_scale = false;
    c.cols = 7;                          // odd columns: the scalar path
    c.rows = 5;
    check_quant(c);
    c.rows = 257, c.cols = 136;
    c.misalign = true;
    check_quant(c);
  }
}

TEST(Sm90Quant, PerRowMatchesCpuBitwise) {
  SKIP_WITHOUT_SM90();
  for (DType dt : {DType::kBf16, DType::kFp16, DType::kFp32}) {
    QuantCase c;
    c.scheme = Scheme::kFp8PerChannel;
    c.x_dtype = dt;
    for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 4}, {33, 128}, {9, 130}, {65, 2048}, {3, 7}}) {
      c.rows = rows;
      c.cols = cols;
      check_quant(c);
    }
    c.misalign = true;
    c.rows = 17;
    c.cols = 264;
    check_quant(c);
  }
}

TEST(Sm90Quant, Block128MatchesCpuBitwise) {
  SKIP_WITHOUT_SM90();
  for (DType dt : {DType::kBf16, DType::kFp16, DType::kFp32}) {
    QuantCase c;
    c.scheme = Scheme::kFp8Block128;
    c.x_dtype = dt;
    // Groups: exactly one, a partial last one (200 = 128 + 72, 2880 = 22.5 groups), odd widths.
    for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 128}, {33, 200}, {5, 2880}, {7, 7}, {3, 130}}) {
      c.rows = rows;
      c.cols = cols;
      check_quant(c);
    }
    c.misalign = true;
    c.rows = 9;
    c.cols = 392;
    check_quant(c);
  }
}

// The intermediate's live row count is on the device: rows past it are neither read nor written
// (their q keeps the poison, their scales stay NaN), and per tensor their values do not enter absmax.
TEST(Sm90Quant, DeviceRowCountBoundsTheWork) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128}) {
    QuantCase c;
    c.scheme = scheme;
    c.x_dtype = DType::kFp32;
    c.rows = 40;
    c.cols = 256;
    for (std::int64_t live : {0, 1, 17, 40}) {
      c.live = live;
      check_quant(c);
    }
    c.rows = 400;  // per tensor: the two-pass path
    c.live = 333;
    check_quant(c);
  }
}

TEST(Sm90Quant, NanRowStaysInItsRow) {
  SKIP_WITHOUT_SM90();
  for (Scheme scheme : {Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128}) {
    for (DType dt : {DType::kBf16, DType::kFp32}) {
      QuantCase c;
      c.scheme = scheme;
      c.x_dtype = dt;
      c.rows = 9;
      c.cols = 200;
      c.nan_row = 4;
      check_quant(c);
      c.rows = 300;  // per tensor: two passes
      c.nan_row = 250;
      check_quant(c);
    }
  }
}

// ---- combine ---------------------------------------------------------------------------------

struct CombineCase {
  std::int64_t M = 7, K = 256;
  int k = 2, E = 8;
  bool expert_map = false;      // E_global = 2E, odd global ids remote (-1)
  bool invalid_ids = false;     // some ids out of [0, E_global): they contribute nothing
  bool all_remote = false;      // every slot remote: zeros
  DType y_dtype = DType::kFp32;
  DType out_dtype = DType::kBf16;
  bool misalign_out = false;    // out one element past an aligned address: the scalar path
  std::int64_t nan_token = -1;  // a NaN in one local slot's y row of this token
  std::uint64_t seed = 3;
  std::string name() const {
    std::ostringstream o;
    o << "M=" << M << " K=" << K << " k=" << k << " E=" << E << " map=" << expert_map << " invalid=" << invalid_ids
      << " all_remote=" << all_remote << " y=" << dtype_name(y_dtype) << " out=" << dtype_name(out_dtype)
      << " misalign=" << misalign_out << " nan_token=" << nan_token;
    return o.str();
  }
};

void check_combine(const CombineCase& c) {
  SCOPED_TRACE(c.name());
  std::uint64_t st = c.seed;
  const int Eg = c.expert_map ? 2 * c.E : c.E;
  const std::int64_t S = c.M * c.k;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(S)), map;
  for (std::int64_t i = 0; i < S; ++i) {
    ids[i] = static_cast<std::int32_t>(lcg(st) % static_cast<std::uint64_t>(Eg));
    if (c.invalid_ids && i % 5 == 2) ids[i] = (i % 2) ? -1 : Eg + 3;
    if (c.all_remote) ids[i] = 2 * static_cast<std::int32_t>(lcg(st) % c.E) + 1;  // odd: remote
  }
  if (c.expert_map) {
    map.resize(static_cast<std::size_t>(Eg));
    for (int g = 0; g < Eg; ++g) map[g] = g % 2 == 0 ? g / 2 : -1;
  }
  auto local = [&](std::int64_t slot) {
    const int id = ids[slot];
    if (id < 0 || id >= Eg) return false;
    const int l = c.expert_map ? map[id] : id;
    return l >= 0 && l < c.E;
  };
  // y: local slots' rows hold values; other rows are never written by the GEMM: NaN here, so
  // reading one would show.
  const std::size_t yes = dtype_size(c.y_dtype);
  std::vector<std::uint8_t> yraw(static_cast<std::size_t>(S * c.K) * yes, 0xff);
  std::vector<float> y(static_cast<std::size_t>(S * c.K), std::nanf(""));
  bool nan_placed = false;
  for (std::int64_t s = 0; s < S; ++s) {
    if (!local(s)) continue;
    for (std::int64_t j = 0; j < c.K; ++j) {
      float v = normal_ish(st);
      if (s / c.k == c.nan_token && !nan_placed && j == c.K / 2) {
        v = std::nanf("");
        nan_placed = true;
      }
      std::uint8_t* dst = yraw.data() + static_cast<std::size_t>(s * c.K + j) * yes;
      if (c.y_dtype == DType::kFp32) {
        std::memcpy(dst, &v, 4);
      } else {
        const std::uint16_t b = c.y_dtype == DType::kFp16 ? float_to_fp16(v) : float_to_bf16(v);
        std::memcpy(dst, &b, 2);
        v = c.y_dtype == DType::kFp16 ? fp16_to_float(b) : bf16_to_float(b);
      }
      y[s * c.K + j] = v;
    }
  }
  // Expected: fp32 sum over the local slots in j order, rounded to the out dtype.
  std::vector<std::uint16_t> want(static_cast<std::size_t>(c.M * c.K));
  for (std::int64_t m = 0; m < c.M; ++m)
    for (std::int64_t j = 0; j < c.K; ++j) {
      float acc = 0.f;
      for (int t = 0; t < c.k; ++t)
        if (local(m * c.k + t)) acc += y[(m * c.k + t) * c.K + j];
      want[m * c.K + j] = c.out_dtype == DType::kFp16 ? float_to_fp16(acc) : float_to_bf16(acc);
    }

  DeviceArena arena;
  auto* dy = static_cast<std::uint8_t*>(arena.alloc(yraw.size()));
  CUDA_OK(cudaMemcpy(dy, yraw.data(), yraw.size(), cudaMemcpyHostToDevice));
  const std::size_t out_elems = static_cast<std::size_t>(c.M * c.K) + 1;
  auto* dout = static_cast<std::uint16_t*>(arena.alloc(out_elems * 2));
  CUDA_OK(cudaMemset(dout, 0xff, out_elems * 2));  // NaN poison
  cuda::CombineParams p;
  p.y = dy;
  p.y_dtype = c.y_dtype;
  p.topk_ids = arena.upload(ids);
  p.expert_map = c.expert_map ? arena.upload(map) : nullptr;
  p.num_experts_global = Eg;
  p.num_experts = c.E;
  p.num_tokens = c.M;
  p.top_k = c.k;
  p.hidden_size = c.K;
  p.out = dout + (c.misalign_out ? 1 : 0);
  p.out_dtype = c.out_dtype;
  cuda::launch_combine_sm90(p, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<std::uint16_t> all = download<std::uint16_t>(dout, out_elems);
  const std::size_t off = c.misalign_out ? 1 : 0;
  int bad = 0;
  for (std::int64_t i = 0; i < c.M * c.K; ++i) {
    const std::uint16_t g = all[off + static_cast<std::size_t>(i)], w = want[i];
    const bool g_nan = (g & 0x7fff) > (c.out_dtype == DType::kFp16 ? 0x7c00 : 0x7f80);
    const bool w_nan = (w & 0x7fff) > (c.out_dtype == DType::kFp16 ? 0x7c00 : 0x7f80);
    if (!(g == w || (g_nan && w_nan)) && bad++ < 10)
      ADD_FAILURE() << "out[" << i / c.K << ", " << i % c.K << "] bits 0x" << std::hex << g << ", expected 0x" << w
                    << std::dec;
  }
  // The element outside out (before or after it) keeps its poison.
  EXPECT_EQ(all[c.misalign_out ? 0 : out_elems - 1], 0xffff) << "combine wrote outside out";
  EXPECT_EQ(bad, 0);
  if (c.nan_token >= 0 && nan_placed)
    for (std::int64_t m = 0; m < c.M; ++m) {
      bool any_nan = false;
      for (std::int64_t j = 0; j < c.K; ++j) {
        const std::uint16_t g = all[off + static_cast<std::size_t>(m * c.K + j)];
        any_nan |= (g & 0x7fff) > (c.out_dtype == DType::kFp16 ? 0x7c00 : 0x7f80);
      }
      EXPECT_EQ(any_nan, m == c.nan_token) << "token " << m;
    }
}

TEST(Sm90Combine, MatchesCpuBitwise) {
  SKIP_WITHOUT_SM90();
  for (DType out : {DType::kBf16, DType::kFp16}) {
    for (DType ydt : {DType::kFp32, out}) {
      for (auto [M, K, k] : {std::tuple<std::int64_t, std::int64_t, int>{1, 256, 1}, {7, 256, 2}, {65, 136, 8},
                             {300, 64, 4}, {3, 130, 9}, {5, 7, 3}, {17, 2880, 16}}) {
        CombineCase c;
        c.M = M;
        c.K = K;
        c.k = k;
        c.E = std::max(16, k);
        c.y_dtype = ydt;
        c.out_dtype = out;
        c.seed = static_cast<std::uint64_t>(M * 31 + K + k);
        check_combine(c);
      }
    }
  }
}

TEST(Sm90Combine, RemoteAndInvalidSlotsContributeNothing) {
  SKIP_WITHOUT_SM90();
  for (DType ydt : {DType::kFp32, DType::kBf16}) {
    CombineCase c;
    c.y_dtype = ydt;
    c.M = 129;
    c.k = 8;
    c.E = 12;
    c.expert_map = true;
    check_combine(c);
    c.invalid_ids = true;
    check_combine(c);
    c.expert_map = false;
    check_combine(c);
    c.all_remote = true;  // zeros, still written everywhere
    c.expert_map = true;
    c.invalid_ids = false;
    check_combine(c);
  }
}

TEST(Sm90Combine, MisalignedOutUsesTheScalarPath) {
  SKIP_WITHOUT_SM90();
  for (DType ydt : {DType::kFp32, DType::kBf16}) {
    CombineCase c;
    c.y_dtype = ydt;
    c.misalign_out = true;
    c.M = 33;
    c.K = 256;
    c.k = 3;
    check_combine(c);
  }
}

TEST(Sm90Combine, NanRowStaysInItsRow) {
  SKIP_WITHOUT_SM90();
  for (DType ydt : {DType::kFp32, DType::kBf16}) {
    CombineCase c;
    c.y_dtype = ydt;
    c.M = 9;
    c.k = 4;
    c.nan_token = 5;
    check_combine(c);
  }
}

}  // namespace
}  // namespace moekit::testing

// GPU test of inv_rope_fp8_quant (kernels/rope_quant/) against the CPU reference, bit for bit on
// the e4m3 bytes and the scales (fp32 and packed UE8M0): the kernel computes the rotation with the
// same float64 operations, so no tolerance applies. Token counts around the 8-token / 16-token
// steps of the register kernel's grid, T = 0 and 70,000 (input offsets past 2^31 elements),
// V4-Flash / V4-Pro TP8 heads, head counts that do not divide the pipelined kernel's warp count
// (its row walk carries), rope widths on both sides of the pipelined kernel's 64, strided inputs
// and outputs, positions 0 and max_pos - 1, zero blocks, NaN / Inf, a position outside the cache
// (NaN row), CUDA-graph replay, poisoned outputs; every kernel (MOEKIT_ROPE_KERNEL auto, small,
// bulk, pipe4, pipe8, half, reg), each checked to have really run where it can run the problem.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/cuda_test.hpp"
#include "cuda/kernels/rope_quant/config.hpp"
#include "cuda/kernels/rope_quant/launch_sm90.hpp"
#include "moekit/moekit.hpp"

namespace {

using moekit::DType;
using moekit::TensorView;
using moekit::testing::dev_alloc;  // the shared helper (tests/common/cuda_test.hpp): 16 bytes at least
using moekit::testing::DevPtr;

constexpr std::int64_t kD = 512;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One problem. The host input `o` is contiguous [T, H, 512]; the device copy may have padded
// token / head strides (dev_t_stride, dev_h_stride), filled with cudaMemcpy2D. Outputs may have
// padded strides too (q_t_pad, s_b_pad elements added to the token / block strides).
struct Problem {
  std::int64_t T = 1, H = 8, G = 1, rope = 64, max_pos = 4096;
  bool packed = false;
  std::int64_t dev_h_stride = kD, dev_t_stride = 0;  // 0 = H * dev_h_stride
  std::int64_t q_t_pad = 0, s_b_pad = 0;
  std::vector<std::uint16_t> o;
  std::vector<std::int64_t> pos;
  std::vector<float> cache;

  std::int64_t hpg() const { return H / G; }
  std::int64_t nb_cols() const { return packed ? hpg() * kD / 512 : hpg() * kD / 128; }
  std::int64_t Tp() const { return (T + 3) / 4 * 4; }
  std::int64_t t_stride() const { return dev_t_stride ? dev_t_stride : H * dev_h_stride; }

  // Values of every magnitude class the kernel meets: N(0,1)-like bf16 with per-head scales
  // spread over 2^-20..2^20, and a RoPE cache of real angles; positions include 0 and max_pos - 1.
  void fill(std::uint64_t seed) {
    o.resize(static_cast<std::size_t>(T * H * kD));
    for (std::size_t row = 0; row < o.size() / kD; ++row) {
      const float mag = std::ldexp(1.0f / static_cast<float>(1 << 23), static_cast<int>(row % 41) - 20);  // per head row
      for (std::size_t c = 0; c < static_cast<std::size_t>(kD); ++c) {
        const std::uint64_t r = mix(seed * 1000003u + row * kD + c);
        o[row * kD + c] = moekit::float_to_bf16(static_cast<float>(static_cast<std::int64_t>(r >> 40) - (1 << 23)) * mag);
      }
    }
    cache.resize(static_cast<std::size_t>(max_pos * rope));
    for (std::int64_t p = 0; p < max_pos; ++p)
      for (std::int64_t i = 0; i < rope / 2; ++i) {
        const double th = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(rope));
        cache[p * rope + i] = static_cast<float>(std::cos(th));
        cache[p * rope + rope / 2 + i] = static_cast<float>(std::sin(th));
      }
    pos.resize(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) pos[t] = static_cast<std::int64_t>(mix(seed + 77 * t) % static_cast<std::uint64_t>(max_pos));
    if (T > 0) pos[0] = 0;
    if (T > 1) pos[T - 1] = max_pos - 1;
  }
};

struct Result {
  std::vector<std::uint8_t> q;      // [G, T, hpg*512] contiguous
  std::vector<std::uint32_t> scale; // [G, cols, Tp] contiguous (fp32 or int32 bits)
};

moekit::InvRopeFp8QuantArgs host_args(Problem& p, Result& r) {
  r.q.assign(static_cast<std::size_t>(p.G * p.T * p.hpg() * kD), 0xAA);
  r.scale.assign(static_cast<std::size_t>(p.G * p.nb_cols() * p.Tp()), 0xFFFFFFFFu);
  moekit::InvRopeFp8QuantArgs a;
  a.o = TensorView::contiguous(p.o.data(), DType::kBf16, {p.T, p.H, kD});
  a.positions = TensorView::contiguous(p.pos.data(), DType::kInt64, {p.T});
  a.cos_sin_cache = TensorView::contiguous(p.cache.data(), DType::kFp32, {p.max_pos, p.rope});
  a.num_groups = p.G;
  a.o_fp8 = TensorView::contiguous(r.q.data(), DType::kFp8E4m3, {p.G, p.T, p.hpg() * kD});
  a.o_scale = TensorView::contiguous(r.scale.data(), p.packed ? DType::kInt32 : DType::kFp32, {p.G, p.nb_cols(), p.Tp()});
  a.packed_ue8m0 = p.packed;
  return a;
}

Result run_cpu(Problem& p) {
  Result r;
  moekit::InvRopeFp8QuantArgs a = host_args(p, r);
  moekit::Options opt;
  opt.backend = moekit::Backend::kCpu;
  moekit::inv_rope_fp8_quant(a, opt);
  return r;
}

// The device run: outputs poisoned (0xAA bytes, 0xFFFFFFFF scale words) so an unwritten element
// shows; `stream` may be a capturing stream (then `graph_replays` replays it).
struct DeviceRun {
  DevPtr o, pos, cache, q, scale;
  moekit::InvRopeFp8QuantArgs args;
  std::int64_t q_t_stride = 0, s_b_stride = 0;

  explicit DeviceRun(const Problem& p) {
    const std::int64_t ts = p.t_stride();
    o = dev_alloc(static_cast<std::size_t>(std::max<std::int64_t>(p.T * ts, 1) * 2));
    if (p.T > 0) {
      // Row t of the host [T, H*512]... copied head by head when heads are padded.
      if (p.dev_h_stride == kD) {
        EXPECT_EQ(cudaSuccess, cudaMemcpy2D(o.get(), static_cast<std::size_t>(ts * 2), p.o.data(),
                                            static_cast<std::size_t>(p.H * kD * 2), static_cast<std::size_t>(p.H * kD * 2),
                                            static_cast<std::size_t>(p.T), cudaMemcpyHostToDevice));
      } else {
        for (std::int64_t h = 0; h < p.H; ++h)
          EXPECT_EQ(cudaSuccess, cudaMemcpy2D(static_cast<std::uint16_t*>(o.get()) + h * p.dev_h_stride,
                                              static_cast<std::size_t>(ts * 2), p.o.data() + h * kD,
                                              static_cast<std::size_t>(p.H * kD * 2), kD * 2,
                                              static_cast<std::size_t>(p.T), cudaMemcpyHostToDevice));
      }
    }
    pos = dev_alloc(static_cast<std::size_t>(p.T) * 8);
    if (p.T > 0) {
      EXPECT_EQ(cudaSuccess, cudaMemcpy(pos.get(), p.pos.data(), static_cast<std::size_t>(p.T) * 8, cudaMemcpyHostToDevice));
    }
    cache = dev_alloc(p.cache.size() * 4);
    EXPECT_EQ(cudaSuccess, cudaMemcpy(cache.get(), p.cache.data(), p.cache.size() * 4, cudaMemcpyHostToDevice));
    q_t_stride = p.hpg() * kD + p.q_t_pad;
    s_b_stride = p.Tp() + p.s_b_pad;
    const std::size_t q_bytes = static_cast<std::size_t>(p.G * p.T * q_t_stride);
    const std::size_t s_bytes = static_cast<std::size_t>(p.G * p.nb_cols() * s_b_stride) * 4;
    q = dev_alloc(q_bytes);
    scale = dev_alloc(s_bytes);
    EXPECT_EQ(cudaSuccess, cudaMemset(q.get(), 0xAA, q_bytes < 16 ? 16 : q_bytes));
    EXPECT_EQ(cudaSuccess, cudaMemset(scale.get(), 0xFF, s_bytes < 16 ? 16 : s_bytes));

    const moekit::Device dev = moekit::Device::cuda(0);
    args.o = TensorView::contiguous(o.get(), DType::kBf16, {p.T, p.H, kD}, dev);
    args.o.strides[0] = ts;
    args.o.strides[1] = p.dev_h_stride;
    args.positions = TensorView::contiguous(pos.get(), DType::kInt64, {p.T}, dev);
    args.cos_sin_cache = TensorView::contiguous(cache.get(), DType::kFp32, {p.max_pos, p.rope}, dev);
    args.num_groups = p.G;
    args.o_fp8 = TensorView::contiguous(q.get(), DType::kFp8E4m3, {p.G, p.T, p.hpg() * kD}, dev);
    args.o_fp8.strides[1] = q_t_stride;
    args.o_fp8.strides[0] = p.T * q_t_stride;
    args.o_scale = TensorView::contiguous(scale.get(), p.packed ? DType::kInt32 : DType::kFp32, {p.G, p.nb_cols(), p.Tp()}, dev);
    args.o_scale.strides[1] = s_b_stride;
    args.o_scale.strides[0] = p.nb_cols() * s_b_stride;
    args.packed_ue8m0 = p.packed;
  }

  void run(cudaStream_t stream = nullptr) {
    moekit::Options opt;
    opt.backend = moekit::Backend::kCuda;
    opt.stream = stream;
    moekit::inv_rope_fp8_quant(args, opt);
  }

  // The outputs in the reference's contiguous layout (padding dropped).
  Result fetch(const Problem& p) const {
    Result r;
    const std::int64_t row = p.hpg() * kD;
    r.q.resize(static_cast<std::size_t>(p.G * p.T * row));
    if (p.T > 0) {
      EXPECT_EQ(cudaSuccess, cudaMemcpy2D(r.q.data(), static_cast<std::size_t>(row), q.get(), static_cast<std::size_t>(q_t_stride),
                                          static_cast<std::size_t>(row), static_cast<std::size_t>(p.G * p.T), cudaMemcpyDeviceToHost));
    }
    r.scale.resize(static_cast<std::size_t>(p.G * p.nb_cols() * p.Tp()));
    if (p.Tp() > 0) {
      EXPECT_EQ(cudaSuccess, cudaMemcpy2D(r.scale.data(), static_cast<std::size_t>(p.Tp() * 4), scale.get(),
                                          static_cast<std::size_t>(s_b_stride * 4), static_cast<std::size_t>(p.Tp() * 4),
                                          static_cast<std::size_t>(p.G * p.nb_cols()), cudaMemcpyDeviceToHost));
    }
    return r;
  }
};

// Bit-for-bit comparison; reports the first differing byte / scale with its coordinates.
void expect_same(const Problem& p, const Result& want, const Result& got, const std::string& what) {
  ASSERT_EQ(want.q.size(), got.q.size()) << what;
  const std::int64_t row = p.hpg() * kD;
  for (std::size_t i = 0; i < want.q.size(); ++i)
    if (want.q[i] != got.q[i]) {
      const std::int64_t g = static_cast<std::int64_t>(i) / (p.T * row), t = (static_cast<std::int64_t>(i) / row) % p.T;
      const std::int64_t c = static_cast<std::int64_t>(i) % row;
      FAIL() << what << ": o_fp8[g=" << g << ", t=" << t << ", " << c << "] is 0x" << std::hex << int(got.q[i])
             << ", reference 0x" << int(want.q[i]) << std::dec;
    }
  ASSERT_EQ(want.scale.size(), got.scale.size()) << what;
  for (std::size_t i = 0; i < want.scale.size(); ++i)
    if (want.scale[i] != got.scale[i]) {
      const std::int64_t t = static_cast<std::int64_t>(i) % p.Tp(), gb = static_cast<std::int64_t>(i) / p.Tp();
      FAIL() << what << ": o_scale[g=" << gb / p.nb_cols() << ", col=" << gb % p.nb_cols() << ", t=" << t
             << "] bits 0x" << std::hex << got.scale[i] << ", reference 0x" << want.scale[i] << std::dec;
    }
}

// The kernels of config.hpp by their MOEKIT_ROPE_KERNEL value: auto (by T), the latency-first
// kernel, the bulk-copy kernel, the pipelined kernel at 4 and 8 stages, the half-warp kernel, the
// register kernel.
constexpr const char* kKernels[] = {"auto", "small", "bulk", "pipe4", "pipe8", "half", "reg"};

// The kernel a forced MOEKIT_ROPE_KERNEL value must run on problem p (the launcher hands a problem
// a kernel cannot run on to the next one: bulk -> half -> reg), so a silent fallback fails.
std::string expected_kernel(const Problem& p, const std::string& k) {
  const bool pipe_ok = p.rope <= 64;  // the test problems' head counts all fit the pipelined grid
  const bool bulk_ok = p.rope <= 64 && p.rope % 4 == 0;  // the test caches are 16-byte aligned
  if (k == "auto") {
    const std::int64_t rows = p.T * p.H;
    return rows <= moekit::cuda::kRopeQuantSmallMaxRows ? "small"
           : rows <= moekit::cuda::kRopeQuantBulkMaxRows ? expected_kernel(p, "bulk")
                                                        : expected_kernel(p, "half");
  }
  if (k == "bulk") return bulk_ok ? "bulk" : expected_kernel(p, "half");
  if (k == "pipe4" || k == "pipe8" || k == "half") return pipe_ok ? k : "reg";
  return k;
}

// The reference once, then every kernel, each into freshly poisoned outputs.
void check(Problem& p, const std::string& what) {
  const Result want = run_cpu(p);
  for (const char* k : kKernels) {
    moekit::testing::ScopedEnv env("MOEKIT_ROPE_KERNEL", k);
    DeviceRun d(p);
    d.run();
    ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize()) << what;
    const std::string ran = moekit::cuda::inv_rope_quant_last_kernel();
    if (p.T > 0) EXPECT_EQ(ran, expected_kernel(p, k)) << what << " MOEKIT_ROPE_KERNEL=" << k;
    expect_same(p, want, d.fetch(p), what + " MOEKIT_ROPE_KERNEL=" + k + " (ran " + ran + ")");
  }
}

struct HeadShape {
  const char* name;
  std::int64_t H, G;
};
// DeepSeek-V4 at TP8: Flash 8 local heads in 1 group, Pro 16 heads in 2 groups.
constexpr HeadShape kShapes[] = {{"v4-flash-tp8", 8, 1}, {"v4-pro-tp8", 16, 2}};

TEST(Sm90RopeQuant, MatchesReferenceBitForBit) {
  SKIP_WITHOUT_SM90();
  for (const HeadShape& s : kShapes)
    for (std::int64_t T : {0, 1, 3, 4, 5, 16, 17, 63, 64, 65, 100, 4097})
      for (bool packed : {false, true}) {
        Problem p;
        p.T = T;
        p.H = s.H;
        p.G = s.G;
        p.packed = packed;
        p.fill(static_cast<std::uint64_t>(T) + 1);
        check(p, std::string(s.name) + " T=" + std::to_string(T) + (packed ? " ue8m0" : " fp32"));
      }
}

// 70,000 tokens of the Pro shape with each token row padded to 32,768 elements: the last input
// offsets pass 2^31 elements (4.6 GB), the grid's x dimension is 4,375 blocks.
TEST(Sm90RopeQuant, SeventyThousandTokensInt64Offsets) {
  SKIP_WITHOUT_SM90();
  Problem p;
  p.T = 70000;
  p.H = 16;
  p.G = 2;
  p.dev_t_stride = 32768;
  ASSERT_GT(p.T * p.dev_t_stride, std::int64_t{1} << 31);
  p.fill(70000);
  for (bool packed : {false, true}) {
    p.packed = packed;
    check(p, packed ? "T=70000 ue8m0" : "T=70000 fp32");
  }
}

// Head counts that do not divide the pipelined kernel's 8 warps a CTA (7 heads: a grid of a
// multiple of 7 CTAs; 10 heads in 5 groups: of 5), with 4,097 tokens: several tokens a warp; and
// one head (a bulk tile of 16 rows holds 16 tokens: every producer lane loads a position).
TEST(Sm90RopeQuant, HeadCountsNotDividingTheCtaWarps) {
  SKIP_WITHOUT_SM90();
  for (const HeadShape& s : {HeadShape{"7 heads", 7, 1}, HeadShape{"10 heads in 5 groups", 10, 5}, HeadShape{"1 head", 1, 1}})
    for (bool packed : {false, true}) {
      Problem p;
      p.T = 4097;
      p.H = s.H;
      p.G = s.G;
      p.packed = packed;
      p.fill(31);
      check(p, std::string(s.name) + (packed ? " ue8m0" : " fp32"));
    }
}

// rope_dim from 2 to 256: up to 64 the pipelined kernel (its cos/sin lanes 24..31, odd cache row
// pitches: 4-byte copies; the bulk kernel takes rope_dim % 4 == 0 only), above it the register
// kernel (and the latency-first one) whatever MOEKIT_ROPE_KERNEL says.
TEST(Sm90RopeQuant, RopeWidthsMatchReference) {
  SKIP_WITHOUT_SM90();
  for (std::int64_t rope : {2, 6, 8, 30, 62, 64, 66, 128, 256}) {
    Problem p;
    p.T = 37;
    p.H = 16;
    p.G = 2;
    p.rope = rope;
    p.fill(static_cast<std::uint64_t>(rope));
    check(p, "rope_dim " + std::to_string(rope));
  }
}

// Padded head and token strides of the input and padded outputs, for every kernel (check() runs
// each; under auto T = 17 is the latency-first kernel and 4,097 x 16 heads = 65,552 rows the
// pipelined one, just past the bulk range; the forced bulk run covers bulk, several tiles a CTA).
TEST(Sm90RopeQuant, StridedInputsAndOutputs) {
  SKIP_WITHOUT_SM90();
  for (std::int64_t T : {17, 4097}) {
    Problem p;
    p.T = T;
    p.H = 16;
    p.G = 2;
    p.dev_h_stride = 520;             // heads 16 bytes apart plus padding
    p.dev_t_stride = 16 * 520 + 64;   // tokens padded too
    p.q_t_pad = 256;                  // o_fp8 token rows padded
    p.s_b_pad = 12;                   // scale columns padded (token stride stays 1)
    p.fill(5);
    check(p, "strided fp32 T=" + std::to_string(T));
    p.packed = true;
    check(p, "strided ue8m0 T=" + std::to_string(T));
  }
}

// Rows with the special values of docs/rope_quant.md: zero blocks (2^-42), the fp32 rounding case,
// amax exactly 448 * 2^k, NaN (both signs) and Inf in plain and rotated channels, -0.
TEST(Sm90RopeQuant, SpecialValuesMatchReference) {
  SKIP_WITHOUT_SM90();
  for (bool packed : {false, true}) {
    Problem p;
    p.T = 5;
    p.H = 8;
    p.packed = packed;
    p.max_pos = 4;
    p.fill(9);
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    auto set = [&](std::int64_t t, std::int64_t h, std::int64_t c, float v) { p.o[(t * p.H + h) * kD + c] = moekit::float_to_bf16(v); };
    for (std::int64_t c = 0; c < kD; ++c) set(0, 0, c, 0.0f);      // an all-zero row
    for (std::int64_t c = 0; c < 128; ++c) set(0, 1, c, -0.0f);    // a block of -0
    set(0, 2, 3, nan);
    set(0, 2, 4, -nan);
    set(0, 2, 200, inf);
    set(0, 2, 201, -inf);
    set(0, 3, 448, inf);  // rotated channels
    set(0, 3, 451, -inf);
    set(0, 4, 17, 448.0f);  // amax exactly 448 * 2^k
    set(0, 4, 140, std::ldexp(448.0f, -30));
    set(0, 4, 300, std::ldexp(448.0f, 40));
    // The rounding case: cos 1, sin 2^-10 at position 3, y[448] = 448 + 2^-30 -> 448 in fp32.
    p.pos[1] = 3;
    p.cache[3 * 64 + 0] = 1.0f;
    p.cache[3 * 64 + 32] = std::ldexp(1.0f, -10);
    for (std::int64_t c = 384; c < kD; ++c) set(1, 0, c, 0.0f);
    set(1, 0, 448, 448.0f);
    set(1, 0, 449, std::ldexp(1.0f, -20));
    check(p, packed ? "special ue8m0" : "special fp32");
  }
}

// A position outside the cache (only the GPU sees it): that token's bytes are NaN (0x7f) and its
// scales NaN / 0xffffffff; every other token matches the reference.
TEST(Sm90RopeQuant, PositionOutsideCacheGivesNanRow) {
  SKIP_WITHOUT_SM90();
  for (bool packed : {false, true}) {
    Problem p;
    p.T = 6;
    p.H = 8;
    p.packed = packed;
    p.fill(11);
    Problem good = p;
    good.pos[2] = 0;
    const Result want = run_cpu(good);
    p.pos[2] = p.max_pos;  // one past the last row
    for (const char* k : kKernels) {
      SCOPED_TRACE(std::string("MOEKIT_ROPE_KERNEL=") + k);
      moekit::testing::ScopedEnv env("MOEKIT_ROPE_KERNEL", k);
      DeviceRun d(p);
      d.run();
      ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
      const Result got = d.fetch(p);
      const std::int64_t row = p.hpg() * kD;
      for (std::int64_t t = 0; t < p.T; ++t)
        for (std::int64_t c = 0; c < row; ++c)
          ASSERT_EQ(got.q[t * row + c], t == 2 ? 0x7f : want.q[t * row + c]) << "t=" << t << " c=" << c;
      for (std::int64_t col = 0; col < p.nb_cols(); ++col)
        for (std::int64_t t = 0; t < p.Tp(); ++t) {
          const std::uint32_t g = got.scale[col * p.Tp() + t];
          if (t != 2) {
            ASSERT_EQ(g, want.scale[col * p.Tp() + t]) << "col=" << col << " t=" << t;
          } else if (packed) {
            ASSERT_EQ(g, 0xffffffffu);
          } else {
            float f;
            std::memcpy(&f, &g, 4);
            ASSERT_TRUE(std::isnan(f));
          }
        }
    }
  }
}

// Captured in a CUDA graph (no allocation, no sync inside), replayed twice: equal to eager. T = 1
// (the latency-first kernel) and 1,000 (the bulk kernel).
TEST(Sm90RopeQuant, GraphReplayEqualsEagerAndIsDeterministic) {
  SKIP_WITHOUT_SM90();
  for (std::int64_t T : {1, 1000}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    Problem p;
    p.T = T;
    p.H = 16;
    p.G = 2;
    p.fill(13);
    DeviceRun d(p);
    d.run();  // eager first: loads the kernels (preload) outside the capture
    ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
    const Result eager = d.fetch(p);
    CUDA_OK(cudaMemset(d.q.get(), 0xAA, static_cast<std::size_t>(p.G * p.T * d.q_t_stride)));
    cudaStream_t s = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    d.run(s);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 2; ++i) CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    expect_same(p, eager, d.fetch(p), "graph replay");
    expect_same(p, run_cpu(p), eager, "eager");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
  }
}

TEST(Sm90RopeQuant, BadRowsSettingIsAClearError) {
  SKIP_WITHOUT_SM90();
  Problem p;
  p.T = 2;
  p.fill(1);
  DeviceRun d(p);
  // MOEKIT_ROPE_KERNEL empty (as unset): the rows setting is read only then, and a kernel forced
  // in the caller's environment (e.g. a sanitizer run of one kernel) would otherwise shadow it.
  moekit::testing::ScopedEnv kernel("MOEKIT_ROPE_KERNEL", "");
  moekit::testing::ScopedEnv env("MOEKIT_ROPE_QUANT_ROWS", "3");
  try {
    d.run();
    FAIL() << "no error";
  } catch (const moekit::Error& e) {
    EXPECT_EQ(e.status(), moekit::Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("MOEKIT_ROPE_QUANT_ROWS is '3', expected 2, 4 or 8"), std::string::npos) << e.what();
  }
}

TEST(Sm90RopeQuant, BadKernelSettingIsAClearError) {
  SKIP_WITHOUT_SM90();
  Problem p;
  p.T = 2;
  p.fill(1);
  DeviceRun d(p);
  moekit::testing::ScopedEnv env("MOEKIT_ROPE_KERNEL", "fast");
  try {
    d.run();
    FAIL() << "no error";
  } catch (const moekit::Error& e) {
    EXPECT_EQ(e.status(), moekit::Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("MOEKIT_ROPE_KERNEL is 'fast', expected auto, small, bulk, pipe4, pipe8, half or reg"),
              std::string::npos)
        << e.what();
  }
}

// The older MOEKIT_ROPE_QUANT_ROWS still picks its kernel when MOEKIT_ROPE_KERNEL is unset.
TEST(Sm90RopeQuant, RowsSettingStillPicksItsKernel) {
  SKIP_WITHOUT_SM90();
  Problem p;
  p.T = 100;
  p.fill(3);
  const Result want = run_cpu(p);
  for (const auto& [rows, kernel] : {std::pair<const char*, const char*>{"2", "reg"}, {"4", "pipe4"}, {"8", "pipe8"}}) {
    moekit::testing::ScopedEnv unset("MOEKIT_ROPE_KERNEL", "");
    moekit::testing::ScopedEnv env("MOEKIT_ROPE_QUANT_ROWS", rows);
    DeviceRun d(p);
    d.run();
    ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
    EXPECT_STREQ(moekit::cuda::inv_rope_quant_last_kernel(), kernel) << rows;
    expect_same(p, want, d.fetch(p), std::string("MOEKIT_ROPE_QUANT_ROWS=") + rows);
  }
}

TEST(Sm90RopeQuant, MisalignedInputIsAClearError) {
  SKIP_WITHOUT_SM90();
  Problem p;
  p.T = 2;
  p.fill(1);
  DeviceRun d(p);
  d.args.o.data = static_cast<std::uint16_t*>(d.o.get()) + 1;  // 2 bytes off; nothing is read
  try {
    d.run();
    FAIL() << "no error";
  } catch (const moekit::Error& e) {
    EXPECT_EQ(e.status(), moekit::Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos) << e.what();
  }
}

}  // namespace

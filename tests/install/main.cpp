// The install test's client: includes the installed headers, links the installed libraries and
// runs a tiny fused_experts on the CPU; exits non-zero unless every output is finite and the
// output is not all zeros.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <moekit/moekit.hpp>

int main() {
  constexpr std::int64_t M = 3, E = 4, k = 2, K = 64, N = 32;
  std::uint64_t state = 0x2545F4914F6CDD1Dull;
  auto next = [&state] {  // xorshift64*: uniform in [-1, 1)
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return static_cast<float>((state * 0x2545F4914F6CDD1Dull) >> 40) / static_cast<float>(1 << 23) - 1.0f;
  };
  std::vector<std::uint16_t> hidden(M * K), w13(E * 2 * N * K), w2(E * K * N), out(M * K, 0xffff);
  for (auto& v : hidden) v = moekit::float_to_bf16(next());
  for (auto& v : w13) v = moekit::float_to_bf16(0.2f * next());
  for (auto& v : w2) v = moekit::float_to_bf16(0.2f * next());
  std::vector<float> logits(M * E);
  for (auto& v : logits) v = next();
  std::vector<std::int32_t> ids(M * k);
  std::vector<float> weights(M * k);

  try {
    moekit::RouteArgs route;
    route.router_logits = moekit::TensorView::contiguous(logits.data(), moekit::DType::kFp32, {M, E});
    route.routing.top_k = static_cast<int>(k);
    route.topk_ids = moekit::TensorView::contiguous(ids.data(), moekit::DType::kInt32, {M, k});
    route.topk_weights = moekit::TensorView::contiguous(weights.data(), moekit::DType::kFp32, {M, k});
    moekit::Options cpu;
    cpu.backend = moekit::Backend::kCpu;
    moekit::route(route, cpu);

    moekit::FusedExpertsArgs args;
    args.hidden = moekit::TensorView::contiguous(hidden.data(), moekit::DType::kBf16, {M, K});
    args.weights.w13 = moekit::TensorView::contiguous(w13.data(), moekit::DType::kBf16, {E, 2 * N, K});
    args.weights.w2 = moekit::TensorView::contiguous(w2.data(), moekit::DType::kBf16, {E, K, N});
    args.topk_ids = route.topk_ids;
    args.topk_weights = route.topk_weights;
    args.out = moekit::TensorView::contiguous(out.data(), moekit::DType::kBf16, {M, K});
    moekit::fused_experts(args, cpu);
  } catch (const moekit::Error& e) {
    std::fprintf(stderr, "moekit call failed: %s\n", e.what());
    return 1;
  }

  bool nonzero = false;
  for (std::uint16_t v : out) {
    const float f = moekit::bf16_to_float(v);
    if (!std::isfinite(f)) {
      std::fprintf(stderr, "output has a non-finite value\n");
      return 1;
    }
    nonzero = nonzero || f != 0.0f;
  }
  if (!nonzero) {
    std::fprintf(stderr, "output is all zeros\n");
    return 1;
  }
  std::printf("moekit %s install client: ok (out[0] = %g)\n", moekit::version(), moekit::bf16_to_float(out[0]));
  return 0;
}

// Drawing and printing the fuzz problems (fuzz.hpp). Sizes are kept small: the CPU reference and
// the host weight generation are the slow part of a fuzz run, not the GPU.
#include "common/fuzz.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace moekit::testing {

namespace {

// Reference multiply-adds per problem and weight elements per problem: ~20 M MACs is ~20 ms of the
// threaded CPU reference, 6 M weights ~50 ms of generation and quantization.
constexpr std::int64_t kMaxReferenceMacs = 20'000'000;
constexpr std::int64_t kMaxWeightElems = 6'000'000;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Draw {
 public:
  Draw(std::uint64_t seed, int index) : state_(mix(seed ^ mix(static_cast<std::uint64_t>(index) + 0x51ed27))) {}
  std::uint64_t next() { return mix(state_++); }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  bool chance(double p) { return uniform() < p; }
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n)); }
  template <class T>
  T pick(const std::vector<T>& v) { return v[static_cast<std::size_t>(below(static_cast<std::int64_t>(v.size())))]; }

 private:
  std::uint64_t state_;
};

std::uint64_t parse_u64(const char* name, const char* text) {
  try {
    std::size_t used = 0;
    const std::uint64_t v = std::stoull(text, &used, 0);
    if (used != std::string(text).size()) throw std::invalid_argument("trailing characters");
    return v;
  } catch (const std::exception&) {
    throw std::invalid_argument(std::string(name) + "='" + text + "' is not a number");
  }
}

}  // namespace

std::uint64_t fuzz_seed_from_env() {
  const char* s = std::getenv("MOEKIT_FUZZ_SEED");
  return (s == nullptr || *s == '\0') ? kDefaultFuzzSeed : parse_u64("MOEKIT_FUZZ_SEED", s);
}

int fuzz_count_from_env(int fallback) {
  const char* s = std::getenv("MOEKIT_FUZZ_COUNT");
  if (s == nullptr || *s == '\0') return fallback;
  const std::uint64_t v = parse_u64("MOEKIT_FUZZ_COUNT", s);
  if (v > 1'000'000) throw std::invalid_argument(std::string("MOEKIT_FUZZ_COUNT='") + s + "' is too large");
  return static_cast<int>(v);
}

int fuzz_first_from_env() {
  const char* s = std::getenv("MOEKIT_FUZZ_FIRST");
  if (s == nullptr || *s == '\0') return 0;
  const std::uint64_t v = parse_u64("MOEKIT_FUZZ_FIRST", s);
  if (v > 1'000'000'000) throw std::invalid_argument(std::string("MOEKIT_FUZZ_FIRST='") + s + "' is too large");
  return static_cast<int>(v);
}

const std::vector<std::string>& fuzz_paths() {
  static const std::vector<std::string> paths = {"auto", "mma", "swapab", "tokmajor", "fused", "decode", "gemv"};
  return paths;
}

std::int64_t FuzzProblem::reference_macs() const { return spec.M * spec.k * 3 * spec.K * spec.N; }

bool FuzzProblem::may_decline_all() const {
  const std::int64_t es = spec.scheme == Scheme::kBf16 ? 2 : 1;
  return spec.K % 2 != 0 || spec.N % 2 != 0 || (spec.K * es) % 4 != 0 || (spec.N * es) % 4 != 0;
}

FuzzProblem draw_fuzz_problem(std::uint64_t run_seed, int index) {
  Draw d(run_seed, index);
  FuzzProblem p;
  p.run_seed = run_seed;
  p.index = index;
  CaseSpec& s = p.spec;
  s.seed = (mix(run_seed * 31 + static_cast<std::uint64_t>(index)) & 0xffffffffull) | 1;
  s.scheme = d.pick<Scheme>({Scheme::kBf16, Scheme::kFp8PerTensor, Scheme::kFp8PerChannel, Scheme::kFp8Block128});
  const bool fp8 = s.scheme != Scheme::kBf16;
  s.act_dtype = d.chance(0.2) ? DType::kFp16 : DType::kBf16;

  // Experts: small ones often, odd and non-power-of-two counts, a few large ones.
  s.E = d.chance(0.75) ? d.pick<std::int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 12, 16})
                       : d.pick<std::int64_t>({24, 33, 64, 72, 128, 160, 257});
  s.expert_map = d.chance(0.25);
  const std::int64_t Eg = s.expert_map ? 2 * s.E : s.E;
  const std::int64_t k_max = std::min<std::int64_t>(s.E, 8);
  s.k = (s.E <= 8 && d.chance(0.25)) ? s.E : 1 + d.below(k_max);  // k = E a quarter of the time

  // Sizes: multiples of 4 (what every scheme's rows need), tile tails, a few K/N that only bf16
  // rows take (2 mod 4), and rarely odd ones (which the fast paths may refuse).
  std::vector<std::int64_t> Ks = {32, 64, 96, 128, 136, 200, 256, 264, 392, 520};
  std::vector<std::int64_t> Ns = {16, 32, 40, 64, 72, 96, 128, 136, 192, 256, 360};
  if (!fp8) {
    Ks.insert(Ks.end(), {66, 130, 202});
    Ns.insert(Ns.end(), {18, 50, 130});
  }
  s.K = d.pick(Ks);
  s.N = d.pick(Ns);
  if (d.chance(0.04)) {
    p.odd_sizes = true;
    if (d.chance(0.5)) s.K = d.pick<std::int64_t>({33, 65, 127});
    else s.N = d.pick<std::int64_t>({15, 33, 47});
  }
  // Weight generation bounded: halve N, then K, keeping multiples of 8 (odd sizes are kept small).
  while (s.E * 3 * s.K * s.N > kMaxWeightElems) {
    if (s.N > 16 && (s.N >= s.K / 4 || s.K <= 32)) s.N = std::max<std::int64_t>(16, s.N / 2 / 8 * 8);
    else s.K = std::max<std::int64_t>(32, s.K / 2 / 8 * 8);
    p.odd_sizes = p.odd_sizes && (s.K % 2 != 0 || s.N % 2 != 0);
  }

  // Routing.
  s.routing = RoutingConfig{};
  s.routing.method = d.pick<RoutingMethod>(
      {RoutingMethod::kSoftmaxTopk, RoutingMethod::kSigmoidGroupedTopk, RoutingMethod::kTopkSoftmax});
  s.routing.renormalize = s.routing.method != RoutingMethod::kTopkSoftmax && d.chance(0.75);
  if (s.routing.method == RoutingMethod::kSigmoidGroupedTopk) {
    std::vector<int> divisors;
    for (int g = 1; g <= 32 && g <= Eg; ++g)
      if (Eg % g == 0) divisors.push_back(g);
    s.routing.num_groups = d.pick(divisors);
    const std::int64_t per_group = Eg / s.routing.num_groups;
    const int min_kept = static_cast<int>((s.k + per_group - 1) / per_group);
    s.routing.topk_groups = min_kept + static_cast<int>(d.below(s.routing.num_groups - min_kept + 1));
    s.routing.routed_scaling_factor = d.pick<float>({1.0f, 2.5f});
  }

  p.fused_moe = d.chance(0.35);
  s.pattern = RoutingPattern::kFromLogits;
  if (!p.fused_moe) {
    const double r = d.uniform();
    if (r < 0.15) s.pattern = RoutingPattern::kSkewed;
    else if (r < 0.3) s.pattern = RoutingPattern::kAllToOne;
    s.hot_expert = static_cast<int>(d.below(Eg));
  }

  s.activation = ActivationConfig{};
  s.activation.kind = d.pick<Activation>({Activation::kSilu, Activation::kGelu, Activation::kSwigluOai});
  if (s.activation.kind == Activation::kSwigluOai && d.chance(0.3)) s.activation.limit = 2.0f;  // the clamp bites
  s.bias = d.chance(0.3);
  s.weight_on_input = d.chance(0.2);
  s.static_scales = s.scheme == Scheme::kFp8PerTensor && d.chance(0.4);

  // Tokens: tile boundaries, the permutation's 512-token switch, M = 0, small random counts.
  const double r = d.uniform();
  if (r < 0.03) s.M = 0;
  else if (r < 0.35) s.M = d.pick<std::int64_t>({1, 2, 3, 7, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257});
  else if (r < 0.42) s.M = d.pick<std::int64_t>({511, 512, 513});
  else s.M = 1 + d.below(160);
  const std::int64_t per_token = s.k * 3 * s.K * s.N;
  if (s.M * per_token > kMaxReferenceMacs) s.M = std::max<std::int64_t>(1, kMaxReferenceMacs / per_token);
  return p;
}

std::string describe_fuzz_problem(const FuzzProblem& p) {
  const CaseSpec& s = p.spec;
  std::ostringstream o;
  o << "fuzz problem " << p.index << " of seed " << p.run_seed << ": " << (p.fused_moe ? "fused_moe" : "fused_experts")
    << " M=" << s.M << " E=" << s.E << " E_global=" << (s.expert_map ? 2 * s.E : s.E) << " k=" << s.k << " K=" << s.K
    << " N=" << s.N << " scheme=" << scheme_name(s.scheme) << " act_dtype=" << dtype_name(s.act_dtype)
    << " activation=" << activation_name(s.activation.kind);
  if (s.activation.kind == Activation::kSwigluOai)
    o << "(alpha=" << s.activation.alpha << ", limit=" << s.activation.limit << ")";
  o << " routing=" << routing_method_name(s.routing.method) << "(renormalize=" << s.routing.renormalize;
  if (s.routing.method == RoutingMethod::kSigmoidGroupedTopk)
    o << ", num_groups=" << s.routing.num_groups << ", topk_groups=" << s.routing.topk_groups
      << ", routed_scaling_factor=" << s.routing.routed_scaling_factor;
  o << ")";
  const char* pattern = s.pattern == RoutingPattern::kFromLogits ? "from_logits"
                        : s.pattern == RoutingPattern::kSkewed   ? "skewed"
                                                                 : "all_to_one";
  o << " ids=" << pattern;
  if (s.pattern == RoutingPattern::kAllToOne) o << "(hot_expert=" << s.hot_expert << ")";
  o << " bias=" << s.bias << " expert_map=" << s.expert_map << " apply_router_weight_on_input=" << s.weight_on_input
    << " static_scales=" << s.static_scales << " odd_sizes=" << p.odd_sizes << " case_seed=" << s.seed
    << "\n  rerun: MOEKIT_FUZZ_SEED=" << p.run_seed << " MOEKIT_FUZZ_FIRST=" << p.index
    << " MOEKIT_FUZZ_COUNT=1 moekit_cuda_tests --gtest_filter='Sm90Fuzz.*'";
  return o.str();
}

}  // namespace moekit::testing

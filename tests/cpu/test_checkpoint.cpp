// safetensors checkpoints (src/core/checkpoint.cpp): small synthetic checkpoints with the real
// Mixtral / Qwen3 / DeepSeek key names, single file and sharded, read back byte for byte; and
// every malformed-file error (missing file or key, wrong shape, truncation, bad header, dtype).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/json.hpp"
#include "moekit/moekit.hpp"

namespace moekit {
namespace {

namespace fs = std::filesystem;

void expect_error(const std::function<void()>& fn, Status status, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message lacks \"" << p << "\": " << e.what();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-moekit exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw";
}

// A fresh folder per test, removed afterwards.
class CpuCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("moekit_ckpt_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// A tensor whose bytes depend on `seed`, so a misplaced copy shows up as a mismatch.
HostTensor make_tensor(DType dtype, std::vector<std::int64_t> shape, std::uint32_t seed) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  std::int64_t n = 1;
  for (std::int64_t d : t.shape) n *= d;
  t.data.resize(static_cast<std::size_t>(n) * dtype_size(dtype));
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (auto& b : t.data) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<std::uint8_t>(x);
  }
  return t;
}

// Writes a file of raw bytes: 8-byte little-endian `header_len` (the header's size unless given),
// the header text, then `data_bytes` bytes of data.
void write_raw(const std::string& path, const std::string& header, std::size_t data_bytes,
               std::int64_t header_len = -1) {
  std::ofstream f(path, std::ios::binary);
  const std::uint64_t len = header_len >= 0 ? static_cast<std::uint64_t>(header_len) : header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(len >> (8 * i)));
  f << header;
  f << std::string(data_bytes, '\x01');
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// The bytes of w13[e] rows [row0, row0 + rows) / w2[e] equal the source tensors.
void expect_rows(const HostTensor& stacked, std::int64_t e, std::int64_t row0, const HostTensor& src) {
  const std::size_t es = dtype_size(stacked.dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(stacked.shape[2]) * es;
  const std::size_t expert_bytes = static_cast<std::size_t>(stacked.shape[1]) * row_bytes;
  const std::uint8_t* p = stacked.data.data() + static_cast<std::size_t>(e) * expert_bytes + static_cast<std::size_t>(row0) * row_bytes;
  ASSERT_LE(static_cast<std::size_t>(row0) * row_bytes + src.data.size(), expert_bytes);
  EXPECT_EQ(std::memcmp(p, src.data.data(), src.data.size()), 0) << "expert " << e << " row " << row0;
}

// ---------------------------------------------------------------- reading and writing

TEST_F(CpuCheckpoint, RoundTripsEveryDtype) {
  std::map<std::string, HostTensor> in;
  in["a.bf16"] = make_tensor(DType::kBf16, {3, 5}, 1);
  in["b.f16"] = make_tensor(DType::kFp16, {7}, 2);
  in["c.f32"] = make_tensor(DType::kFp32, {2, 3, 4}, 3);
  in["d.fp8"] = make_tensor(DType::kFp8E4m3, {4, 4}, 4);
  in["e.i32"] = make_tensor(DType::kInt32, {6}, 5);
  in["f.i64"] = make_tensor(DType::kInt64, {1, 2}, 6);
  in["g.empty"] = make_tensor(DType::kFp32, {0, 8}, 7);
  in["h.scalar"] = make_tensor(DType::kFp32, {}, 8);
  write_safetensors(path("m.safetensors"), in, {{"format", "pt"}, {"note", "quote \" and \\ and\nnewline"}});

  const Checkpoint c = Checkpoint::open(path("m.safetensors"));
  std::vector<std::string> want;
  for (const auto& kv : in) want.push_back(kv.first);
  EXPECT_EQ(c.keys(), want);
  for (const auto& kv : in) {
    SCOPED_TRACE(kv.first);
    EXPECT_TRUE(c.contains(kv.first));
    EXPECT_EQ(c.dtype_of(kv.first), kv.second.dtype);
    EXPECT_EQ(c.shape_of(kv.first), kv.second.shape);
    const HostTensor t = c.read(kv.first);
    EXPECT_EQ(t.dtype, kv.second.dtype);
    EXPECT_EQ(t.shape, kv.second.shape);
    EXPECT_EQ(t.data, kv.second.data);
  }
  EXPECT_FALSE(c.contains("nope"));
  const HostTensor t = c.read("c.f32");
  const TensorView v = t.view();
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.dtype, DType::kFp32);
  EXPECT_EQ(v.shape[2], 4);
  EXPECT_EQ(v.data, t.data.data());
  EXPECT_TRUE(v.is_contiguous());
}

TEST_F(CpuCheckpoint, HeaderIsAlignedAndHuggingFaceShaped) {
  write_safetensors(path("m.safetensors"), {{"x", make_tensor(DType::kBf16, {2, 3}, 1)}});
  std::ifstream f(path("m.safetensors"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + len) % 8, 0u);  // the data section starts 8-byte aligned
  const detail::JsonValue h = detail::parse_json(bytes.substr(8, len), "test");
  const detail::JsonValue* x = h.find("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->find("dtype")->string, "BF16");
  EXPECT_EQ(x->find("shape")->array.size(), 2u);
  EXPECT_EQ(x->find("data_offsets")->array[1].integer, 12);
  EXPECT_EQ(bytes.size(), 8 + len + 12);
}

TEST_F(CpuCheckpoint, OpensForeignHeaderWithUnreadDtypes) {
  // Hand-written like a Rust/Python writer would: other key order, a BOOL and an unknown dtype,
  // and metadata. Opening works; reading those tensors is kNotSupported.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"mask":{"dtype":"BOOL","shape":[4],"data_offsets":[8,12]},)"
      R"("w":{"shape":[2],"dtype":"F32","data_offsets":[0,8]},"odd":{"dtype":"Q4_K","shape":[3],"data_offsets":[12,15]}})";
  write_raw(path("m.safetensors"), header, 15);
  const Checkpoint c = Checkpoint::open(path("m.safetensors"));
  EXPECT_EQ(c.keys(), (std::vector<std::string>{"mask", "odd", "w"}));
  EXPECT_EQ(c.read("w").data.size(), 8u);
  EXPECT_EQ(c.shape_of("mask"), std::vector<std::int64_t>{4});
  expect_error([&] { c.read("mask"); }, Status::kNotSupported, {"'mask'", "dtype BOOL", "BF16, F16, F32, F8_E4M3, I32, I64"});
  expect_error([&] { c.dtype_of("odd"); }, Status::kNotSupported, {"'odd'", "dtype Q4_K"});
}

// ---------------------------------------------------------------- expert stacking

struct MoeDims {
  std::int64_t E = 3, N = 8, K = 16;
};

// Writes one layer's experts under `style` into `files` (expert e goes to files[e % files.size()],
// and its down_proj to the next file, so one expert spans shards) and returns the tensors.
std::map<std::string, HostTensor> expert_tensors(const std::string& prefix, ExpertKeyStyle style, const MoeDims& d,
                                                 DType dtype, bool block_scales) {
  std::map<std::string, HostTensor> t;
  const std::int64_t sn = (d.N + 127) / 128, sk = (d.K + 127) / 128;
  std::uint32_t seed = 100;
  for (std::int64_t e = 0; e < d.E; ++e) {
    const std::string base = prefix + (style == ExpertKeyStyle::kMixtral ? ".block_sparse_moe.experts." : ".mlp.experts.") +
                             std::to_string(e) + ".";
    const std::string g = base + (style == ExpertKeyStyle::kMixtral ? "w1" : "gate_proj");
    const std::string u = base + (style == ExpertKeyStyle::kMixtral ? "w3" : "up_proj");
    const std::string dn = base + (style == ExpertKeyStyle::kMixtral ? "w2" : "down_proj");
    t[g + ".weight"] = make_tensor(dtype, {d.N, d.K}, ++seed);
    t[u + ".weight"] = make_tensor(dtype, {d.N, d.K}, ++seed);
    t[dn + ".weight"] = make_tensor(dtype, {d.K, d.N}, ++seed);
    if (block_scales) {
      t[g + ".weight_scale_inv"] = make_tensor(DType::kFp32, {sn, sk}, ++seed);
      t[u + ".weight_scale_inv"] = make_tensor(DType::kFp32, {sn, sk}, ++seed);
      t[dn + ".weight_scale_inv"] = make_tensor(DType::kFp32, {sk, sn}, ++seed);
    }
  }
  // Non-expert neighbours, as in real checkpoints.
  t[prefix + (style == ExpertKeyStyle::kMixtral ? ".block_sparse_moe.gate.weight" : ".mlp.gate.weight")] =
      make_tensor(DType::kBf16, {d.E, d.K}, 7);
  t["model.embed_tokens.weight"] = make_tensor(DType::kBf16, {4, d.K}, 8);
  return t;
}

std::string key_of(const std::string& prefix, ExpertKeyStyle style, std::int64_t e, int which, const char* suffix) {
  static const char* mixtral[] = {"w1", "w3", "w2"};
  static const char* hf[] = {"gate_proj", "up_proj", "down_proj"};
  return prefix + (style == ExpertKeyStyle::kMixtral ? ".block_sparse_moe.experts." : ".mlp.experts.") + std::to_string(e) +
         "." + (style == ExpertKeyStyle::kMixtral ? mixtral[which] : hf[which]) + suffix;
}

// Every byte of the stacked layout matches the source tensors.
void expect_stacked(const StackedExperts& s, const std::map<std::string, HostTensor>& src, const std::string& prefix,
                    ExpertKeyStyle style, const MoeDims& d, bool block_scales) {
  EXPECT_EQ(s.num_experts, d.E);
  EXPECT_EQ(s.hidden_size, d.K);
  EXPECT_EQ(s.intermediate_size, d.N);
  EXPECT_EQ(s.w13.shape, (std::vector<std::int64_t>{d.E, 2 * d.N, d.K}));
  EXPECT_EQ(s.w2.shape, (std::vector<std::int64_t>{d.E, d.K, d.N}));
  for (std::int64_t e = 0; e < d.E; ++e) {
    expect_rows(s.w13, e, 0, src.at(key_of(prefix, style, e, 0, ".weight")));
    expect_rows(s.w13, e, d.N, src.at(key_of(prefix, style, e, 1, ".weight")));
    expect_rows(s.w2, e, 0, src.at(key_of(prefix, style, e, 2, ".weight")));
    if (block_scales) {
      const std::int64_t sn = (d.N + 127) / 128;
      expect_rows(s.w13_scale, e, 0, src.at(key_of(prefix, style, e, 0, ".weight_scale_inv")));
      expect_rows(s.w13_scale, e, sn, src.at(key_of(prefix, style, e, 1, ".weight_scale_inv")));
      expect_rows(s.w2_scale, e, 0, src.at(key_of(prefix, style, e, 2, ".weight_scale_inv")));
    }
  }
}

TEST_F(CpuCheckpoint, LoadsMixtralBf16SingleFile) {
  const MoeDims d;
  const auto src = expert_tensors("model.layers.1", ExpertKeyStyle::kMixtral, d, DType::kBf16, false);
  write_safetensors(path("model.safetensors"), src);
  for (const std::string& p : {path("model.safetensors"), dir_.string()}) {  // a file or its folder
    const Checkpoint c = Checkpoint::open(p);
    const StackedExperts s = load_experts(c, 1, ExpertKeyStyle::kMixtral, d.E);
    EXPECT_EQ(s.scheme, Scheme::kBf16);
    EXPECT_EQ(s.w13.dtype, DType::kBf16);
    EXPECT_TRUE(s.w13_scale.data.empty());
    expect_stacked(s, src, "model.layers.1", ExpertKeyStyle::kMixtral, d, false);
    const ExpertWeights w = s.weights();
    EXPECT_EQ(w.w13.shape[1], 2 * d.N);
    EXPECT_FALSE(w.w13_scale.present());
  }
}

TEST_F(CpuCheckpoint, LoadsQwen3Sharded) {
  const MoeDims d{4, 8, 24};
  const auto src = expert_tensors("model.layers.0", ExpertKeyStyle::kGateUpDown, d, DType::kBf16, false);
  // Two shards; each expert's down_proj lives in the other shard than its gate/up.
  std::map<std::string, HostTensor> shard[2];
  std::string weight_map;
  int i = 0;
  for (const auto& kv : src) {
    const int s = kv.first.find("down_proj") != std::string::npos ? (i + 1) % 2 : i % 2;
    ++i;
    shard[s][kv.first] = kv.second;
    weight_map += std::string(weight_map.empty() ? "" : ",") + "\"" + kv.first + "\":\"model-0000" +
                  std::to_string(s + 1) + "-of-00002.safetensors\"";
  }
  write_safetensors(path("model-00001-of-00002.safetensors"), shard[0]);
  write_safetensors(path("model-00002-of-00002.safetensors"), shard[1]);
  write_text(path("model.safetensors.index.json"),
             "{\"metadata\": {\"total_size\": 12345}, \"weight_map\": {" + weight_map + "}}\n");
  for (const std::string& p : {path("model.safetensors.index.json"), dir_.string()}) {
    const Checkpoint c = Checkpoint::open(p);
    EXPECT_EQ(c.keys().size(), src.size());
    const StackedExperts s = load_experts(c, 0, ExpertKeyStyle::kGateUpDown, d.E);
    expect_stacked(s, src, "model.layers.0", ExpertKeyStyle::kGateUpDown, d, false);
  }
}

TEST_F(CpuCheckpoint, LoadsDeepSeekFp8BlockScales) {
  const MoeDims d{3, 256, 200};  // K % 128 != 0: ceil'd scale blocks
  const auto src = expert_tensors("model.layers.5", ExpertKeyStyle::kGateUpDown, d, DType::kFp8E4m3, true);
  write_safetensors(path("model.safetensors"), src);
  const Checkpoint c = Checkpoint::open(path("model.safetensors"));
  const StackedExperts s = load_experts(c, 5, ExpertKeyStyle::kGateUpDown, d.E);
  EXPECT_EQ(s.scheme, Scheme::kFp8Block128);
  EXPECT_EQ(s.w13.dtype, DType::kFp8E4m3);
  EXPECT_EQ(s.w13_scale.dtype, DType::kFp32);
  EXPECT_EQ(s.w13_scale.shape, (std::vector<std::int64_t>{3, 4, 2}));
  EXPECT_EQ(s.w2_scale.shape, (std::vector<std::int64_t>{3, 2, 2}));
  expect_stacked(s, src, "model.layers.5", ExpertKeyStyle::kGateUpDown, d, true);
  const ExpertWeights w = s.weights();
  ASSERT_TRUE(w.w13_scale.present());
  EXPECT_EQ(w.w13_scale.shape[1], 4);
  // The stacked weights pass fused_experts' validation for their scheme.
  FusedExpertsArgs a;
  a.weights = w;
  a.scheme = s.scheme;
  std::vector<std::uint16_t> hidden(2 * 200), out(2 * 200);
  std::vector<std::int32_t> ids(2);
  std::vector<float> wts(2);
  a.hidden = TensorView::contiguous(hidden.data(), DType::kBf16, {2, 200});
  a.out = TensorView::contiguous(out.data(), DType::kBf16, {2, 200});
  a.topk_ids = TensorView::contiguous(ids.data(), DType::kInt32, {2, 1});
  a.topk_weights = TensorView::contiguous(wts.data(), DType::kFp32, {2, 1});
  EXPECT_EQ(describe(a).intermediate_size, 256);
}

TEST_F(CpuCheckpoint, CustomPrefix) {
  const MoeDims d{2, 8, 16};
  const auto src = expert_tensors("model.language_model.layers.3", ExpertKeyStyle::kGateUpDown, d, DType::kFp16, false);
  write_safetensors(path("m.safetensors"), src);
  const StackedExperts s = load_experts(Checkpoint::open(path("m.safetensors")), 3, ExpertKeyStyle::kGateUpDown, d.E,
                                        "model.language_model.layers.3");
  EXPECT_EQ(s.w13.dtype, DType::kFp16);
  expect_stacked(s, src, "model.language_model.layers.3", ExpertKeyStyle::kGateUpDown, d, false);
}

// ---------------------------------------------------------------- errors

TEST_F(CpuCheckpoint, RejectsFp8BlockScalesWithNNotMultipleOf128) {
  const MoeDims d{2, 96, 128};
  write_safetensors(path("m.safetensors"), expert_tensors("model.layers.0", ExpertKeyStyle::kGateUpDown, d, DType::kFp8E4m3, true));
  const Checkpoint c = Checkpoint::open(path("m.safetensors"));
  expect_error([&] { load_experts(c, 0, ExpertKeyStyle::kGateUpDown, d.E); }, Status::kNotSupported,
               {"N=96", "not a multiple of 128", "weight_scale_inv"});
}

TEST_F(CpuCheckpoint, RejectsMissingFile) {
  expect_error([&] { Checkpoint::open(path("nope.safetensors")); }, Status::kInvalidArgument,
               {"nope.safetensors", "does not exist"});
  expect_error([&] { Checkpoint::open(dir_.string()); }, Status::kInvalidArgument,
               {dir_.string(), "no model.safetensors.index.json"});
}

TEST_F(CpuCheckpoint, RejectsMissingKey) {
  const MoeDims d;
  auto src = expert_tensors("model.layers.0", ExpertKeyStyle::kMixtral, d, DType::kBf16, false);
  src.erase(key_of("model.layers.0", ExpertKeyStyle::kMixtral, 2, 1, ".weight"));
  write_safetensors(path("m.safetensors"), src);
  const Checkpoint c = Checkpoint::open(path("m.safetensors"));
  expect_error([&] { c.read("model.layers.0.nothing"); }, Status::kInvalidArgument,
               {"missing key 'model.layers.0.nothing'", path("m.safetensors")});
  expect_error([&] { load_experts(c, 0, ExpertKeyStyle::kMixtral, d.E); }, Status::kInvalidArgument,
               {"missing key 'model.layers.0.block_sparse_moe.experts.2.w3.weight'", path("m.safetensors")});
  // More experts than the checkpoint holds.
  src = expert_tensors("model.layers.0", ExpertKeyStyle::kMixtral, d, DType::kBf16, false);
  write_safetensors(path("full.safetensors"), src);
  expect_error([&] { load_experts(Checkpoint::open(path("full.safetensors")), 0, ExpertKeyStyle::kMixtral, 4); },
               Status::kInvalidArgument, {"experts.3.w1.weight"});
}

TEST_F(CpuCheckpoint, HintsAtTheOtherKeyStyle) {
  const MoeDims d;
  write_safetensors(path("m.safetensors"), expert_tensors("model.layers.0", ExpertKeyStyle::kGateUpDown, d, DType::kBf16, false));
  expect_error([&] { load_experts(Checkpoint::open(path("m.safetensors")), 0, ExpertKeyStyle::kMixtral, d.E); },
               Status::kInvalidArgument, {"missing key 'model.layers.0.block_sparse_moe.experts.0.w1.weight'", "kGateUpDown"});
}

TEST_F(CpuCheckpoint, RejectsWrongExpertShape) {
  const MoeDims d;
  auto src = expert_tensors("model.layers.0", ExpertKeyStyle::kGateUpDown, d, DType::kBf16, false);
  const std::string bad = key_of("model.layers.0", ExpertKeyStyle::kGateUpDown, 1, 1, ".weight");
  src[bad] = make_tensor(DType::kBf16, {8, 17}, 3);
  write_safetensors(path("m.safetensors"), src);
  expect_error([&] { load_experts(Checkpoint::open(path("m.safetensors")), 0, ExpertKeyStyle::kGateUpDown, d.E); },
               Status::kInvalidArgument, {"'" + bad + "' has shape [8, 17], expected [N=8, K=16]", "gate_proj.weight' [8, 16]"});
  src = expert_tensors("model.layers.0", ExpertKeyStyle::kGateUpDown, d, DType::kBf16, false);
  const std::string down = key_of("model.layers.0", ExpertKeyStyle::kGateUpDown, 2, 2, ".weight");
  src[down] = make_tensor(DType::kBf16, {8, 16}, 3);  // transposed: [N, K] instead of [K, N]
  write_safetensors(path("m.safetensors"), src);
  expect_error([&] { load_experts(Checkpoint::open(path("m.safetensors")), 0, ExpertKeyStyle::kGateUpDown, d.E); },
               Status::kInvalidArgument, {"'" + down + "' has shape [8, 16], expected [K=16, N=8]"});
  src = expert_tensors("model.layers.0", ExpertKeyStyle::kGateUpDown, d, DType::kBf16, false);
  src[down] = make_tensor(DType::kFp16, {16, 8}, 3);
  write_safetensors(path("m.safetensors"), src);
  expect_error([&] { load_experts(Checkpoint::open(path("m.safetensors")), 0, ExpertKeyStyle::kGateUpDown, d.E); },
               Status::kInvalidArgument, {"'" + down + "' has dtype fp16, expected bf16"});
}

TEST_F(CpuCheckpoint, RejectsWrongScaleShape) {
  const MoeDims d{2, 128, 256};
  auto src = expert_tensors("model.layers.0", ExpertKeyStyle::kGateUpDown, d, DType::kFp8E4m3, true);
  const std::string bad = key_of("model.layers.0", ExpertKeyStyle::kGateUpDown, 1, 2, ".weight_scale_inv");
  src[bad] = make_tensor(DType::kFp32, {1, 2}, 3);
  write_safetensors(path("m.safetensors"), src);
  expect_error([&] { load_experts(Checkpoint::open(path("m.safetensors")), 0, ExpertKeyStyle::kGateUpDown, d.E); },
               Status::kInvalidArgument, {"'" + bad + "' has shape [1, 2], expected [ceil(K/128)=2, ceil(N/128)=1]"});
}

TEST_F(CpuCheckpoint, RejectsTruncatedFile) {
  write_safetensors(path("m.safetensors"), {{"x", make_tensor(DType::kFp32, {64}, 1)}});
  fs::resize_file(path("m.safetensors"), fs::file_size(path("m.safetensors")) - 10);
  expect_error([&] { Checkpoint::open(path("m.safetensors")); }, Status::kInvalidArgument,
               {path("m.safetensors"), "truncated", "'x'", "data_offsets [0, 256]", "246 bytes"});
  write_raw(path("tiny.safetensors"), "", 0);
  fs::resize_file(path("tiny.safetensors"), 5);
  expect_error([&] { Checkpoint::open(path("tiny.safetensors")); }, Status::kInvalidArgument, {"5 bytes", "too small"});
}

TEST_F(CpuCheckpoint, RejectsBadHeader) {
  write_raw(path("len.safetensors"), "{}", 0, 1000);
  expect_error([&] { Checkpoint::open(path("len.safetensors")); }, Status::kInvalidArgument,
               {path("len.safetensors"), "header length 1000 is larger than the file (10 bytes)"});
  write_raw(path("json.safetensors"), R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})", 4);
  expect_error([&] { Checkpoint::open(path("json.safetensors")); }, Status::kInvalidArgument,
               {path("json.safetensors"), "invalid JSON at byte"});
  write_raw(path("arr.safetensors"), "[1, 2]", 0);
  expect_error([&] { Checkpoint::open(path("arr.safetensors")); }, Status::kInvalidArgument, {"not an object"});
  write_raw(path("fields.safetensors"), R"({"x": {"dtype": "F32", "shape": [1]}})", 4);
  expect_error([&] { Checkpoint::open(path("fields.safetensors")); }, Status::kInvalidArgument, {"'x'", "data_offsets"});
  write_raw(path("neg.safetensors"), R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4);
  expect_error([&] { Checkpoint::open(path("neg.safetensors")); }, Status::kInvalidArgument, {"'x'", "non-negative integer"});
}

TEST_F(CpuCheckpoint, RejectsOffsetsNotMatchingShape) {
  write_raw(path("m.safetensors"), R"({"x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 16);
  expect_error([&] { Checkpoint::open(path("m.safetensors")); }, Status::kInvalidArgument,
               {"'x'", "data_offsets [0, 12] (12 bytes)", "F32", "[2, 2]", "need 16 bytes"});
  write_raw(path("rev.safetensors"), R"({"x": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 16);
  expect_error([&] { Checkpoint::open(path("rev.safetensors")); }, Status::kInvalidArgument, {"'x'", "begin > end"});
}

TEST_F(CpuCheckpoint, RejectsUnsupportedDtype) {
  write_raw(path("m.safetensors"), R"({"x": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", 16);
  const Checkpoint c = Checkpoint::open(path("m.safetensors"));
  expect_error([&] { c.read("x"); }, Status::kNotSupported, {"'x'", path("m.safetensors"), "dtype F64"});
  // F32 expert weights: valid file, but load_experts reads only bf16/fp16/fp8 weights.
  const MoeDims d;
  write_safetensors(path("f32.safetensors"), expert_tensors("model.layers.0", ExpertKeyStyle::kMixtral, d, DType::kFp32, false));
  expect_error([&] { load_experts(Checkpoint::open(path("f32.safetensors")), 0, ExpertKeyStyle::kMixtral, d.E); },
               Status::kNotSupported, {"experts.0.w1.weight", "fp32"});
}

TEST_F(CpuCheckpoint, RejectsBadIndex) {
  write_safetensors(path("a.safetensors"), {{"x", make_tensor(DType::kFp32, {2}, 1)}});
  write_text(path("missing.json"), R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})");
  expect_error([&] { Checkpoint::open(path("missing.json")); }, Status::kInvalidArgument,
               {"shard '" + path("b.safetensors") + "'", "missing.json", "does not exist"});
  write_text(path("wrongkey.json"), R"({"weight_map": {"z": "a.safetensors"}})");
  expect_error([&] { Checkpoint::open(path("wrongkey.json")); }, Status::kInvalidArgument,
               {"maps tensor 'z'", path("a.safetensors"), "no such tensor"});
  write_text(path("nomap.json"), R"({"metadata": {}})");
  expect_error([&] { Checkpoint::open(path("nomap.json")); }, Status::kInvalidArgument, {"nomap.json", "weight_map"});
  write_text(path("broken.json"), R"({"weight_map": {"x": )");
  expect_error([&] { Checkpoint::open(path("broken.json")); }, Status::kInvalidArgument, {"broken.json", "invalid JSON"});
}

TEST_F(CpuCheckpoint, RejectsDuplicateTensorAcrossFiles) {
  write_safetensors(path("a.safetensors"), {{"x", make_tensor(DType::kFp32, {2}, 1)}});
  write_safetensors(path("b.safetensors"), {{"x", make_tensor(DType::kFp32, {2}, 2)}});
  // A folder without index or model.safetensors: all its .safetensors files.
  expect_error([&] { Checkpoint::open(dir_.string()); }, Status::kInvalidArgument, {"'x' appears twice"});
}

TEST_F(CpuCheckpoint, WriterRejectsInconsistentTensor) {
  HostTensor t = make_tensor(DType::kBf16, {2, 3}, 1);
  t.data.pop_back();
  expect_error([&] { write_safetensors(path("m.safetensors"), {{"t", t}}); }, Status::kInvalidArgument,
               {"'t'", "11 bytes", "[2, 3]", "needs 12"});
}

// ---------------------------------------------------------------- the JSON reader

TEST(CpuJson, ParsesValues) {
  const detail::JsonValue v = detail::parse_json(
      R"( {"big": 9007199254740993, "neg": -5, "f": 1.5e2, "s": "a\"b\\c\/\n\u00e9\ud83d\ude00",
           "arr": [true, false, null, []], "obj": {}} )",
      "t");
  ASSERT_TRUE(v.is_object());
  EXPECT_TRUE(v.find("big")->is_int);
  EXPECT_EQ(v.find("big")->integer, 9007199254740993LL);  // exact past 2^53
  EXPECT_EQ(v.find("neg")->integer, -5);
  EXPECT_FALSE(v.find("f")->is_int);
  EXPECT_EQ(v.find("f")->number, 150.0);
  EXPECT_EQ(v.find("s")->string, "a\"b\\c/\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.find("arr")->array.size(), 4u);
  EXPECT_TRUE(v.find("arr")->array[0].boolean);
  EXPECT_EQ(v.find("arr")->array[2].type, detail::JsonValue::Type::kNull);
  EXPECT_TRUE(v.find("obj")->is_object());
  EXPECT_EQ(v.find("missing"), nullptr);
  const std::string q = detail::json_quote("x\"y\\z\n\x01");
  EXPECT_EQ(detail::parse_json(q, "t").string, "x\"y\\z\n\x01");
}

TEST(CpuJson, RejectsMalformed) {
  for (const char* bad : {"", "{", "{\"a\" 1}", "{\"a\": 1,}", "[1 2]", "01", "1.", "-", "\"abc", "\"\\x\"",
                          "\"\\ud800\"", "tru", "{} x", "{\"a\": \"\x01\"}"}) {
    expect_error([&] { detail::parse_json(bad, "hdr"); }, Status::kInvalidArgument, {"hdr: invalid JSON at byte"});
  }
  const std::string deep(100000, '[');
  expect_error([&] { detail::parse_json(deep, "hdr"); }, Status::kInvalidArgument, {"nesting deeper"});
}

}  // namespace
}  // namespace moekit

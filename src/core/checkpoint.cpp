// safetensors checkpoints: header parsing (single file, index.json shards or a folder), on-demand
// tensor reads, a writer for synthetic test checkpoints, and stacking one layer's Hugging Face
// expert tensors into moekit's w13 [E, 2N, K] / w2 [E, K, N] layout.
#include "moekit/checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "json.hpp"
#include "moekit/error.hpp"

namespace moekit {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(Status::kInvalidArgument, message); }
[[noreturn]] void unsupported(const std::string& message) { throw Error(Status::kNotSupported, message); }

// safetensors dtype names. Sizes of the ones moekit does not read are still known, so a header
// that holds them (e.g. a BOOL mask) opens and its offsets are checked; reading them is what fails.
struct DtypeInfo {
  const char* name;
  std::size_t size;
  bool readable;
  DType dtype;
};
constexpr DtypeInfo kDtypes[] = {
    {"BF16", 2, true, DType::kBf16},       {"F16", 2, true, DType::kFp16},
    {"F32", 4, true, DType::kFp32},        {"F8_E4M3", 1, true, DType::kFp8E4m3},
    {"I32", 4, true, DType::kInt32},       {"I64", 8, true, DType::kInt64},
    {"F64", 8, false, DType::kFp32},       {"F8_E5M2", 1, false, DType::kFp32},
    {"BOOL", 1, false, DType::kFp32},      {"U8", 1, false, DType::kFp32},
    {"I8", 1, false, DType::kFp32},        {"I16", 2, false, DType::kFp32},
    {"U16", 2, false, DType::kFp32},       {"U32", 4, false, DType::kFp32},
    {"U64", 8, false, DType::kFp32},
};
constexpr const char* kReadable = "BF16, F16, F32, F8_E4M3, I32, I64";

const DtypeInfo* find_dtype(const std::string& name) {
  for (const DtypeInfo& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const char* safetensors_name(DType d) {
  for (const DtypeInfo& i : kDtypes)
    if (i.readable && i.dtype == d) return i.name;
  return nullptr;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// numel, or -1 on int64 overflow.
std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) invalid("cannot open '" + path + "'");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) invalid("cannot read '" + path + "'");
  return text;
}

}  // namespace

namespace detail {
// One tensor of the header: where its bytes are and what they hold.
struct TensorEntry {
  std::string dtype_name;  // as in the header; resolved on access so unread dtypes do not fail open()
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // absolute file offsets
  std::size_t file = 0;              // index into Impl::files
};
}  // namespace detail
using detail::TensorEntry;

struct Checkpoint::Impl {
  std::string path;                // what open() was given
  std::vector<std::string> files;  // the safetensors files
  std::map<std::string, TensorEntry> tensors;

  const TensorEntry& entry(const std::string& key) const {
    auto it = tensors.find(key);
    if (it == tensors.end())
      invalid("missing key '" + key + "': no tensor of that name in checkpoint '" + path + "' (" +
              std::to_string(tensors.size()) + " tensors in " + std::to_string(files.size()) + " file(s))");
    return it->second;
  }

  const DtypeInfo& readable_dtype(const std::string& key, const TensorEntry& e) const {
    const DtypeInfo* d = find_dtype(e.dtype_name);
    if (d == nullptr || !d->readable)
      unsupported("tensor '" + key + "' in '" + files[e.file] + "' has dtype " + e.dtype_name +
                  ", which moekit does not read (supported: " + kReadable + ")");
    return *d;
  }

  // Parses one file's header and adds its tensors; returns their names.
  std::vector<std::string> add_file(const std::string& file) {
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) invalid("checkpoint file '" + file + "' does not exist or is not a file");
    const std::uint64_t size = fs::file_size(file, ec);
    if (ec) invalid("cannot stat '" + file + "': " + ec.message());
    if (size < 8)
      invalid("'" + file + "' is " + std::to_string(size) + " bytes, too small for a safetensors file (8-byte header length)");
    std::ifstream f(file, std::ios::binary);
    if (!f) invalid("cannot open '" + file + "'");
    unsigned char len_bytes[8];
    f.read(reinterpret_cast<char*>(len_bytes), 8);
    std::uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];  // little-endian
    if (header_len > size - 8)
      invalid("'" + file + "' has a bad header: header length " + std::to_string(header_len) +
              " is larger than the file (" + std::to_string(size) + " bytes)");
    std::string header(static_cast<std::size_t>(header_len), '\0');
    f.read(header.data(), static_cast<std::streamsize>(header_len));
    if (!f) invalid("cannot read the header of '" + file + "'");
    const std::string what = "'" + file + "' has a bad header";
    const detail::JsonValue root = detail::parse_json(header, what);
    if (!root.is_object()) invalid(what + ": the JSON header is not an object");

    const std::uint64_t data_start = 8 + header_len;
    const std::uint64_t data_size = size - data_start;
    const std::size_t file_index = files.size();
    files.push_back(file);
    std::vector<std::string> names;
    for (const auto& kv : root.object) {
      const std::string& key = kv.first;
      if (key == "__metadata__") continue;
      const detail::JsonValue& t = kv.second;
      const std::string tw = what + ": tensor '" + key + "'";
      if (!t.is_object()) invalid(tw + " is not an object");
      const detail::JsonValue* dt = t.find("dtype");
      const detail::JsonValue* sh = t.find("shape");
      const detail::JsonValue* off = t.find("data_offsets");
      if (dt == nullptr || !dt->is_string()) invalid(tw + " has no \"dtype\" string");
      if (sh == nullptr || !sh->is_array()) invalid(tw + " has no \"shape\" array");
      if (off == nullptr || !off->is_array() || off->array.size() != 2)
        invalid(tw + " has no \"data_offsets\" [begin, end] pair");
      TensorEntry e;
      e.dtype_name = dt->string;
      e.file = file_index;
      for (const detail::JsonValue& d : sh->array) {
        if (!d.is_int || d.integer < 0) invalid(tw + " has a shape entry that is not a non-negative integer");
        e.shape.push_back(d.integer);
      }
      for (const detail::JsonValue& o : off->array)
        if (!o.is_int || o.integer < 0) invalid(tw + " has a data_offsets entry that is not a non-negative integer");
      const std::uint64_t b = static_cast<std::uint64_t>(off->array[0].integer);
      const std::uint64_t en = static_cast<std::uint64_t>(off->array[1].integer);
      if (b > en)
        invalid(tw + " has data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + "] with begin > end");
      if (en > data_size)
        invalid("'" + file + "' is truncated: tensor '" + key + "' has data_offsets [" + std::to_string(b) + ", " +
                std::to_string(en) + "] but the data section holds " + std::to_string(data_size) + " bytes");
      const DtypeInfo* info = find_dtype(e.dtype_name);
      const std::int64_t n = numel_of(e.shape);
      if (n < 0) invalid(tw + " has shape " + shape_str(e.shape) + " with too many elements");
      // Unknown dtype names have no size to check; reading such a tensor fails with kNotSupported.
      if (info != nullptr) {
        const std::uint64_t want = static_cast<std::uint64_t>(n) * info->size;
        if (en - b != want)
          invalid(tw + " has data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + "] (" +
                  std::to_string(en - b) + " bytes) but dtype " + e.dtype_name + " and shape " + shape_str(e.shape) +
                  " need " + std::to_string(want) + " bytes");
      }
      e.begin = data_start + b;
      e.end = data_start + en;
      auto [it, inserted] = tensors.emplace(key, std::move(e));
      if (!inserted)
        invalid("tensor '" + key + "' appears twice: in '" + files[it->second.file] + "' and in '" + file + "'");
      names.push_back(key);
    }
    return names;
  }

  void add_index(const std::string& index) {
    const detail::JsonValue root = detail::parse_json(read_text_file(index), "index '" + index + "'");
    const detail::JsonValue* map = root.find("weight_map");
    if (map == nullptr || !map->is_object())
      invalid("index '" + index + "' has no \"weight_map\" object (expected {\"weight_map\": {tensor: file}})");
    const fs::path dir = fs::path(index).parent_path();
    // Open each shard once, in order of first mention, then check that it holds what the index says.
    std::map<std::string, std::vector<std::string>> shard_keys;
    std::vector<std::string> order;
    for (const auto& kv : map->object) {
      if (!kv.second.is_string())
        invalid("index '" + index + "': weight_map entry '" + kv.first + "' is not a file name");
      if (shard_keys.find(kv.second.string) == shard_keys.end()) order.push_back(kv.second.string);
      shard_keys[kv.second.string].push_back(kv.first);
    }
    for (const std::string& shard : order) {
      const std::string file = (dir / shard).string();
      std::error_code ec;
      if (!fs::is_regular_file(file, ec))
        invalid("shard '" + file + "' named by index '" + index + "' does not exist");
      add_file(file);
      for (const std::string& key : shard_keys[shard]) {
        auto it = tensors.find(key);
        if (it == tensors.end() || files[it->second.file] != file)
          invalid("index '" + index + "' maps tensor '" + key + "' to '" + file + "', but that file has no such tensor");
      }
    }
  }
};

TensorView HostTensor::view() const {
  return TensorView::contiguous(data.empty() ? nullptr : data.data(), dtype, shape.data(), static_cast<int>(shape.size()));
}

Checkpoint Checkpoint::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) invalid("checkpoint path '" + path + "' does not exist");
  if (fs::is_directory(p, ec)) {
    // A Hugging Face model folder: the index when sharded, else model.safetensors, else every
    // *.safetensors file in it.
    if (fs::is_regular_file(p / "model.safetensors.index.json", ec)) {
      impl->add_index((p / "model.safetensors.index.json").string());
    } else if (fs::is_regular_file(p / "model.safetensors", ec)) {
      impl->add_file((p / "model.safetensors").string());
    } else {
      std::vector<std::string> found;
      for (const auto& de : fs::directory_iterator(p, ec))
        if (de.is_regular_file() && de.path().extension() == ".safetensors") found.push_back(de.path().string());
      if (found.empty())
        invalid("checkpoint folder '" + path + "' holds no model.safetensors.index.json and no .safetensors file");
      std::sort(found.begin(), found.end());
      for (const std::string& f : found) impl->add_file(f);
    }
  } else if (p.extension() == ".json") {
    impl->add_index(path);
  } else {
    impl->add_file(path);
  }
  Checkpoint c;
  c.impl_ = std::move(impl);
  return c;
}

bool Checkpoint::contains(const std::string& key) const { return impl_ && impl_->tensors.count(key) != 0; }

std::vector<std::string> Checkpoint::keys() const {
  std::vector<std::string> k;
  if (!impl_) return k;
  k.reserve(impl_->tensors.size());
  for (const auto& kv : impl_->tensors) k.push_back(kv.first);  // std::map: already sorted
  return k;
}

DType Checkpoint::dtype_of(const std::string& key) const {
  if (!impl_) invalid("Checkpoint is empty: make one with Checkpoint::open");
  const TensorEntry& e = impl_->entry(key);
  return impl_->readable_dtype(key, e).dtype;
}

std::vector<std::int64_t> Checkpoint::shape_of(const std::string& key) const {
  if (!impl_) invalid("Checkpoint is empty: make one with Checkpoint::open");
  return impl_->entry(key).shape;
}

HostTensor Checkpoint::read(const std::string& key) const {
  if (!impl_) invalid("Checkpoint is empty: make one with Checkpoint::open");
  const TensorEntry& e = impl_->entry(key);
  HostTensor t;
  t.dtype = impl_->readable_dtype(key, e).dtype;
  t.shape = e.shape;
  t.data.resize(static_cast<std::size_t>(e.end - e.begin));
  const std::string& file = impl_->files[e.file];
  std::ifstream f(file, std::ios::binary);
  if (!f) invalid("cannot open '" + file + "' to read tensor '" + key + "'");
  f.seekg(static_cast<std::streamoff>(e.begin));
  f.read(reinterpret_cast<char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
  // open() checked the offsets against the file size; a short read means the file shrank since.
  if (!f) invalid("'" + file + "' is truncated: could not read the " + std::to_string(t.data.size()) + " bytes of tensor '" + key + "'");
  return t;
}

void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& kv : metadata) {
      header += (first ? "" : ",") + detail::json_quote(kv.first) + ":" + detail::json_quote(kv.second);
      first = false;
    }
    header += "}";
  }
  std::uint64_t offset = 0;
  for (const auto& kv : tensors) {
    const HostTensor& t = kv.second;
    const char* name = safetensors_name(t.dtype);
    if (name == nullptr)
      invalid("write_safetensors: tensor '" + kv.first + "' has dtype " + dtype_name(t.dtype) + " with no safetensors name");
    const std::int64_t n = numel_of(t.shape);
    for (std::int64_t d : t.shape)
      if (d < 0) invalid("write_safetensors: tensor '" + kv.first + "' has a negative dim in " + shape_str(t.shape));
    if (n < 0 || static_cast<std::uint64_t>(n) * dtype_size(t.dtype) != t.data.size())
      invalid("write_safetensors: tensor '" + kv.first + "' has " + std::to_string(t.data.size()) + " bytes but shape " +
              shape_str(t.shape) + " of " + dtype_name(t.dtype) + " needs " +
              std::to_string(static_cast<std::uint64_t>(n) * dtype_size(t.dtype)));
    std::string shape = "[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    shape += "]";
    header += std::string(first ? "" : ",") + detail::json_quote(kv.first) + ":{\"dtype\":\"" + name +
              "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.data.size()) + "]}";
    first = false;
    offset += t.data.size();
  }
  header += "}";
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  while ((8 + header.size()) % 8 != 0) header += ' ';

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) invalid("write_safetensors: cannot create '" + path + "'");
  unsigned char len_bytes[8];
  std::uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(len >> (8 * i));
  f.write(reinterpret_cast<const char*>(len_bytes), 8);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& kv : tensors)
    f.write(reinterpret_cast<const char*>(kv.second.data.data()), static_cast<std::streamsize>(kv.second.data.size()));
  f.flush();
  if (!f) invalid("write_safetensors: writing '" + path + "' failed");
}

ExpertWeights StackedExperts::weights() const {
  ExpertWeights w;
  w.w13 = w13.view();
  w.w2 = w2.view();
  if (!w13_scale.data.empty()) w.w13_scale = w13_scale.view();
  if (!w2_scale.data.empty()) w.w2_scale = w2_scale.view();
  return w;
}

namespace {

struct ExpertKeys {
  std::string gate, up, down;
};

ExpertKeys expert_keys(const std::string& prefix, ExpertKeyStyle style, std::int64_t e) {
  const std::string base = prefix + (style == ExpertKeyStyle::kMixtral ? ".block_sparse_moe.experts." : ".mlp.experts.") +
                           std::to_string(e) + ".";
  if (style == ExpertKeyStyle::kMixtral) return {base + "w1", base + "w3", base + "w2"};
  return {base + "gate_proj", base + "up_proj", base + "down_proj"};
}

// The checkpoint's tensor `key` with the expected dtype and shape, or an error naming both.
// `labels` name the dims ("N", "K", ...); `source` is the tensor the sizes were taken from.
HostTensor read_checked(const Checkpoint& ckpt, const std::string& key, DType dtype, const std::vector<std::int64_t>& shape,
                        const std::vector<const char*>& labels, const std::string& source) {
  const std::vector<std::int64_t> got = ckpt.shape_of(key);
  if (got != shape) {
    std::string want = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
      want += (i ? ", " : "") + std::string(labels[i]) + "=" + std::to_string(shape[i]);
    invalid("tensor '" + key + "' has shape " + shape_str(got) + ", expected " + want + "] (N, K from " + source + ")");
  }
  if (ckpt.dtype_of(key) != dtype)
    invalid(std::string("tensor '") + key + "' has dtype " + dtype_name(ckpt.dtype_of(key)) + ", expected " +
            dtype_name(dtype) + " (expert tensors of one kind share one dtype; weight_scale_inv is F32)");
  return ckpt.read(key);
}

}  // namespace

StackedExperts load_experts(const Checkpoint& ckpt, int layer, ExpertKeyStyle style, std::int64_t num_experts,
                            const std::string& prefix_in) {
  if (style != ExpertKeyStyle::kMixtral && style != ExpertKeyStyle::kGateUpDown)
    invalid("unknown expert key style " + std::to_string(static_cast<int>(style)));
  if (num_experts < 1) invalid("load_experts: num_experts must be >= 1, got " + std::to_string(num_experts));
  const std::string prefix = prefix_in.empty() ? "model.layers." + std::to_string(layer) : prefix_in;

  const ExpertKeys k0 = expert_keys(prefix, style, 0);
  if (!ckpt.contains(k0.gate + ".weight")) {
    // The usual mistake is the wrong key style; say so when the other one is there.
    const ExpertKeyStyle other = style == ExpertKeyStyle::kMixtral ? ExpertKeyStyle::kGateUpDown : ExpertKeyStyle::kMixtral;
    const std::string hint = ckpt.contains(expert_keys(prefix, other, 0).gate + ".weight")
                                 ? std::string(" (the checkpoint has ") + expert_keys(prefix, other, 0).gate +
                                       ".weight: use ExpertKeyStyle::" +
                                       (other == ExpertKeyStyle::kMixtral ? "kMixtral" : "kGateUpDown") + ")"
                                 : "";
    try {
      ckpt.shape_of(k0.gate + ".weight");  // the missing-key error, naming the checkpoint
    } catch (const Error& e) {
      invalid(e.what() + hint);
    }
  }
  const std::vector<std::int64_t> gate_shape = ckpt.shape_of(k0.gate + ".weight");
  if (gate_shape.size() != 2)
    invalid("tensor '" + k0.gate + ".weight' has shape " + shape_str(gate_shape) + ", expected [N, K]");
  const std::int64_t N = gate_shape[0], K = gate_shape[1];
  const DType wdtype = ckpt.dtype_of(k0.gate + ".weight");
  if (wdtype != DType::kBf16 && wdtype != DType::kFp16 && wdtype != DType::kFp8E4m3)
    unsupported(std::string("tensor '") + k0.gate + ".weight' has dtype " + dtype_name(wdtype) +
                ": load_experts reads BF16, F16 or F8_E4M3 expert weights");
  const bool block_fp8 = ckpt.contains(k0.gate + ".weight_scale_inv");
  if (wdtype == DType::kFp8E4m3 && !block_fp8)
    unsupported("tensor '" + k0.gate + ".weight' is F8_E4M3 but has no weight_scale_inv: only block-128 fp8 " +
                "checkpoints (DeepSeek-V3 style) are read");
  if (block_fp8 && wdtype != DType::kFp8E4m3)
    invalid(std::string("tensor '") + k0.gate + ".weight_scale_inv' is present but the weight has dtype " +
            dtype_name(wdtype) + ", expected F8_E4M3");
  const std::int64_t bq = kBlockQuant;
  if (block_fp8 && N % bq != 0)
    unsupported("layer " + prefix + ": N=" + std::to_string(N) + " is not a multiple of 128, so the gate and up " +
                "weight_scale_inv blocks cannot be stacked into one [ceil(2N/128), ceil(K/128)] grid (the block " +
                "holding gate row N-1 would also hold up rows)");

  const std::size_t es = dtype_size(wdtype);
  const std::int64_t E = num_experts;
  StackedExperts out;
  out.num_experts = E;
  out.hidden_size = K;
  out.intermediate_size = N;
  out.scheme = block_fp8 ? Scheme::kFp8Block128 : Scheme::kBf16;
  out.w13.dtype = out.w2.dtype = wdtype;
  out.w13.shape = {E, 2 * N, K};
  out.w2.shape = {E, K, N};
  const std::size_t gate_bytes = static_cast<std::size_t>(N * K) * es;
  out.w13.data.resize(static_cast<std::size_t>(E) * 2 * gate_bytes);
  out.w2.data.resize(static_cast<std::size_t>(E) * gate_bytes);
  const std::int64_t sn = (N + bq - 1) / bq, sk = (K + bq - 1) / bq;
  if (block_fp8) {
    out.w13_scale.dtype = out.w2_scale.dtype = DType::kFp32;
    out.w13_scale.shape = {E, 2 * sn, sk};
    out.w2_scale.shape = {E, sk, sn};
    out.w13_scale.data.resize(static_cast<std::size_t>(E * 2 * sn * sk) * 4);
    out.w2_scale.data.resize(static_cast<std::size_t>(E * sk * sn) * 4);
  }

  const std::string source = "'" + k0.gate + ".weight' " + shape_str(gate_shape);
  for (std::int64_t e = 0; e < E; ++e) {
    const ExpertKeys k = expert_keys(prefix, style, e);
    // Gate rows [0, N) then up rows [N, 2N): vLLM's and HF's w13 order.
    const HostTensor g = read_checked(ckpt, k.gate + ".weight", wdtype, {N, K}, {"N", "K"}, source);
    const HostTensor u = read_checked(ckpt, k.up + ".weight", wdtype, {N, K}, {"N", "K"}, source);
    const HostTensor d = read_checked(ckpt, k.down + ".weight", wdtype, {K, N}, {"K", "N"}, source);
    std::uint8_t* w13 = out.w13.data.data() + static_cast<std::size_t>(e) * 2 * gate_bytes;
    std::memcpy(w13, g.data.data(), gate_bytes);
    std::memcpy(w13 + gate_bytes, u.data.data(), gate_bytes);
    std::memcpy(out.w2.data.data() + static_cast<std::size_t>(e) * gate_bytes, d.data.data(), gate_bytes);
    if (block_fp8) {
      const std::size_t sbytes = static_cast<std::size_t>(sn * sk) * 4;
      const HostTensor gs = read_checked(ckpt, k.gate + ".weight_scale_inv", DType::kFp32, {sn, sk}, {"ceil(N/128)", "ceil(K/128)"}, source);
      const HostTensor us = read_checked(ckpt, k.up + ".weight_scale_inv", DType::kFp32, {sn, sk}, {"ceil(N/128)", "ceil(K/128)"}, source);
      const HostTensor ds = read_checked(ckpt, k.down + ".weight_scale_inv", DType::kFp32, {sk, sn}, {"ceil(K/128)", "ceil(N/128)"}, source);
      std::uint8_t* s13 = out.w13_scale.data.data() + static_cast<std::size_t>(e) * 2 * sbytes;
      std::memcpy(s13, gs.data.data(), sbytes);
      std::memcpy(s13 + sbytes, us.data.data(), sbytes);
      std::memcpy(out.w2_scale.data.data() + static_cast<std::size_t>(e) * sbytes, ds.data.data(), sbytes);
    }
  }
  return out;
}

}  // namespace moekit

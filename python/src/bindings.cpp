// moekit._C: the nanobind layer over moekit's public C++ API. Tensors arrive as TensorView
// (pointer, dtype, shape, strides in elements, device) built by python/moekit/_tensors.py from
// numpy arrays or torch tensors, or, for fused_experts on torch tensors, by expert_args_torch
// below from the same attributes _tensors.py reads (through Python, with the dtype table it
// hands over): this file links no tensor library and copies nothing.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "moekit/moekit.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using moekit::TensorView;

TensorView make_view(std::uintptr_t data, moekit::DType dtype, const std::vector<std::int64_t>& shape,
                     const std::vector<std::int64_t>& strides, moekit::DeviceType device_type, int device_index) {
  if (shape.size() > static_cast<std::size_t>(TensorView::kMaxDims))
    throw moekit::Error(moekit::Status::kInvalidArgument,
                        "a tensor has " + std::to_string(shape.size()) + " dimensions, more than the " +
                            std::to_string(TensorView::kMaxDims) + " a TensorView holds");
  if (strides.size() != shape.size())
    throw moekit::Error(moekit::Status::kInvalidArgument,
                        "a tensor has " + std::to_string(shape.size()) + " dimensions but " +
                            std::to_string(strides.size()) + " strides");
  TensorView v;
  v.data = reinterpret_cast<void*>(data);
  v.dtype = dtype;
  v.device = {device_type, device_index};
  v.ndim = static_cast<int>(shape.size());
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = shape[i];
    v.strides[i] = strides[i];
  }
  return v;
}

std::vector<std::int64_t> shape_of(const TensorView& v) {
  if (!v.present()) return {};
  return std::vector<std::int64_t>(v.shape, v.shape + v.ndim);
}

// ---- torch tensors in one pass (python/moekit/_ops.py fused_experts_impl's fast path) ----
// A TensorView of torch tensor `x`, read through the attributes python/moekit/_tensors.py's
// torch_view reads (dtype, is_cuda, get_device(), device.type, shape, stride(), numel(),
// data_ptr()), in C++ instead of Python: an eager call builds up to 13 views per call. False when
// x is not a case this path takes (a dtype outside `dtypes`, the table torch dtype -> DType that
// _tensors.py keeps; a device other than cpu / cuda; more dimensions than a TensorView holds):
// the caller then takes the Python path, which raises its errors. None gives an absent view.
bool torch_view_fast(nb::handle x, nb::handle dtypes, TensorView* v) {
  if (x.is_none()) {
    *v = TensorView{};
    return true;
  }
  nb::object dt = nb::getattr(x, "dtype", nb::none());
  PyObject* d = PyDict_GetItemWithError(dtypes.ptr(), dt.ptr());  // borrowed
  if (d == nullptr) {
    PyErr_Clear();
    return false;
  }
  TensorView t;
  if (!nb::try_cast<moekit::DType>(nb::handle(d), t.dtype)) return false;
  if (nb::cast<bool>(x.attr("is_cuda"))) {
    t.device = {moekit::DeviceType::kCuda, nb::cast<int>(x.attr("get_device")())};
  } else {
    nb::object type = x.attr("device").attr("type");
    if (!nb::isinstance<nb::str>(type) || nb::cast<std::string>(type) != "cpu") return false;
    t.device = {moekit::DeviceType::kCpu, 0};
  }
  // torch.Size and stride() are tuples: read exactly their n items (nothing else is taken here).
  nb::object shape = x.attr("shape");
  nb::object strides = x.attr("stride")();
  if (!PyTuple_Check(shape.ptr()) || !PyTuple_Check(strides.ptr())) return false;
  const Py_ssize_t n = PyTuple_GET_SIZE(shape.ptr());
  if (n > TensorView::kMaxDims || PyTuple_GET_SIZE(strides.ptr()) != n) return false;
  t.ndim = static_cast<int>(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    t.shape[i] = nb::cast<std::int64_t>(nb::handle(PyTuple_GET_ITEM(shape.ptr(), i)));
    t.strides[i] = nb::cast<std::int64_t>(nb::handle(PyTuple_GET_ITEM(strides.ptr(), i)));
  }
  if (nb::cast<std::int64_t>(x.attr("numel")()) > 0)
    t.data = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(x.attr("data_ptr")()));
  *v = t;
  return true;
}

// How a call runs; Options::path points into `path` for the duration of the call.
moekit::Options make_options(const std::string& backend, std::uintptr_t stream, std::uintptr_t workspace,
                             std::size_t workspace_bytes, const std::optional<std::string>& path, int num_threads,
                             bool debug_faults = false) {
  moekit::Options o;
  o.debug_faults = debug_faults;
  o.backend = moekit::parse_backend(backend);
  o.stream = reinterpret_cast<void*>(stream);
  o.workspace = reinterpret_cast<void*>(workspace);
  o.workspace_bytes = workspace_bytes;
  o.path = path ? path->c_str() : nullptr;
  o.num_threads = num_threads;
  return o;
}

// moekit::Error -> the Python exception its status stands for, with the C++ message.
void translate_error(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const moekit::Error& e) {
    PyObject* type = PyExc_RuntimeError;
    if (e.status() == moekit::Status::kInvalidArgument) type = PyExc_ValueError;
    if (e.status() == moekit::Status::kNotSupported) type = PyExc_NotImplementedError;
    PyErr_SetString(type, e.what());
  }
}

// A sharded weight set as {name: (dtype, shape, raw bytes)} for the present tensors (absent ones,
// e.g. b2 on tensor-parallel ranks > 0, are left out); Python rebuilds numpy arrays / tensors.
using HostTuple = std::tuple<moekit::DType, std::vector<std::int64_t>, nb::bytes>;
std::map<std::string, HostTuple> sharded_dict(const moekit::ShardedExperts& s) {
  std::map<std::string, HostTuple> out;
  const std::pair<const char*, const moekit::HostTensor*> items[] = {
      {"w13", &s.w13}, {"w2", &s.w2}, {"w13_scale", &s.w13_scale},
      {"w2_scale", &s.w2_scale}, {"b13", &s.b13}, {"b2", &s.b2}};
  for (const auto& [name, t] : items) {
    if (t->shape.empty()) continue;
    out.emplace(name, HostTuple(t->dtype, t->shape,
                                nb::bytes(reinterpret_cast<const char*>(t->data.data()), t->data.size())));
  }
  return out;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "moekit's C++ API (use the moekit package, not this module, from Python)";
  nb::register_exception_translator(translate_error);

  nb::enum_<moekit::Status>(m, "Status")
      .value("kSuccess", moekit::Status::kSuccess)
      .value("kInvalidArgument", moekit::Status::kInvalidArgument)
      .value("kNotSupported", moekit::Status::kNotSupported)
      .value("kCudaError", moekit::Status::kCudaError)
      .value("kInternal", moekit::Status::kInternal);
  nb::enum_<moekit::DType>(m, "DType")
      .value("kBf16", moekit::DType::kBf16)
      .value("kFp16", moekit::DType::kFp16)
      .value("kFp32", moekit::DType::kFp32)
      .value("kFp8E4m3", moekit::DType::kFp8E4m3)
      .value("kInt32", moekit::DType::kInt32)
      .value("kInt64", moekit::DType::kInt64);
  nb::enum_<moekit::DeviceType>(m, "DeviceType")
      .value("kCpu", moekit::DeviceType::kCpu)
      .value("kCuda", moekit::DeviceType::kCuda);
  nb::enum_<moekit::Scheme>(m, "Scheme")
      .value("kBf16", moekit::Scheme::kBf16)
      .value("kFp8PerTensor", moekit::Scheme::kFp8PerTensor)
      .value("kFp8PerChannel", moekit::Scheme::kFp8PerChannel)
      .value("kFp8Block128", moekit::Scheme::kFp8Block128);
  nb::enum_<moekit::Activation>(m, "Activation")
      .value("kSilu", moekit::Activation::kSilu)
      .value("kGelu", moekit::Activation::kGelu)
      .value("kSwigluOai", moekit::Activation::kSwigluOai);
  nb::enum_<moekit::RoutingMethod>(m, "RoutingMethod")
      .value("kSoftmaxTopk", moekit::RoutingMethod::kSoftmaxTopk)
      .value("kSigmoidGroupedTopk", moekit::RoutingMethod::kSigmoidGroupedTopk)
      .value("kTopkSoftmax", moekit::RoutingMethod::kTopkSoftmax);

  m.def("version", &moekit::version);
  // The library's provenance as baked in by its build (moekit::build_info()).
  m.def("build_info", []() {
    const moekit::BuildInfo& b = moekit::build_info();
    std::map<std::string, std::string> d{{"commit", b.commit}, {"tree", b.tree}, {"date", b.date}, {"source", b.source}};
    d["dirty"] = std::to_string(b.dirty);
    return d;
  });
  m.def("parse_scheme", [](const std::string& s) { return moekit::parse_scheme(s); });
  m.def("parse_activation", [](const std::string& s) { return moekit::parse_activation(s); });
  m.def("parse_routing_method", [](const std::string& s) { return moekit::parse_routing_method(s); });
  m.def("scheme_name", [](moekit::Scheme s) { return std::string(moekit::scheme_name(s)); });
  m.def("dtype_name", [](moekit::DType d) { return std::string(moekit::dtype_name(d)); });
  m.def("cuda_available", []() {
    std::string why;
    const bool ok = moekit::cuda_available(&why);
    return std::make_pair(ok, why);
  });

  // moekit.preload: load every kernel on a device now (the first call does it otherwise), and
  // what that load cost, as a dict (tools/scripts/cold_start.py reads it).
  m.def(
      "preload",
      [](int device) {
        moekit::PreloadReport r;
        {
          nb::gil_scoped_release release;
          r = moekit::preload(device);
        }
        nb::dict d;
        d["device"] = r.device;
        d["loaded_now"] = r.loaded_now;
        d["kernels"] = r.kernels;
        d["context_ms"] = r.context_ms;
        d["load_ms"] = r.load_ms;
        nb::list slowest;
        for (const auto& [name, ms] : r.slowest) slowest.append(nb::make_tuple(name, ms));
        d["slowest"] = slowest;
        return d;
      },
      "device"_a = -1);

  nb::class_<TensorView>(m, "TensorView")
      .def(nb::init<>(), "An absent (optional, not given) tensor.")
      .def(
          "__init__",
          [](TensorView* self, std::uintptr_t data, moekit::DType dtype, const std::vector<std::int64_t>& shape,
             const std::vector<std::int64_t>& strides, moekit::DeviceType device_type, int device_index) {
            new (self) TensorView(make_view(data, dtype, shape, strides, device_type, device_index));
          },
          "data"_a, "dtype"_a, "shape"_a, "strides"_a, "device_type"_a, "device_index"_a)
      .def_prop_ro("present", &TensorView::present)
      .def_prop_ro("ndim", [](const TensorView& v) { return v.ndim; })
      .def_prop_ro("shape", &shape_of)
      .def_prop_ro("strides",
                   [](const TensorView& v) {
                     return v.present() ? std::vector<std::int64_t>(v.strides, v.strides + v.ndim)
                                        : std::vector<std::int64_t>{};
                   })
      .def_prop_ro("dtype", [](const TensorView& v) { return v.dtype; })
      .def_prop_ro("data", [](const TensorView& v) { return reinterpret_cast<std::uintptr_t>(v.data); })
      .def("numel", &TensorView::numel)
      .def("is_contiguous", &TensorView::is_contiguous)
      .def("__repr__", [](const TensorView& v) {
        if (!v.present()) return std::string("TensorView(absent)");
        return "TensorView(" + std::string(moekit::dtype_name(v.dtype)) + " " + v.shape_string() + " on " +
               moekit::device_name(v.device) + ")";
      });

  nb::class_<moekit::ActivationConfig>(m, "ActivationConfig")
      .def(nb::init<>())
      .def_rw("kind", &moekit::ActivationConfig::kind)
      .def_rw("alpha", &moekit::ActivationConfig::alpha)
      .def_rw("limit", &moekit::ActivationConfig::limit);

  nb::class_<moekit::RoutingConfig>(m, "RoutingConfig")
      .def(nb::init<>())
      .def_rw("method", &moekit::RoutingConfig::method)
      .def_rw("top_k", &moekit::RoutingConfig::top_k)
      .def_rw("renormalize", &moekit::RoutingConfig::renormalize)
      .def_rw("num_groups", &moekit::RoutingConfig::num_groups)
      .def_rw("topk_groups", &moekit::RoutingConfig::topk_groups)
      .def_rw("routed_scaling_factor", &moekit::RoutingConfig::routed_scaling_factor);

  nb::class_<moekit::MoeProblem>(m, "Problem")
      .def_ro("num_tokens", &moekit::MoeProblem::num_tokens)
      .def_ro("num_experts", &moekit::MoeProblem::num_experts)
      .def_ro("num_experts_global", &moekit::MoeProblem::num_experts_global)
      .def_ro("top_k", &moekit::MoeProblem::top_k)
      .def_ro("hidden_size", &moekit::MoeProblem::hidden_size)
      .def_ro("intermediate_size", &moekit::MoeProblem::intermediate_size)
      .def_ro("scheme", &moekit::MoeProblem::scheme)
      .def_ro("act_dtype", &moekit::MoeProblem::act_dtype)
      .def_ro("has_expert_map", &moekit::MoeProblem::has_expert_map)
      .def_ro("apply_router_weight_on_input", &moekit::MoeProblem::apply_router_weight_on_input)
      .def_ro("has_bias13", &moekit::MoeProblem::has_bias13)
      .def_ro("has_bias2", &moekit::MoeProblem::has_bias2)
      .def_ro("with_routing", &moekit::MoeProblem::with_routing)
      .def("flops", &moekit::MoeProblem::flops)
      .def("__str__", &moekit::MoeProblem::to_string)
      .def("__repr__", [](const moekit::MoeProblem& p) { return "Problem(" + p.to_string() + ")"; });

  nb::class_<moekit::ExpertWeights>(m, "ExpertWeights")
      .def(nb::init<>())
      .def_rw("w13", &moekit::ExpertWeights::w13)
      .def_rw("w2", &moekit::ExpertWeights::w2)
      .def_rw("w13_scale", &moekit::ExpertWeights::w13_scale)
      .def_rw("w2_scale", &moekit::ExpertWeights::w2_scale)
      .def_rw("b13", &moekit::ExpertWeights::b13)
      .def_rw("b2", &moekit::ExpertWeights::b2);

  nb::class_<moekit::FusedExpertsArgs>(m, "FusedExpertsArgs")
      .def(nb::init<>())
      .def_rw("hidden", &moekit::FusedExpertsArgs::hidden)
      .def_rw("weights", &moekit::FusedExpertsArgs::weights)
      .def_rw("topk_ids", &moekit::FusedExpertsArgs::topk_ids)
      .def_rw("topk_weights", &moekit::FusedExpertsArgs::topk_weights)
      .def_rw("out", &moekit::FusedExpertsArgs::out)
      .def_rw("scheme", &moekit::FusedExpertsArgs::scheme)
      .def_rw("activation", &moekit::FusedExpertsArgs::activation)
      .def_rw("a13_scale", &moekit::FusedExpertsArgs::a13_scale)
      .def_rw("a2_scale", &moekit::FusedExpertsArgs::a2_scale)
      .def_rw("expert_map", &moekit::FusedExpertsArgs::expert_map)
      .def_rw("apply_router_weight_on_input", &moekit::FusedExpertsArgs::apply_router_weight_on_input);

  nb::class_<moekit::RouteArgs>(m, "RouteArgs")
      .def(nb::init<>())
      .def_rw("router_logits", &moekit::RouteArgs::router_logits)
      .def_rw("routing", &moekit::RouteArgs::routing)
      .def_rw("e_score_correction_bias", &moekit::RouteArgs::e_score_correction_bias)
      .def_rw("topk_ids", &moekit::RouteArgs::topk_ids)
      .def_rw("topk_weights", &moekit::RouteArgs::topk_weights);

  nb::class_<moekit::FusedMoeArgs>(m, "FusedMoeArgs")
      .def(nb::init<>())
      .def_rw("router_logits", &moekit::FusedMoeArgs::router_logits)
      .def_rw("routing", &moekit::FusedMoeArgs::routing)
      .def_rw("e_score_correction_bias", &moekit::FusedMoeArgs::e_score_correction_bias)
      .def_rw("experts", &moekit::FusedMoeArgs::experts);

  // fused_experts_impl's fast path for torch tensors: the FusedExpertsArgs of the tensors as given
  // (moekit/_ops.py has converted ids, weights and scales to what moekit reads), in one call. None
  // when a tensor is not one torch_view_fast takes: the caller then builds the views in Python.
  m.def(
      "expert_args_torch",
      [](nb::handle hidden, nb::handle w13, nb::handle w2, nb::handle w13_scale, nb::handle w2_scale, nb::handle b13,
         nb::handle b2, nb::handle topk_ids, nb::handle topk_weights, nb::handle out, nb::handle a13_scale,
         nb::handle a2_scale, nb::handle expert_map, moekit::Scheme scheme, const moekit::ActivationConfig& act,
         bool weight_on_input, nb::handle dtypes) -> nb::object {
        moekit::FusedExpertsArgs a;
        const std::pair<nb::handle, TensorView*> views[] = {
            {w13, &a.weights.w13},      {w2, &a.weights.w2},     {w13_scale, &a.weights.w13_scale},
            {w2_scale, &a.weights.w2_scale}, {b13, &a.weights.b13}, {b2, &a.weights.b2},
            {hidden, &a.hidden},        {topk_ids, &a.topk_ids}, {topk_weights, &a.topk_weights},
            {out, &a.out},              {a13_scale, &a.a13_scale}, {a2_scale, &a.a2_scale},
            {expert_map, &a.expert_map}};
        for (const auto& [h, v] : views)
          if (!torch_view_fast(h, dtypes, v)) return nb::none();
        a.scheme = scheme;
        a.activation = act;
        a.apply_router_weight_on_input = weight_on_input;
        return nb::cast(a);
      },
      "hidden"_a, "w13"_a, "w2"_a, "w13_scale"_a.none(), "w2_scale"_a.none(), "b13"_a.none(), "b2"_a.none(),
      "topk_ids"_a.none(), "topk_weights"_a.none(), "out"_a, "a13_scale"_a.none(), "a2_scale"_a.none(),
      "expert_map"_a.none(), "scheme"_a, "activation"_a, "weight_on_input"_a, "dtypes"_a);
  // The CUDA workspace bytes of a call (describe + workspace_size) in one call.
  m.def(
      "workspace_need",
      [](const moekit::FusedExpertsArgs& a) { return moekit::workspace_size(moekit::describe(a), moekit::Backend::kCuda); },
      "args"_a);
  m.def(
      "workspace_need",
      [](const moekit::FusedMoeArgs& a) { return moekit::workspace_size(moekit::describe(a), moekit::Backend::kCuda); },
      "args"_a);

  m.def("describe", [](const moekit::FusedExpertsArgs& a) { return moekit::describe(a); }, "args"_a);
  m.def("describe", [](const moekit::FusedMoeArgs& a) { return moekit::describe(a); }, "args"_a);
  m.def(
      "workspace_size",
      [](const moekit::MoeProblem& p, const std::string& backend) {
        return moekit::workspace_size(p, moekit::parse_backend(backend));
      },
      "problem"_a, "backend"_a = "cuda");

  // The three operations. The GIL is released while they run: the CPU reference is threaded
  // and may take a while; CUDA calls only enqueue work.
  m.def(
      "fused_experts",
      [](const moekit::FusedExpertsArgs& a, const std::string& backend, std::uintptr_t stream,
         std::uintptr_t workspace, std::size_t workspace_bytes, const std::optional<std::string>& path,
         int num_threads, bool debug_faults) {
        const moekit::Options o =
            make_options(backend, stream, workspace, workspace_bytes, path, num_threads, debug_faults);
        nb::gil_scoped_release release;
        moekit::fused_experts(a, o);
      },
      "args"_a, "backend"_a = "auto", "stream"_a = 0, "workspace"_a = 0, "workspace_bytes"_a = 0,
      "path"_a = nb::none(), "num_threads"_a = 0, "debug_faults"_a = false);
  m.def(
      "fused_moe",
      [](const moekit::FusedMoeArgs& a, const std::string& backend, std::uintptr_t stream, std::uintptr_t workspace,
         std::size_t workspace_bytes, const std::optional<std::string>& path, int num_threads, bool debug_faults) {
        const moekit::Options o =
            make_options(backend, stream, workspace, workspace_bytes, path, num_threads, debug_faults);
        nb::gil_scoped_release release;
        moekit::fused_moe(a, o);
      },
      "args"_a, "backend"_a = "auto", "stream"_a = 0, "workspace"_a = 0, "workspace_bytes"_a = 0,
      "path"_a = nb::none(), "num_threads"_a = 0, "debug_faults"_a = false);

  // Fault records (moekit/faults.hpp): bad expert ids the backends dropped and recorded.
  // take_fault -> None or a dict; check_faults raises ValueError naming the id. Both synchronize
  // the stream on CUDA (GIL released).
  m.def(
      "take_fault",
      [](const std::string& backend, std::uintptr_t stream) -> std::optional<std::map<std::string, nb::object>> {
        const moekit::Options o = make_options(backend, stream, 0, 0, std::nullopt, 0);
        moekit::Fault f;
        bool got = false;
        {
          nb::gil_scoped_release release;
          got = moekit::take_fault(&f, o);
        }
        if (!got) return std::nullopt;
        std::map<std::string, nb::object> d;
        d["tensor"] = nb::str(moekit::fault_tensor_name(f.tensor));
        d["row"] = nb::int_(f.row);
        d["slot"] = nb::int_(f.slot);
        d["value"] = nb::int_(f.value);
        d["expert"] = nb::int_(f.expert);
        d["bound"] = nb::int_(f.bound);
        d["message"] = nb::str(f.to_string().c_str());
        return d;
      },
      "backend"_a = "auto", "stream"_a = 0);
  m.def(
      "check_faults",
      [](const std::string& backend, std::uintptr_t stream) {
        const moekit::Options o = make_options(backend, stream, 0, 0, std::nullopt, 0);
        nb::gil_scoped_release release;
        moekit::check_faults(o);
      },
      "backend"_a = "auto", "stream"_a = 0);
  m.def("debug_faults_enabled", []() { return moekit::debug_faults_enabled(); });
  m.def(
      "route",
      [](const moekit::RouteArgs& a, const std::string& backend, std::uintptr_t stream, int num_threads) {
        const moekit::Options o = make_options(backend, stream, 0, 0, std::nullopt, num_threads);
        nb::gil_scoped_release release;
        moekit::route(a, o);
      },
      "args"_a, "backend"_a = "auto", "stream"_a = 0, "num_threads"_a = 0);

  // inv_rope_fp8_quant (include/moekit/rope_quant.hpp).
  nb::class_<moekit::InvRopeFp8QuantArgs>(m, "InvRopeFp8QuantArgs")
      .def(nb::init<>())
      .def_rw("o", &moekit::InvRopeFp8QuantArgs::o)
      .def_rw("positions", &moekit::InvRopeFp8QuantArgs::positions)
      .def_rw("cos_sin_cache", &moekit::InvRopeFp8QuantArgs::cos_sin_cache)
      .def_rw("num_groups", &moekit::InvRopeFp8QuantArgs::num_groups)
      .def_rw("o_fp8", &moekit::InvRopeFp8QuantArgs::o_fp8)
      .def_rw("o_scale", &moekit::InvRopeFp8QuantArgs::o_scale)
      .def_rw("packed_ue8m0", &moekit::InvRopeFp8QuantArgs::packed_ue8m0);
  m.def(
      "inv_rope_fp8_quant",
      [](const moekit::InvRopeFp8QuantArgs& a, const std::string& backend, std::uintptr_t stream, int num_threads) {
        const moekit::Options o = make_options(backend, stream, 0, 0, std::nullopt, num_threads);
        nb::gil_scoped_release release;
        moekit::inv_rope_fp8_quant(a, o);
      },
      "args"_a, "backend"_a = "auto", "stream"_a = 0, "num_threads"_a = 0);

  // Host weight quantization: returns (dtype, shape, data bytes, scale_shape, scale bytes (fp32)).
  m.def(
      "quantize_weights",
      [](const TensorView& w, moekit::Scheme scheme, moekit::DType bf16_dtype) {
        moekit::QuantizedWeights q;
        {
          nb::gil_scoped_release release;
          q = moekit::quantize_weights(w, scheme, bf16_dtype);
        }
        return std::make_tuple(q.dtype, q.shape,
                               nb::bytes(reinterpret_cast<const char*>(q.data.data()), q.data.size()),
                               q.scale_shape,
                               nb::bytes(reinterpret_cast<const char*>(q.scale.data()), q.scale.size() * sizeof(float)));
      },
      "w"_a, "scheme"_a, "bf16_dtype"_a = moekit::DType::kBf16);

  // The model presets, as plain tuples the Python side turns into dicts.
  m.def("model_presets", []() {
    std::vector<std::string> names;
    for (const moekit::ModelPreset& p : moekit::model_presets()) names.emplace_back(p.name);
    return names;
  });
  m.def(
      "preset_problem",
      [](const std::string& name, std::int64_t num_tokens, int tp, const std::string& scheme) {
        return moekit::preset_problem(moekit::find_preset(name), num_tokens, tp, moekit::parse_scheme(scheme));
      },
      "name"_a, "num_tokens"_a, "tp"_a = 1, "scheme"_a = "bf16");

  // Tensor / expert parallelism: the host sharding helpers and the expert layout
  // (include/moekit/parallel.hpp). moekit.distributed cuts tensors in torch / numpy and is tested
  // against these.
  m.def("nccl_available", []() {
    std::string why;
    const bool ok = moekit::nccl_available(&why);
    return std::make_pair(ok, why);
  });
  m.def(
      "expert_range_for_rank",
      [](std::int64_t num_experts_global, int ep_size, int rank) {
        const moekit::ExpertRange r = moekit::expert_range_for_rank(num_experts_global, ep_size, rank);
        return std::make_pair(r.first, r.count);
      },
      "num_experts_global"_a, "ep_size"_a, "rank"_a);
  m.def("expert_map_for_rank", &moekit::expert_map_for_rank, "num_experts_global"_a, "ep_size"_a, "rank"_a);
  m.def("expert_owner", &moekit::expert_owner, "num_experts_global"_a, "ep_size"_a, "expert_id"_a);
  m.def(
      "shard_experts_tp",
      [](const moekit::ExpertWeights& full, moekit::Scheme scheme, int tp_size, int tp_rank) {
        moekit::ShardedExperts s;
        {
          nb::gil_scoped_release release;
          s = moekit::shard_experts_tp(full, scheme, tp_size, tp_rank);
        }
        return sharded_dict(s);
      },
      "full"_a, "scheme"_a, "tp_size"_a, "tp_rank"_a);
  m.def(
      "shard_experts_ep",
      [](const moekit::ExpertWeights& full, moekit::Scheme scheme, int ep_size, int ep_rank) {
        moekit::ShardedExperts s;
        {
          nb::gil_scoped_release release;
          s = moekit::shard_experts_ep(full, scheme, ep_size, ep_rank);
        }
        return sharded_dict(s);
      },
      "full"_a, "scheme"_a, "ep_size"_a, "ep_rank"_a);
}

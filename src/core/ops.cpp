// The public entry points: validate once (validate.cpp), pick the backend, run it.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend.hpp"
#include "env.hpp"
#include "moekit/error.hpp"
#include "moekit/ops.hpp"

// Defined by moekit::cuda (src/cuda/backend.cu); null in a binary without it.
extern "C" const moekit::detail::CudaBackendV1* moekit_cuda_backend_v1() __attribute__((weak));

namespace moekit {
namespace detail {

const CudaBackendV1* cuda_backend() noexcept {
  return moekit_cuda_backend_v1 != nullptr ? moekit_cuda_backend_v1() : nullptr;
}

namespace {

// The backend that runs a call whose tensors live on `device`.
Backend pick_backend(Backend requested, Device device) {
  Backend b = requested;
  if (b == Backend::kAuto) b = device.type == DeviceType::kCuda ? Backend::kCuda : Backend::kCpu;
  if (b == Backend::kCpu && device.type != DeviceType::kCpu)
    throw Error(Status::kInvalidArgument,
                "backend cpu needs host tensors, but the tensors are on " + device_name(device));
  if (b == Backend::kCuda && device.type != DeviceType::kCuda)
    throw Error(Status::kInvalidArgument,
                "backend cuda needs CUDA tensors, but the tensors are on " + device_name(device));
  return b;
}

// The devices (0..63) whose device_ok has passed in this process. What it checks (the device
// exists, is compute capability 9.0, its kernels loaded) cannot change within a process, so an
// eager call pays its queries (cudaGetDeviceCount, two attributes, the current device) once per
// device rather than per call; a device that failed is asked again, so the error is the same.
std::atomic<std::uint64_t> g_devices_ok{0};

const CudaBackendV1& require_cuda(int device) {
  const CudaBackendV1* cuda = cuda_backend();
  if (cuda == nullptr)
    throw Error(Status::kNotSupported,
                "this build of moekit has no CUDA backend (configure with -DMOEKIT_ENABLE_CUDA=ON "
                "and link moekit::cuda)");
  const std::uint64_t bit = device >= 0 && device < 64 ? std::uint64_t{1} << device : 0;
  if (bit != 0 && (g_devices_ok.load(std::memory_order_acquire) & bit) != 0) return *cuda;
  std::string why;
  if (!cuda->device_ok(device, &why)) throw Error(Status::kNotSupported, why);
  g_devices_ok.fetch_or(bit, std::memory_order_acq_rel);
  return *cuda;
}

void check_workspace(const MoeCall& call, std::size_t need) {
  if (need == 0) return;
  if (call.workspace == nullptr)
    throw Error(Status::kInvalidArgument,
                "options.workspace is null but this call needs " + std::to_string(need) +
                    " bytes of device workspace (size it with moekit::workspace_size)");
  if (call.workspace_bytes < need)
    throw Error(Status::kInvalidArgument,
                "options.workspace_bytes is " + std::to_string(call.workspace_bytes) +
                    ", this call needs " + std::to_string(need));
  if (reinterpret_cast<std::uintptr_t>(call.workspace) % 256 != 0)
    throw Error(Status::kInvalidArgument, "options.workspace must be 256-byte aligned");
}

void run(const MoeCall& call, Backend backend) {
  if (backend == Backend::kCpu) {
    cpu::run_moe(call);  // debug mode: throws at a bad id before computing anything
    return;
  }
  const CudaBackendV1& cuda = require_cuda(call.device);
  check_workspace(call, cuda.workspace_size(call.problem));
  cuda.run_moe(call);
  // Debug mode: wait for this call and raise what it (or an unchecked earlier call on the device)
  // recorded. Skipped inside a graph capture, which cannot synchronize.
  if (call.debug_faults && call.problem.num_tokens > 0) {
    Fault f;
    bool capturing = false;
    if (cuda.take_fault(call.stream, &f, &capturing)) throw_fault(f, "MOEKIT_DEBUG_FAULTS: a bad expert id");
  }
}

}  // namespace
}  // namespace detail

// Each entry below that reads MOEKIT_* switches (validation: MOEKIT_PATH, MOEKIT_DEBUG_FAULTS; the
// router and the launchers: the rest) opens an EnvScope first: one scan of the environment for
// all of them instead of a getenv each (env.hpp says what that saves). route reads none.
MoeProblem describe(const FusedExpertsArgs& args) {
  const detail::EnvScope env;
  return detail::resolve(args, Options{}).problem;
}
MoeProblem describe(const FusedMoeArgs& args) {
  const detail::EnvScope env;
  return detail::resolve(args, Options{}).problem;
}

std::size_t workspace_size(const MoeProblem& problem, Backend backend) {
  if (backend == Backend::kCpu) return 0;
  const detail::CudaBackendV1* cuda = detail::cuda_backend();
  if (cuda == nullptr) {
    if (backend == Backend::kAuto) return 0;
    throw Error(Status::kNotSupported, "this build of moekit has no CUDA backend");
  }
  return cuda->workspace_size(problem);
}

void route(const RouteArgs& args, const Options& options) {
  detail::RouteCall call = detail::resolve(args, options);
  Backend b = detail::pick_backend(options.backend, args.router_logits.device);
  if (call.num_tokens == 0) return;
  if (b == Backend::kCpu) {
    cpu::run_route(call);
  } else {
    detail::require_cuda(call.device).run_route(call);
  }
}

void fused_experts(const FusedExpertsArgs& args, const Options& options) {
  const detail::EnvScope env;
  detail::MoeCall call = detail::resolve(args, options);
  detail::run(call, detail::pick_backend(options.backend, args.hidden.device));
}

void fused_moe(const FusedMoeArgs& args, const Options& options) {
  const detail::EnvScope env;
  detail::MoeCall call = detail::resolve(args, options);
  detail::run(call, detail::pick_backend(options.backend, args.experts.hidden.device));
}

std::string describe_dispatch(const MoeProblem& problem, const Options& options, std::string* why) {
  const detail::EnvScope env;
  const char* forced = options.path != nullptr && options.path[0] != '\0' ? options.path
                                                                          : detail::env_value(detail::EnvVar::kPath);
  if (forced != nullptr && forced[0] == '\0') forced = nullptr;
  const detail::CudaBackendV1* cuda = detail::cuda_backend();
  bool on_cuda = options.backend == Backend::kCuda;
  if (options.backend == Backend::kAuto) on_cuda = cuda != nullptr && cuda->device_ok(0, nullptr);
  if (!on_cuda) {
    if (why != nullptr) *why = "the CPU reference backend has one path";
    return "cpu";
  }
  if (cuda == nullptr)
    throw Error(Status::kNotSupported,
                "this build of moekit has no CUDA backend (configure with -DMOEKIT_ENABLE_CUDA=ON "
                "and link moekit::cuda)");
  return cuda->describe_dispatch(problem, forced, -1, why);
}

PreloadReport preload(int device) {
  const detail::CudaBackendV1* cuda = detail::cuda_backend();
  if (cuda == nullptr)
    throw Error(Status::kNotSupported,
                "this build of moekit has no CUDA backend (configure with -DMOEKIT_ENABLE_CUDA=ON "
                "and link moekit::cuda)");
  return cuda->preload(device);
}

bool cuda_available(std::string* why) {
  const detail::CudaBackendV1* cuda = detail::cuda_backend();
  if (cuda == nullptr) {
    if (why) *why = "this build of moekit has no CUDA backend";
    return false;
  }
  return cuda->device_ok(0, why);
}

}  // namespace moekit

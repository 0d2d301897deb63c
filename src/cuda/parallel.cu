// The CUDA half of moekit's parallelism (moekit_cuda_parallel_v1): the EP bookkeeping kernels'
// launchers and thin checked wrappers over NCCL (built when cmake/moekit_parallel.cmake found it
// and defined MOEKIT_WITH_NCCL; otherwise every NCCL entry says why it is missing). Host code
// only. Nothing here sets NCCL_NVLS_ENABLE or asks for NVLink multicast.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/parallel_backend.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/preload.cuh"
#include "cuda/kernels/ep/launch.hpp"
#include "moekit/error.hpp"

#if defined(MOEKIT_WITH_NCCL) && MOEKIT_WITH_NCCL
#include <nccl.h>
#define MOEKIT_HAS_NCCL 1
#else
#define MOEKIT_HAS_NCCL 0
#endif

namespace moekit::cuda {
namespace {

// The EP entries: load every moekit kernel on the current device first (once per device;
// cuda/common/preload.cuh), so the first dispatch / unpack / combine at a new size loads nothing.
void preload_current_device() {
  int device = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&device));
  preload_kernels(device);
}

void preloaded_ep_dispatch(const detail::EpDispatchCall& c) {
  preload_current_device();
  launch_ep_dispatch(c);
}

void preloaded_ep_unpack(const detail::EpUnpackCall& c) {
  preload_current_device();
  launch_ep_unpack(c);
}

void preloaded_ep_combine(const detail::EpCombineCall& c) {
  preload_current_device();
  launch_ep_combine(c);
}

#if MOEKIT_HAS_NCCL

[[noreturn]] void throw_nccl(ncclResult_t r, const char* expr, const char* file, int line) {
  throw Error(Status::kCudaError, std::string("NCCL error ") + std::to_string(static_cast<int>(r)) + " (" +
                                      ncclGetErrorString(r) + "): " + ncclGetLastError(nullptr) + " in " + expr +
                                      " at " + file + ":" + std::to_string(line));
}

#define MOEKIT_NCCL_CHECK(expr)                                                   \
  do {                                                                            \
    const ncclResult_t moekit_nccl_r_ = (expr);                                   \
    if (moekit_nccl_r_ != ncclSuccess && moekit_nccl_r_ != ncclInProgress)        \
      throw_nccl(moekit_nccl_r_, #expr, __FILE__, __LINE__);                      \
  } while (0)

static_assert(sizeof(ncclUniqueId) == 128, "moekit::Communicator::UniqueId assumes NCCL_UNIQUE_ID_BYTES == 128");

ncclComm_t as_comm(void* c) { return static_cast<ncclComm_t>(c); }

void nccl_unique_id(void* out) {
  ncclUniqueId id;
  MOEKIT_NCCL_CHECK(ncclGetUniqueId(&id));
  std::memcpy(out, &id, sizeof id);
}

void* nccl_init_rank(const void* id_bytes, int world, int rank, int device) {
  MOEKIT_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  std::memcpy(&id, id_bytes, sizeof id);
  ncclComm_t comm = nullptr;
  MOEKIT_NCCL_CHECK(ncclCommInitRank(&comm, world, id, rank));
  return comm;
}

void nccl_init_all(void** comms, int count, const int* devices) {
  std::vector<ncclComm_t> c(static_cast<std::size_t>(count), nullptr);
  MOEKIT_NCCL_CHECK(ncclCommInitAll(c.data(), count, devices));
  for (int i = 0; i < count; ++i) comms[i] = c[static_cast<std::size_t>(i)];
}

void nccl_destroy(void* comm) { MOEKIT_NCCL_CHECK(ncclCommDestroy(as_comm(comm))); }

void nccl_query(void* comm, int* rank, int* size, int* device) {
  MOEKIT_NCCL_CHECK(ncclCommUserRank(as_comm(comm), rank));
  MOEKIT_NCCL_CHECK(ncclCommCount(as_comm(comm), size));
  MOEKIT_NCCL_CHECK(ncclCommCuDevice(as_comm(comm), device));
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kBf16: return ncclBfloat16;
    case DType::kFp16: return ncclFloat16;
    case DType::kFp32: return ncclFloat32;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kFp8E4m3: break;
  }
  throw Error(Status::kNotSupported, std::string("NCCL sum of dtype ") + dtype_name(d) + " is not supported");
}

void nccl_all_reduce_sum(void* comm, void* buffer, std::int64_t count, DType dtype, void* stream) {
  MOEKIT_NCCL_CHECK(ncclAllReduce(buffer, buffer, static_cast<std::size_t>(count), nccl_type(dtype), ncclSum,
                                  as_comm(comm), static_cast<cudaStream_t>(stream)));
}

void nccl_group_start() { MOEKIT_NCCL_CHECK(ncclGroupStart()); }
void nccl_group_end() { MOEKIT_NCCL_CHECK(ncclGroupEnd()); }

void nccl_send(void* comm, const void* buffer, std::size_t bytes, int peer, void* stream) {
  MOEKIT_NCCL_CHECK(ncclSend(buffer, bytes, ncclUint8, peer, as_comm(comm), static_cast<cudaStream_t>(stream)));
}

void nccl_recv(void* comm, void* buffer, std::size_t bytes, int peer, void* stream) {
  MOEKIT_NCCL_CHECK(ncclRecv(buffer, bytes, ncclUint8, peer, as_comm(comm), static_cast<cudaStream_t>(stream)));
}

const detail::CudaParallelV1 kParallel = {
    &preloaded_ep_dispatch, &preloaded_ep_unpack, &preloaded_ep_combine,
    nullptr,  // NCCL present
    &nccl_unique_id, &nccl_init_rank, &nccl_init_all, &nccl_destroy, &nccl_query, &nccl_all_reduce_sum,
    &nccl_group_start, &nccl_group_end, &nccl_send, &nccl_recv,
};

#else  // no NCCL in this build

const detail::CudaParallelV1 kParallel = {
    &preloaded_ep_dispatch, &preloaded_ep_unpack, &preloaded_ep_combine,
    "this build of moekit::cuda has no NCCL (nccl.h / libnccl not found at configure time; set "
    "MOEKIT_NCCL_ROOT or install NCCL and reconfigure)",
    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
};

#endif

}  // namespace
}  // namespace moekit::cuda

extern "C" const moekit::detail::CudaParallelV1* moekit_cuda_parallel_v1() { return &moekit::cuda::kParallel; }

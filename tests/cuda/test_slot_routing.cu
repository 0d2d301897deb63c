// The in-kernel routing's first step (src/cuda/common/slot_routing.cuh, map_and_count), run
// alone in a test kernel: each slot's local expert, the experts' counts and the fault flag,
// against the same rule computed on the host. Both of its forms: the 16-byte quads (past one
// scalar round of 4 x threads slots, no expert map, ids 16-byte aligned: what every public call
// past that size takes, since CUDA tensors are 16-byte aligned) and the scalar batches (up to one
// round, an expert map, or ids at an address that is not a multiple of 16),
// at slot counts around the thresholds of the three callers' thread counts (160: 640, 256: 1024,
// 384: 1536), tails of 1..3 slots past the last quad, and one slot count past 16 x 160 (4099, a
// second pass of the quads), with masked ids (-1), ids out of range and map entries of -1 or out
// of range among the slots (label gpu).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test.hpp"
#include "cuda/common/slot_routing.cuh"

namespace moekit::testing {
namespace {

constexpr int kMaxSlots = 4099;
constexpr int kMaxExperts = 256;

__global__ void map_and_count_kernel(const std::int32_t* ids, const std::int32_t* expert_map, int P, int Eg, int E,
                                     std::int16_t* slot_e_out, int* count_out, int* bad_out) {
  __shared__ std::int16_t slot_e[kMaxSlots];
  __shared__ int count[kMaxExperts];
  for (int e = threadIdx.x; e < kMaxExperts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  const bool bad = cuda::slot_routing::map_and_count(ids, expert_map, P, Eg, E, static_cast<int>(threadIdx.x),
                                                     static_cast<int>(blockDim.x), slot_e, count);
  if (bad) atomicOr(bad_out, 1);
  __syncthreads();
  for (int s = threadIdx.x; s < P; s += blockDim.x) slot_e_out[s] = slot_e[s];
  for (int e = threadIdx.x; e < E; e += blockDim.x) count_out[e] = count[e];
}

struct Expected {
  std::vector<std::int16_t> slot_e;
  std::vector<int> count;
  bool bad = false;
};

// map_and_count's rule on the host: a slot's id through the map (when given) to its local expert,
// -1 for a masked id (-1), an id outside [0, Eg), a map entry of -1 or outside [0, E); bad when an
// id other than -1 is outside [0, Eg) or an entry other than -1 is outside [0, E).
Expected expected(const std::vector<std::int32_t>& ids, const std::vector<std::int32_t>* map, int Eg, int E) {
  Expected x;
  x.count.assign(static_cast<std::size_t>(E), 0);
  for (const std::int32_t id : ids) {
    int e = -1;
    if (id >= 0 && id < Eg) {
      const int m = map != nullptr ? (*map)[static_cast<std::size_t>(id)] : id;
      if (m >= 0 && m < E) {
        e = m;
      } else if (m != -1) {
        x.bad = true;
      }
    } else if (id != -1) {
      x.bad = true;
    }
    x.slot_e.push_back(static_cast<std::int16_t>(e));
    if (e >= 0) ++x.count[static_cast<std::size_t>(e)];
  }
  return x;
}

TEST(Sm90SlotRouting, MapAndCountBothFormsMatchTheHostRule) {
  SKIP_WITHOUT_SM90();
  const int Eg = 160, E = 128;
  std::mt19937 rng(20261206);
  std::vector<std::int32_t> map(static_cast<std::size_t>(Eg));
  for (int i = 0; i < Eg; ++i) map[static_cast<std::size_t>(i)] = (i * 37) % E;
  map[3] = -1;     // an expert on another rank
  map[5] = E + 2;  // a bad map entry: a fault wherever id 5 comes up
  DevPtr d_ids = dev_alloc((kMaxSlots + 4) * 4);
  DevPtr d_slot = dev_alloc(kMaxSlots * 2);
  DevPtr d_count = dev_alloc(kMaxExperts * 4);
  DevPtr d_bad = dev_alloc(4);
  DevPtr d_map = upload(map);
  for (const int P : {1, 3, 4, 5, 639, 640, 641, 1024, 1025, 1026, 1536, 1537, 2047, 2048, 2049, 2561, 4099}) {
    for (const int threads : {160, 384, 256}) {
      for (const bool with_map : {false, true}) {
        for (const int offset : {0, 1}) {  // ids at +0 or +4 bytes from a 256-byte-aligned buffer
          for (const bool faults : {false, true}) {
            std::vector<std::int32_t> ids(static_cast<std::size_t>(P));
            for (std::int32_t& id : ids) id = static_cast<std::int32_t>(rng() % (with_map ? Eg : E));
            if (P > 2) ids[1] = -1;  // a masked slot
            if (faults && P > 4) ids[static_cast<std::size_t>(P - 2)] = with_map ? Eg + 5 : E + 7;
            if (with_map && P > 3) ids[2] = 3;  // through the -1 entry: dropped, not a fault
            const std::vector<std::int32_t>* m = with_map ? &map : nullptr;
            // Without a map the kernel's E is the global count, so an id in [E, Eg) is a fault
            // there; the test keeps Eg = E in that case.
            const int eg = with_map ? Eg : E;
            const Expected x = expected(ids, m, eg, E);
            std::int32_t* ids_at = static_cast<std::int32_t*>(d_ids.get()) + offset;
            ASSERT_EQ(cudaSuccess, cudaMemcpy(ids_at, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
            ASSERT_EQ(cudaSuccess, cudaMemset(d_slot.get(), 0x55, kMaxSlots * 2));
            ASSERT_EQ(cudaSuccess, cudaMemset(d_count.get(), 0x55, kMaxExperts * 4));
            ASSERT_EQ(cudaSuccess, cudaMemset(d_bad.get(), 0, 4));
            map_and_count_kernel<<<1, threads>>>(ids_at, with_map ? static_cast<const std::int32_t*>(d_map.get()) : nullptr,
                                                 P, eg, E, static_cast<std::int16_t*>(d_slot.get()),
                                                 static_cast<int*>(d_count.get()), static_cast<int*>(d_bad.get()));
            ASSERT_EQ(cudaSuccess, cudaGetLastError());
            ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
            const std::string what = "P = " + std::to_string(P) + ", " + std::to_string(threads) + " threads, " +
                                     (with_map ? "map" : "no map") + ", ids at +" + std::to_string(4 * offset) +
                                     " bytes" + (faults ? ", a bad id" : "");
            std::vector<std::int16_t> slot_e = download<std::int16_t>(d_slot.get(), static_cast<std::size_t>(P));
            std::vector<int> count = download<int>(d_count.get(), static_cast<std::size_t>(E));
            std::vector<int> bad = download<int>(d_bad.get(), 1);
            EXPECT_EQ(slot_e, x.slot_e) << what;
            EXPECT_EQ(count, x.count) << what;
            EXPECT_EQ(bad[0] != 0, x.bad) << what;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace moekit::testing

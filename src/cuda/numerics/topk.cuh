// Device top-k routing of one token by one warp (docs/design.md step 1), shared by the routing
// kernel (kernels/routing/) and the fused single pass (kernels/fused_moe/): softmax_topk,
// sigmoid_grouped_topk (DeepSeek-V3) and topk_softmax (gpt-oss). Selection order: higher score
// first, ties -> lower expert id, NaN scores select as -inf. The CPU reference
// (src/cpu/routing_ref.cpp) is the independent oracle.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/convert.cuh"  // warp_max, warp_sum
#include "moekit/problem.hpp"       // RoutingConfig, RoutingMethod

namespace moekit::cuda::numerics {

// Selection order: higher score first, ties -> lower id; id < 0 is "none" and loses to all.
__device__ __forceinline__ bool topk_better(float v1, int e1, float v2, int e2) {
  if (e2 < 0) return e1 >= 0;
  if (e1 < 0) return false;
  return v1 > v2 || (v1 == v2 && e1 < e2);
}

// NaN scores select as -inf.
__device__ __forceinline__ float topk_key(float v) { return v != v ? -INFINITY : v; }

// The warp's best (v, e) under topk_better, in every lane.
__device__ __forceinline__ void warp_argmax(float& v, int& e) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oe = __shfl_xor_sync(0xffffffffu, e, o);
    if (topk_better(ov, oe, v, e)) {
      v = ov;
      e = oe;
    }
  }
}


__device__ __forceinline__ float routing_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// One warp routes one token: ids[j], wts[j] for j < k (global or shared memory; lane 0 writes
// the ids, the weights are finished by all lanes). `num_experts` = E_global; `srow` is this
// warp's row of E_global floats in shared memory. logit(e) returns the token's logit of expert e
// as float; bias(e) the e_score_correction_bias of e (0 when none). The caller chooses how they
// load (e.g. __ldg), so each kernel keeps its memory access.
template <class Logit, class Bias>
__device__ inline void route_token_warp(const RoutingConfig& r, int num_experts, int k, Logit logit, Bias bias,
                                        float* srow, std::int32_t* ids, float* wts, int lane) {
  const int Eg = num_experts;
  const RoutingMethod method = r.method;

  // Selection scores (raw: NaN kept; topk_key maps it to -inf when comparing).
  if (method == RoutingMethod::kSoftmaxTopk) {
    float mx = -INFINITY;
    for (int e = lane; e < Eg; e += 32) mx = fmaxf(mx, logit(e));
    mx = warp_max(mx);
    float sum = 0.f;
    for (int e = lane; e < Eg; e += 32) {
      const float x = expf(logit(e) - mx);
      srow[e] = x;
      sum += x;
    }
    sum = warp_sum(sum);
    for (int e = lane; e < Eg; e += 32) srow[e] = srow[e] / sum;
  } else if (method == RoutingMethod::kSigmoidGroupedTopk) {
    for (int e = lane; e < Eg; e += 32) {
      const float b = bias(e);
      srow[e] = routing_sigmoid(logit(e)) + b;
    }
  } else {
    for (int e = lane; e < Eg; e += 32) srow[e] = logit(e);
  }
  __syncwarp();

  // sigmoid_grouped_topk: keep the topk_groups best groups (score = sum of the two largest).
  std::uint32_t kept = 0xffffffffu;
  int group_size = Eg;
  const bool grouped = method == RoutingMethod::kSigmoidGroupedTopk && r.num_groups > 1;
  if (grouped) {
    const int G = r.num_groups;  // <= 32 (checked on the host)
    group_size = Eg / G;
    float gscore = -INFINITY;
    if (lane < G) {
      float t1 = -INFINITY, t2 = -INFINITY;
      for (int e = lane * group_size; e < (lane + 1) * group_size; ++e) {
        const float v = topk_key(srow[e]);
        if (v > t1) {
          t2 = t1;
          t1 = v;
        } else if (v > t2) {
          t2 = v;
        }
      }
      gscore = topk_key(group_size == 1 ? t1 : t1 + t2);
    }
    kept = 0;
    for (int t = 0; t < r.topk_groups && t < G; ++t) {
      float v = gscore;
      int g = (lane < G && !((kept >> lane) & 1u)) ? lane : -1;
      warp_argmax(v, g);
      if (g >= 0) kept |= 1u << g;
    }
  }

  // Top-k: round j picks the best expert ranked strictly after round j-1's pick. Every lane
  // holds the same pick, so sums run in j order in every lane, exactly as the reference's.
  float prev_v = 0.f, sum = 0.f, mx = -INFINITY;
  int prev_e = -1;
  for (int j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int be = -1;
    for (int e = lane; e < Eg; e += 32) {
      if (grouped && !((kept >> (e / group_size)) & 1u)) continue;
      const float v = topk_key(srow[e]);
      if (prev_e >= 0 && !topk_better(prev_v, prev_e, v, e)) continue;
      if (topk_better(v, e, bv, be)) {
        bv = v;
        be = e;
      }
    }
    warp_argmax(bv, be);
    prev_v = bv;
    prev_e = be;
    const int id = be >= 0 ? be : 0;  // fewer eligible experts than k: validation forbids it
    float raw;  // softmax: p; sigmoid: unbiased s; topk_softmax: the logit
    if (method == RoutingMethod::kSoftmaxTopk) {
      raw = srow[id];
    } else if (method == RoutingMethod::kSigmoidGroupedTopk) {
      raw = routing_sigmoid(logit(id));
    } else {
      raw = logit(id);
      mx = fmaxf(mx, raw);  // fmax: a NaN logit does not hide the max (as the reference)
    }
    sum += raw;
    if (lane == 0) {
      ids[j] = id;
      wts[j] = raw;
    }
  }
  __syncwarp();
  if (method == RoutingMethod::kTopkSoftmax) {
    sum = 0.f;
    for (int j = 0; j < k; ++j) sum += expf(wts[j] - mx);
  }
  __syncwarp();
  const bool renorm = r.renormalize;
  for (int j = lane; j < k; j += 32) {
    const float raw = wts[j];
    float w;
    if (method == RoutingMethod::kTopkSoftmax) {
      w = expf(raw - mx) / sum;
    } else if (method == RoutingMethod::kSigmoidGroupedTopk) {
      w = (renorm ? raw / sum : raw) * r.routed_scaling_factor;
    } else {
      w = renorm ? raw / sum : raw;
    }
    wts[j] = w;
  }
  __syncwarp();  // other lanes read srow[id] above: finish before the next token overwrites it
}

}  // namespace moekit::cuda::numerics

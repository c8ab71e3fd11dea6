// Per-row device code of the event routers (event_router.cu, folded_event_router.cu): the row's
// RMS scale, the router operand, the fixed-order sum over K-slices, and the decision, exchange and
// FFN operand of the row. Every row split of the MMA kernel (8, 16 or 32 rows per CTA) runs these
// same functions, and any other form of that router must too: they fix each row's bits. The folded
// router shares the row's load, its RMS scale and everything after the decision (apply_row).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/kernels/event_router.hpp"
#include "cuda/kernels/router_decision.cuh"
#include "cuda/kernels/row_reduce.cuh"

namespace swapffn::cuda::router {

constexpr int kSlices = 8;      // K-slices of D, each accumulated by one warp's MMAs
constexpr int kMmaRows = 16;    // m16 MMA tile
constexpr int kPad = 8;         // bf16 elements of row padding: ldmatrix rows land in distinct banks
constexpr int kMaxRouter = 64;  // R <= 64: z of a row is at most 64 floats
constexpr int kMaxVec = 8;      // float4 per lane of one row held in registers: D <= 32 * 4 * 8

__device__ __forceinline__ uint2 pack_bf16x4(float a, float b, float c, float d) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(a, b), hi = __floats2bfloat162_rn(c, d);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}
__device__ __forceinline__ float4 unpack_bf16x4(uint2 v) {
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&v.x);
  const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&v.y);
  return make_float4(__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi));
}
__device__ __forceinline__ float sum_sq(const float4& v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }

// A warp's row in registers: element i of a lane is float4 index lane + 32 i, the order in which
// the row's sum of squares has always been accumulated.
__device__ __forceinline__ void load_row(const float* h, int64_t m, int D, int lane, float4 (&hv)[kMaxVec]) {
  const float4* src = reinterpret_cast<const float4*>(h + size_t(m) * D);
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i)
    if (i < D / 128) hv[i] = src[lane + 32 * i];
}

// rsqrt(mean(h^2) + eps) of a warp's row (every lane gets it).
__device__ __forceinline__ float row_rs(const float4 (&hv)[kMaxVec], int D, float eps) {
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i)
    if (i < D / 128) ss += sum_sq(hv[i]);
  return rsqrtf(warp_sum(ss) / float(D) + eps);
}

// Four elements of the router operand bf16(h * rs * router_norm).
__device__ __forceinline__ uint2 router_operand(const float4& v, float rs, const float4& g) {
  return pack_bf16x4(v.x * rs * g.x, v.y * rs * g.y, v.z * rs * g.z, v.w * rs * g.w);
}

// z of one router output: the K-slices' partial sums added in slice order (part(i) reads slice i's).
template <class Part>
__device__ __forceinline__ float slice_sum(Part part) {
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kSlices; ++i) sum += part(i);
  return sum;
}

// Called by the warp that holds row m in hv (map: its stream map before the event; rs: row_rs of
// that row, or a negative value when the caller has not kept it; trace: load_trace of a.io), after
// the row's decision d: the trace entry, the exchange of h with the chosen bank, then the FFN
// operand bf16(rms(h) * norm_gain) of the new h when a.norm_out is set (ngain: norm_gain,
// anywhere). Without a swap h is unchanged, and so is its rs.
__device__ __forceinline__ void apply_row(const EventRouterArgs& a, int64_t m, RowDecision d, const float* ngain,
                                          uint8_t map, float4 (&hv)[kMaxVec], float rs, int lane, TracePtrs trace) {
  const int D = static_cast<int>(a.d_model), nvec = D / 128;
  const int p = map_lane(map, d.slot);  // the physical bank of the chosen slot
  if (lane == 0) apply_decision(d, map, a.stream_map, m, trace, a.event, a.total_rows);
  if (d.gate) {
    float4* hg = reinterpret_cast<float4*>(a.h + size_t(m) * D);
    uint2* bank = reinterpret_cast<uint2*>(a.ram + (size_t(m) * 4 + p) * D);
    uint2 in[kMaxVec];
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i)
      if (i < nvec) in[i] = bank[lane + 32 * i];
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i)
      if (i < nvec) {
        const float4 v = hv[i];
        bank[lane + 32 * i] = pack_bf16x4(v.x, v.y, v.z, v.w);
        hv[i] = unpack_bf16x4(in[i]);
        hg[lane + 32 * i] = hv[i];
      }
  }
  if (a.norm_out) {
    if (d.gate || rs < 0.f) rs = row_rs(hv, D, a.eps);
    const float4* ng4 = reinterpret_cast<const float4*>(ngain);
    uint2* out = reinterpret_cast<uint2*>(a.norm_out + size_t(m) * D);
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i)
      if (i < nvec) {
        const float4 v = hv[i], gg = ng4[lane + 32 * i];
        out[lane + 32 * i] = pack_bf16x4(v.x * rs * gg.x, v.y * rs * gg.y, v.z * rs * gg.z, v.w * rs * gg.w);
      }
  }
}

// The MMA router's end of a row: the decision from z (R floats), then apply_row (the 32-row kernel
// spills if it keeps each row's rs from its operand to here, so apply_row recomputes it).
__device__ __forceinline__ void finish_row(const EventRouterArgs& a, int64_t m, const float* z, const float* swap_w,
                                           const float* biases, const float* bank_w, const float* ngain, uint8_t map,
                                           float4 (&hv)[kMaxVec], int lane) {
  apply_row(a, m, decide_row(z, static_cast<int>(a.d_router), swap_w, biases[0], bank_w, biases + 1, lane), ngain,
            map, hv, -1.f, lane, load_trace(a.io));
}

}  // namespace swapffn::cuda::router

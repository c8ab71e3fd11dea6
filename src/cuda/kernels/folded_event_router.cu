// The folded event router (folded_event_router.hpp says what it computes and why): one warp per
// row; shared memory holds the parameters every row reads, the folded vectors and the FFN norm gain
// (24 KB at D = 1024).
#include "cuda/kernels/folded_event_router.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/router_decision.cuh"
#include "cuda/kernels/row_reduce.cuh"
#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kMaxVec = 8;  // float4 per lane of one row held in registers: D <= 32 * 4 * 8
static_assert(32 * 4 * kMaxVec == kFoldedRouterMaxDModel, "a warp holds a row of the largest D in registers");
constexpr int kFolded = 5;  // f_s, f_0..f_3
// Rows (warps) per CTA. The kernel holds no weights beyond its 24 KB of parameters, so the width
// mostly sets how the rows spread over the SMs: at B = 1 (512 rows) 128 CTAs of 4 rows reach 128
// SMs; at large B several CTAs fit on each SM and overlap their loads.
constexpr int kWarps = 4;
static_assert((kFolded + 1) * kMaxVec * 32 % (kWarps * 32) == 0,
              "the CTA's threads split the float4 of the folded vectors and the norm gain evenly");

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

// Called by the warp that holds row m in hv (st: where its state is; map: its stream map before the
// event; rs: row_rs of that row, or a negative value when the caller has not kept it; trace:
// load_trace of a.io), after the row's decision d: the trace entry, the exchange of h with the
// chosen bank, then the FFN operand bf16(rms(h) * norm_gain) of the new h (stored as bf16 or e4m3)
// when a.norm_out is set (ngain: norm_gain, anywhere). Without a swap h is unchanged, and so is its
// rs.
__device__ __forceinline__ void apply_row(const EventRouterArgs& a, int64_t m, RowDecision d, const float* ngain,
                                          RowState st, uint8_t map, float4 (&hv)[kMaxVec], float rs, int lane,
                                          TracePtrs trace) {
  const int D = static_cast<int>(a.d_model), nvec = D / 128;
  const int p = map_lane(map, d.slot);  // the physical bank of the chosen slot
  if (lane == 0) apply_decision(d, map, st.map, m, trace, a.event, a.total_rows);
  if (d.gate) {
    float4* hg = reinterpret_cast<float4*>(a.h + size_t(m) * D);
    uint2* bank = reinterpret_cast<uint2*>(st.ram + size_t(p) * D);
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
  if (a.norm_out.bf16 != nullptr || a.norm_out.e4m3 != nullptr) {
    if (d.gate || rs < 0.f) rs = row_rs(hv, D, a.eps);
    const float4* ng4 = reinterpret_cast<const float4*>(ngain);
    store_ffn_operand_row<kMaxVec>(a.norm_out, m - a.row_begin, a.rows, D, lane, [&](int i) {
      const float4 v = hv[i], gg = ng4[lane + 32 * i];
      return make_float4(v.x * rs * gg.x, v.y * rs * gg.y, v.z * rs * gg.z, v.w * rs * gg.w);
    });
  }
}

// The core broadcast of row m, h = x[b] * scale[c] + shift[c] (m = b * cores + c), into the warp's
// registers and h: the same fused multiply-add per element as core_film's kernel (the same bits).
__device__ __forceinline__ void film_row(const EventRouterArgs& a, int64_t m, int D, int lane, float4 (&hv)[kMaxVec]) {
  const int64_t b = m / a.cores, c = m % a.cores;
  const float4* x = reinterpret_cast<const float4*>(a.io->x + size_t(b) * D);
  const float4* sc = reinterpret_cast<const float4*>(a.film_scale + size_t(c) * D);
  const float4* sh = reinterpret_cast<const float4*>(a.film_shift + size_t(c) * D);
  float4* h = reinterpret_cast<float4*>(a.h + size_t(m) * D);
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i)
    if (i < D / 128) {
      const int k = lane + 32 * i;
      const float4 xv = x[k], s = sc[k], t = sh[k];
      hv[i] = make_float4(fmaf(xv.x, s.x, t.x), fmaf(xv.y, s.y, t.y), fmaf(xv.z, s.z, t.z), fmaf(xv.w, s.w, t.w));
    }
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i)
    if (i < D / 128) h[lane + 32 * i] = hv[i];
}

__global__ void __launch_bounds__(kWarps * 32) folded_event_router_kernel(EventRouterArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int D = static_cast<int>(a.d_model), nvec = D / 128;
  const int64_t m = a.row_begin + int64_t(blockIdx.x) * kWarps + warp;
  // Parameters, not outputs of the previous kernel: read before waiting for it, and staged in shared
  // memory. The folded vectors read from global in the dot products were L2 round trips on every
  // row's critical path (each warp reads all 20 KB); the FFN norm gain read from global inside
  // apply_row would be ordered behind the operand store before it (the compiler cannot rule out
  // aliasing), a chain of round trips at the end of the row.
  __shared__ float4 fold[kFolded * kMaxVec * 32];
  __shared__ float4 ngain[kMaxVec * 32];
  constexpr int kParamVec = (kFolded + 1) * kMaxVec * 32;  // float4 of fold, then of the gain
  constexpr int kPerThread = kParamVec / (kWarps * 32);
  const int fold_vec = kFolded * D / 4, param_vec = fold_vec + D / 4;
  const bool with_norm = a.norm_gain != nullptr;
  const auto param = [&](int idx) -> float4 {
    if (idx < fold_vec) return reinterpret_cast<const float4*>(a.router_fold)[idx];
    return reinterpret_cast<const float4*>(a.norm_gain)[idx - fold_vec];
  };
  float4 pv[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int idx = threadIdx.x + kWarps * 32 * j;
    if (idx < (with_norm ? param_vec : fold_vec)) pv[j] = param(idx);
  }
  const float swap_b = a.swap_b[0];
  float bank_b[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) bank_b[k] = a.bank_b[k];
  pdl_wait();  // h, ram, the maps and io were written by the previous kernels of the step
  pdl_launch_dependents();
  const bool active = m < a.row_begin + a.rows;
  const TracePtrs trace = load_trace(a.io);
  uint8_t map = 0;
  float4 hv[kMaxVec];
  RowState st{};
  if (active) {
    st = row_state(a.io->pool, a.ram, a.stream_map, m, a.cores, D);
    map = *st.map;
    if (a.film_scale)
      film_row(a, m, D, lane, hv);
    else
      load_row(a.h, m, D, lane, hv);
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int idx = threadIdx.x + kWarps * 32 * j;
    if (idx < fold_vec)
      fold[idx] = pv[j];
    else if (with_norm && idx < param_vec)
      ngain[idx - fold_vec] = pv[j];
  }
  __syncthreads();  // the parameters are in; the rows' loads are still in flight
  if (!active) return;
  // The five dot products h . f_j: per lane over its elements (float4 lane + 32 i), then over the warp.
  float t[kFolded] = {0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i)
    if (i < nvec) {
      const float4 v = hv[i];
#pragma unroll
      for (int j = 0; j < kFolded; ++j) {
        const float4 w = fold[j * (D / 4) + lane + 32 * i];
        t[j] += v.x * w.x + v.y * w.y + v.z * w.z + v.w * w.w;
      }
    }
  const float rs = row_rs(hv, D, a.eps);
  const float s = rs * warp_sum(t[0]) + swap_b;
  float l[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) l[k] = rs * warp_sum(t[1 + k]) + bank_b[k];
  apply_row(a, m, choose(s, l), reinterpret_cast<const float*>(ngain), st, map, hv, rs, lane, trace);
}

}  // namespace

std::vector<float> fold_router(const std::vector<float>& router_norm, const std::vector<float>& router_w,
                               const std::vector<float>& swap_w, const std::vector<float>& bank_w, int64_t d_model,
                               int64_t d_router) {
  const size_t D = static_cast<size_t>(d_model), R = static_cast<size_t>(d_router);
  SWAPFFN_REQUIRE(d_model > 0 && d_router > 0 && router_norm.size() == D && router_w.size() == R * D &&
                      swap_w.size() == R && bank_w.size() == 4 * R,
                  "fold_router: expected router_norm [" + std::to_string(D) + "], router_w [" + std::to_string(R) +
                      ", " + std::to_string(D) + "], swap_w [" + std::to_string(R) + "], bank_w [" +
                      std::to_string(R) + ", 4]; got " + std::to_string(router_norm.size()) + ", " +
                      std::to_string(router_w.size()) + ", " + std::to_string(swap_w.size()) + ", " +
                      std::to_string(bank_w.size()) + " values");
  std::vector<float> f(kFolded * D);
  for (size_t d = 0; d < D; ++d) {
    double acc[kFolded] = {0, 0, 0, 0, 0};
    for (size_t r = 0; r < R; ++r) {
      const double w = router_w[r * D + d];
      acc[0] += w * swap_w[r];
      for (size_t k = 0; k < 4; ++k) acc[1 + k] += w * bank_w[r * 4 + k];
    }
    for (size_t j = 0; j < kFolded; ++j) f[j * D + d] = static_cast<float>(double(router_norm[d]) * acc[j]);
  }
  return f;
}

void launch_folded_event_router(const EventRouterArgs& a, cudaStream_t stream, bool pdl) {
  SWAPFFN_ASSERT(a.row_begin >= 0 && a.rows >= 0 && a.row_begin + a.rows <= a.total_rows,
                 "folded event router: rows [" + std::to_string(a.row_begin) + ", " + std::to_string(a.row_begin + a.rows) +
                     ") are not within the " + std::to_string(a.total_rows) + " rows of the arrays");
  SWAPFFN_ASSERT(a.norm_out.any() == (a.norm_gain != nullptr),
                 "folded event router: the RMSNorm output and its gain must be given together");
  SWAPFFN_ASSERT(a.norm_out.well_formed(),
                 "folded event router: the RMSNorm output must be bf16 rows or e4m3 codes with their scales");
  if (a.rows == 0) return;
  SWAPFFN_ASSERT(folded_event_router_fits(a.d_model),
                 "folded event router needs d_model % 128 == 0 and <= " + std::to_string(kFoldedRouterMaxDModel) +
                     " (a warp holds its row in registers), got " + std::to_string(a.d_model));
  SWAPFFN_ASSERT(a.router_fold != nullptr, "folded event router: router_fold (the folded router vectors) is not set");
  SWAPFFN_ASSERT(a.io != nullptr, "folded event router: io (the step's StepIO) is not set");
  SWAPFFN_ASSERT((a.film_scale == nullptr) == (a.film_shift == nullptr),
                 "folded event router: the core broadcast's film_scale and film_shift must be given together");
  SWAPFFN_ASSERT(a.cores > 0 && a.total_rows % a.cores == 0,
                 "folded event router: total_rows (" + std::to_string(a.total_rows) +
                     ") must be whole sequences of cores (" + std::to_string(a.cores) + ")");
  // float4 loads of the folded vectors, the norm gain, h, the core broadcast's rows and the FFN
  // operand's rows.
  for (const auto& [p, name] : {std::pair<const void*, const char*>{a.router_fold, "router_fold"},
                                {a.norm_gain, "norm_gain"},
                                {a.h, "h"},
                                {a.film_scale, "film_scale"},
                                {a.film_shift, "film_shift"}})
    SWAPFFN_ASSERT(reinterpret_cast<uintptr_t>(p) % 16 == 0,
                   std::string("folded event router: ") + name + " is not 16-byte aligned (the kernel loads float4)");
  const int64_t ctas = (a.rows + kWarps - 1) / kWarps;
  launch_kernel_ex(folded_event_router_kernel, dim3(static_cast<unsigned>(ctas)), dim3(kWarps * 32), dim3(1, 1, 1), 0,
                   stream, pdl, a);
}

}  // namespace swapffn::cuda

// The head of one event of the fused backend with the router projection folded away (SPEC section
// 4, "swap"). The spec's z = (rms(h) * router_norm) @ router_w^T is used only through
// s = z . swap_w + swap_b and l = z @ bank_w + bank_b, both linear in z. So with rs = rsqrt(mean(h^2)
// + eps):
//   s   = rs * (h . f_s) + swap_b,       f_s = router_norm * (router_w^T swap_w)
//   l_k = rs * (h . f_k) + bank_b[k],    f_k = router_norm * (router_w^T bank_w[:, k])
// The five vectors depend on parameters only (fold_router, once at load). The R x D projection per
// row becomes
// five dot products over the row that the warp holds in registers; then the decision, the exchange,
// the trace and the FFN operand of the new h. The router's operand is not rounded to bf16 here, so
// its decisions are those of the fp32 chain up to fp32 reassociation: not the cuBLAS head's bits,
// which is why the head is a numerics class of the fused config (one choice for every batch size).
#pragma once
#include <cstdint>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/ffn_operand.hpp"
#include "cuda/kernels/step_io.hpp"

namespace swapffn::cuda {

struct EventRouterArgs {
  float* h;                       // [M, D] fp32, updated in place on a swap
  const float* swap_b;            // [1]
  const float* bank_b;            // [4]
  __nv_bfloat16* ram;             // [M, 4, D]: the batch's (in a slot step, rows use their slots: row_state)
  uint8_t* stream_map;            // [M]
  const StepIO* io;               // trace: io->gate/slot [E, M] of this token, or null; io->pool
  int event;
  // This launch moves rows [row_begin, row_begin + rows) of the M = total_rows rows the arrays hold
  // (the fused backend's row groups run one launch each; total_rows is also the trace's row stride).
  int64_t row_begin, rows, total_rows;
  int64_t d_model;
  const float* norm_gain;  // [D] FFN norm.weight, or null (then norm_out is not written)
  FfnOperand norm_out;     // the FFN operand of rows [row_begin, row_begin + rows), at row_begin
  float eps;
  const float* router_fold;  // [5, D]: fold_router's vectors
  int64_t cores;  // rows per sequence (row m is core m % cores of sequence m / cores)
  // The step's first event can also do the core broadcast (core_film.hpp), one kernel fewer: with
  // film_scale set, row m's h is x[m / cores] * film_scale[m % cores] + film_shift[m % cores]
  // (x = io->x), written, not read.
  const float* film_scale = nullptr;  // [cores, D]
  const float* film_shift = nullptr;  // [cores, D]
};

// The folded router vectors [5, D] (f_s, then f_0..f_3), from the fp32 values of router_norm [D],
// router_w [R, D], swap_w [R] and bank_w [R, 4]; sums in double, rounded once to fp32.
std::vector<float> fold_router(const std::vector<float>& router_norm, const std::vector<float>& router_w,
                               const std::vector<float>& swap_w, const std::vector<float>& bank_w, int64_t d_model,
                               int64_t d_router);

// A warp holds its row in registers: D % 128 == 0 and D <= 1024.
inline constexpr int64_t kFoldedRouterMaxDModel = 1024;
inline bool folded_event_router_fits(int64_t d_model) {
  return d_model > 0 && d_model % 128 == 0 && d_model <= kFoldedRouterMaxDModel;
}

// One event over rows [a.row_begin, a.row_begin + a.rows). With a.film_scale set (the step's first event), h is not
// read but computed from io->x, film_scale and film_shift and written (the core broadcast). With
// pdl, a programmatic dependent of the previous kernel.
void launch_folded_event_router(const EventRouterArgs& a, cudaStream_t stream, bool pdl);

}  // namespace swapffn::cuda

// The head of one event of the fused backend with the router projection folded away (SPEC section
// 4, "swap"). The spec's z = (rms(h) * router_norm) @ router_w^T is used only through
// s = z . swap_w + swap_b and l = z @ bank_w + bank_b, both linear in z. So with rs = rsqrt(mean(h^2)
// + eps):
//   s   = rs * (h . f_s) + swap_b,       f_s = router_norm * (router_w^T swap_w)
//   l_k = rs * (h . f_k) + bank_b[k],    f_k = router_norm * (router_w^T bank_w[:, k])
// The five vectors depend on parameters only (fold_router, once at load). The R x D projection per
// row (and the 128 KB router_w that every CTA of the MMA router copies into shared memory) becomes
// five dot products over the row that the warp holds in registers; then the exchange, trace and FFN
// operand of event_router_row.cuh's apply_row. The router's operand is not rounded to bf16 here, so
// its decisions are those of the fp32 chain up to fp32 reassociation: not the MMA router's bits,
// which is why the router is a numerics class of the fused config (one choice for every batch size).
#pragma once
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/kernels/event_router.hpp"

namespace swapffn::cuda {

// The folded router vectors [5, D] (f_s, then f_0..f_3), from the fp32 values of router_norm [D],
// router_w [R, D], swap_w [R] and bank_w [R, 4]; sums in double, rounded once to fp32.
std::vector<float> fold_router(const std::vector<float>& router_norm, const std::vector<float>& router_w,
                               const std::vector<float>& swap_w, const std::vector<float>& bank_w, int64_t d_model,
                               int64_t d_router);

// Throws unless D % 128 == 0 and D <= 1024 (a warp holds its row in registers).
void check_folded_event_router_shape(int64_t d_model);

// One event over rows [a.row_begin, a.row_begin + a.rows) with a.router_fold; a.router_gain,
// router_w, swap_w and bank_w are not read. With a.film_scale set (the step's first event), h is not
// read but computed from io->x, film_scale and film_shift and written (the core broadcast). With
// pdl, a programmatic dependent of the previous kernel.
void launch_folded_event_router(const EventRouterArgs& a, cudaStream_t stream, bool pdl);

}  // namespace swapffn::cuda

// The head of one event of the fused backend, in one kernel (SPEC section 4, "swap"):
//   z = bf16(rms(h) * router_norm) @ router_w^T, s = z . swap_w + swap_b, l = z @ bank_w + bank_b,
//   j = argmax l (ties -> lowest), p = lane_j(map); if s > 0: exchange h and ram[p] (h written in
//   bf16), swap lanes 0 and j; then the FFN operand bf16(rms(h) * norm_gain) of the new h.
// Why one kernel: the unfused chain (RMSNorm, a skinny N = 64 GEMM, a per-row decision kernel) costs
// three launches and two round trips of z and h through L2 per event. Here a CTA takes 8 rows: the
// router weights (128 KB at the defaults) are bulk-copied into shared memory before the kernel waits
// on its predecessor (programmatic dependent launch), the rows are normalised into shared memory,
// warps run tensor-core MMAs (m16n8k16) over K-slices, the partial sums are added over warps in a
// fixed order (deterministic, batch invariant), and each warp then decides and moves its row.
// A first version streamed router_w from L2 in the MMA loop with 16 rows per CTA: 42 us per event
// at M = 512 (32 CTAs, few loads in flight). A form that split router_w over K across a cluster
// of 8 CTAs was slower (docs/PERF.md, fifth session): the chain of dependent steps, not the bytes
// of router_w, sets the time.
#pragma once
#include <cstdint>
#include <string>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/step_io.hpp"

namespace swapffn::cuda {

struct EventRouterArgs {
  float* h;                       // [M, D] fp32, updated in place on a swap
  const float* router_gain;       // [D] router_norm
  const __nv_bfloat16* router_w;  // [R, D]
  const float* swap_w;            // [R]
  const float* swap_b;            // [1]
  const float* bank_w;            // [R, 4]
  const float* bank_b;            // [4]
  __nv_bfloat16* ram;             // [M, 4, D]
  uint8_t* stream_map;            // [M]
  const StepIO* io;               // trace: io->gate/slot [E, M] of this token, or null
  int event;
  // This launch moves rows [row_begin, row_begin + rows) of the M = total_rows rows the arrays hold
  // (the fused backend's row groups run one launch each; total_rows is also the trace's row stride).
  int64_t row_begin, rows, total_rows;
  int64_t d_model, d_router;
  const float* norm_gain;   // [D] FFN norm.weight, or null (then norm_out is not written)
  __nv_bfloat16* norm_out;  // [M, D]
  float eps;
  // The folded router (folded_event_router.hpp) reads these five vectors [5, D] instead of
  // router_gain, router_w, swap_w and bank_w; the MMA router ignores them.
  const float* router_fold = nullptr;
  // The folded router's first event of a step can also do the core broadcast (core_film.hpp), so
  // that the step has one kernel fewer: with film_scale set, row m's h is computed as
  // x[m / cores] * film_scale[m % cores] + film_shift[m % cores] (x = io->x) and written, not read.
  // The MMA router refuses it.
  const float* film_scale = nullptr;  // [cores, D]
  const float* film_shift = nullptr;  // [cores, D]
  int64_t cores = 0;
};

// Rows per CTA; every form computes each row with the same operations in the same order
// (identical bits). automatic: the launcher's choice by rows per SM (event_router.cu says why).
enum class RouterGrid { automatic, cta8, cta16, cta32 };
RouterGrid parse_router_grid(const std::string& name);  // "auto", "8", "16", "32"
std::string to_string(RouterGrid g);

// Throws unless rows [row_begin, row_begin + rows) lie within total_rows and the RMSNorm output and
// its gain are given together (both event routers' launchers; `who` names the router).
void check_event_router_rows(const EventRouterArgs& a, const std::string& who);

// Throws unless D % 128 == 0, R % 16 == 0, R <= 64 and the shared memory fits this GPU.
void check_event_router_shape(int64_t d_model, int64_t d_router);
// With pdl, the kernel is launched as a programmatic dependent of the previous kernel in the stream.
void launch_event_router(const EventRouterArgs& a, cudaStream_t stream, bool pdl,
                         RouterGrid grid = RouterGrid::automatic);

}  // namespace swapffn::cuda

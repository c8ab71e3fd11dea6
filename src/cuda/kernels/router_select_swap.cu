#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/router_select_swap.hpp"
#include "cuda/kernels/router_decision.cuh"
#include "cuda/kernels/row_reduce.cuh"

namespace swapffn::cuda {

namespace {
constexpr int kThreads = 256;

// One block per row: warp 0 makes the decisions, the whole block moves the row.
__global__ void __launch_bounds__(kThreads) router_select_swap_kernel(RouterSelectSwapArgs a) {
  __shared__ float smem[kThreads / 32];
  __shared__ int decision;  // bit 0: gate, bits 1-2: physical bank
  const int64_t m = blockIdx.x, D = a.d_model;
  const RowState st = row_state(a.io->pool, a.ram, a.stream_map, m, a.cores, D);
  if (threadIdx.x < 32) {
    const RowDecision d = decide_row(a.z + m * a.d_router, static_cast<int>(a.d_router), a.swap_w, a.swap_b[0],
                                     a.bank_w, a.bank_b, static_cast<int>(threadIdx.x));
    if (threadIdx.x == 0) {
      const uint8_t map = *st.map;
      apply_decision(d, map, st.map, m, load_trace(a.io), a.event, a.rows);
      decision = (d.gate ? 1 : 0) | (map_lane(map, d.slot) << 1);
    }
  }
  __syncthreads();
  const bool gate = decision & 1;
  const int p = decision >> 1;
  float* h = a.h + m * D;
  __nv_bfloat16* bank = st.ram + p * D;
  float ss = 0.f;
  for (int64_t d = threadIdx.x; d < D; d += kThreads) {
    float v = h[d];
    if (gate) {
      const float from_ram = __bfloat162float(bank[d]);
      bank[d] = __float2bfloat16_rn(v);
      v = from_ram;
      h[d] = v;
    }
    ss += v * v;
  }
  if (a.norm_out) store_rmsnorm_row<kThreads>(h, ss, a.norm_gain, a.norm_out + m * D, D, a.eps, smem);
}
}  // namespace

void launch_router_select_swap(const RouterSelectSwapArgs& a, cudaStream_t stream) {
  SWAPFFN_ASSERT((a.norm_gain == nullptr) == (a.norm_out == nullptr),
                 "router_select_swap: norm gain and output go together");
  SWAPFFN_ASSERT(a.cores > 0 && a.rows % a.cores == 0, "router_select_swap: rows (" + std::to_string(a.rows) +
                                                           ") must be whole sequences of cores (" +
                                                           std::to_string(a.cores) + ")");
  if (a.rows == 0) return;
  router_select_swap_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda

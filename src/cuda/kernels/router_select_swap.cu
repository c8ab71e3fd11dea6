#include "cuda/cuda_check.hpp"
#include "cuda/kernels/router_select_swap.hpp"
#include "cuda/kernels/row_reduce.cuh"
#include "cuda/kernels/stream_map.cuh"

namespace swapffn::cuda {

namespace {
constexpr int kThreads = 256;

// One block per row: warp 0 makes the decisions, the whole block moves the row.
__global__ void __launch_bounds__(kThreads) router_select_swap_kernel(RouterSelectSwapArgs a) {
  __shared__ float smem[kThreads / 32];
  __shared__ int decision;  // bit 0: gate, bits 1-2: physical bank
  const int64_t m = blockIdx.x, D = a.d_model;
  if (threadIdx.x < 32) {
    const float* z = a.z + m * a.d_router;
    float s = 0.f, l[4] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t r = threadIdx.x; r < a.d_router; r += 32) {
      const float zr = z[r];
      s += zr * a.swap_w[r];
#pragma unroll
      for (int k = 0; k < 4; ++k) l[k] += zr * a.bank_w[r * 4 + k];
    }
    s = warp_sum(s) + a.swap_b[0];
#pragma unroll
    for (int k = 0; k < 4; ++k) l[k] = warp_sum(l[k]) + a.bank_b[k];
    if (threadIdx.x == 0) {
      int j = 0;
#pragma unroll
      for (int k = 1; k < 4; ++k)
        if (l[k] > l[j]) j = k;  // strict: ties keep the lowest index
      const uint8_t map = a.stream_map[m];
      const int p = map_lane(map, j);
      const bool gate = s > 0.f;
      if (gate) a.stream_map[m] = swap_lanes_0_j(map, j);
      if (uint8_t* g = a.io->gate) {
        g[static_cast<int64_t>(a.event) * a.rows + m] = gate ? 1 : 0;
        a.io->slot[static_cast<int64_t>(a.event) * a.rows + m] = static_cast<uint8_t>(j);
      }
      decision = (gate ? 1 : 0) | (p << 1);
    }
  }
  __syncthreads();
  const bool gate = decision & 1;
  const int p = decision >> 1;
  float* h = a.h + m * D;
  __nv_bfloat16* bank = a.ram + (m * 4 + p) * D;
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
  SWAPFFN_REQUIRE((a.norm_gain == nullptr) == (a.norm_out == nullptr),
                  "router_select_swap: norm gain and output go together");
  if (a.rows == 0) return;
  router_select_swap_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda

// The collapse as one cooperative kernel: three phases over small grids, each a few microseconds of
// dependent L2 round trips at B = 1, used to be four kernels plus a one-thread pointer-advance
// kernel, and each kernel boundary in the graph cost more than a grid barrier. The pooling's two
// kernels (chunk partials, then their sum) are one phase whose partials meet in shared memory. Every
// sum keeps the summation order of the separate kernels (same bits).
#include <algorithm>
#include <atomic>

#include <cooperative_groups.h>

#include "cuda/cuda_check.hpp"
#include "cuda/kernels/collapse.hpp"
#include "cuda/kernels/row_reduce.cuh"
#include "cuda/launch.hpp"

namespace swapffn::cuda {

namespace {
constexpr int kChunk = 32;     // cores per partial sum
constexpr int kThreads = 256;  // 8 warps: one output each in the dot products
constexpr int kWarps = kThreads / 32;
constexpr int kKPerPass = 8;   // k accumulated per pass over a chunk's values of h
constexpr int kPoolCols = 32;  // d columns of one pooling item: one per lane
constexpr int kGroupChunks = 2 * kWarps;  // chunks whose partials meet in shared memory at a time
static_assert(kKPerPass * kPoolCols == kThreads, "each thread sums the chunk partials of one (k, d) of a pass");

// Work items of the three phases.
struct Phases {
  int64_t pool_cols;     // ceil(D / kPoolCols)
  int64_t chunks;        // ceil(C / kChunk)
  int64_t pool_items;    // pool_cols * B: one block each
  int64_t basis_items;   // B * Rc: one block each
  int64_t decode_warps;  // B * D: one warp each
};

Phases phases_of(const CollapseArgs& a) {
  Phases p{};
  p.pool_cols = (a.d_model + kPoolCols - 1) / kPoolCols;
  p.chunks = (a.cores + kChunk - 1) / kChunk;
  p.pool_items = p.pool_cols * a.batch;
  p.basis_items = a.batch * a.collapse_r;
  p.decode_warps = a.batch * a.d_model;
  return p;
}

struct PoolSmem {
  float alpha[kWarps][kChunk][kKPerPass];          // each warp's current chunk of core_alpha
  float part[kGroupChunks][kKPerPass][kPoolCols];  // the group's chunk partials
};

// pooled[b, k, d] for the item's 32 columns (d: one per lane). Per chunk of 32 cores, the partial
// sum over the chunk's cores c (ascending) of alpha[c, k] * h[b, c, d]; then the chunks' partials
// added in ascending chunk order. Each warp takes two chunks of a group of 16: its lanes load both
// chunks' 32 values of h and their alpha at once (all in flight; one load per iteration was a
// chain of dependent L2 round trips), alpha then going through the warp's own shared slice. The
// partials meet in shared memory, where thread (k, d) adds them to its running sum. Every addition
// is in the order of the two kernels this replaced (partials through a global workspace, then a
// pass summing the chunks), so the bits are the same, without that pass's grid barrier and round
// trip.
__device__ void pool(const CollapseArgs& a, const Phases& p, int64_t item, PoolSmem& sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = item / p.pool_cols, D = a.d_model, K = a.collapse_k;
  const int64_t d = item % p.pool_cols * kPoolCols + lane;
  const bool active = d < D;
  const int kk = threadIdx.x / kPoolCols;  // the k of the pass whose sum this thread keeps
  for (int64_t k0 = 0; k0 < K; k0 += kKPerPass) {
    float total = 0.f;
    for (int64_t g0 = 0; g0 < p.chunks; g0 += kGroupChunks) {
      // Both chunks' values of h and alpha first (all loads in flight together), then one chunk at
      // a time.
      constexpr int kAlphaPerLane = kChunk * kKPerPass / 32;
      float hv[2][kChunk], av[2][kAlphaPerLane];
      int n[2];
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int64_t c0 = (g0 + warp + s * kWarps) * kChunk;
        n[s] = static_cast<int>(c0 >= a.cores ? 0 : c0 + kChunk < a.cores ? kChunk : a.cores - c0);
#pragma unroll
        for (int i = 0; i < kChunk; ++i)
          hv[s][i] = active && i < n[s] ? a.h[(b * a.cores + c0 + i) * D + d] : 0.f;
#pragma unroll
        for (int q = 0; q < kAlphaPerLane; ++q) {
          const int i = (lane + 32 * q) / kKPerPass, j = (lane + 32 * q) % kKPerPass;
          av[s][q] = i < n[s] && k0 + j < K ? a.alpha[(c0 + i) * K + k0 + j] : 0.f;
        }
      }
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        if (n[s] == 0) break;
        const int slot = warp + s * kWarps;
        __syncwarp();  // the warp's previous chunk is done reading its alpha
#pragma unroll
        for (int q = 0; q < kAlphaPerLane; ++q) (&sm.alpha[warp][0][0])[lane + 32 * q] = av[s][q];
        __syncwarp();
        float acc[kKPerPass] = {};
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          if (i >= n[s]) break;
#pragma unroll
          for (int j = 0; j < kKPerPass; ++j) acc[j] += sm.alpha[warp][i][j] * hv[s][i];
        }
#pragma unroll
        for (int j = 0; j < kKPerPass; ++j) sm.part[slot][j][lane] = acc[j];
      }
      __syncthreads();  // the group's partials are in
      for (int slot = 0; slot < kGroupChunks && g0 + slot < p.chunks; ++slot) total += sm.part[slot][kk][lane];
      __syncthreads();  // read before the next group (or pass, or item) overwrites them
    }
    if (active && k0 + kk < K) a.pooled[(b * K + k0 + kk) * D + d] = total;
  }
}

// zc[b, r] = sum_k pooled[b, k] . basis[k, r]; one block per (b, r), warp w taking k = w, w + 8, ...
// (a warp per (b, r) walking the K basis rows one after another was 224 warps at B = 1, 16 us).
__device__ void basis_product(const CollapseArgs& a, int64_t item, float* red) {
  const int64_t b = item / a.collapse_r, r = item % a.collapse_r;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t Rc = a.collapse_r, D = a.d_model;
  float acc = 0.f;
  for (int64_t k = warp; k < a.collapse_k; k += kWarps) {
    const float* pk = a.pooled + (b * a.collapse_k + k) * D;
    const __nv_bfloat16* basis = a.basis + (k * Rc + r) * D;
    if (D % 8 == 0) {
      // 16-byte loads, several in flight: a scalar walk here is a chain of dependent L2 round trips.
#pragma unroll 4
      for (int64_t i = lane; i < D / 8; i += 32) {
        const uint4 bv = reinterpret_cast<const uint4*>(basis)[i];
        const float4 p0 = reinterpret_cast<const float4*>(pk)[2 * i], p1 = reinterpret_cast<const float4*>(pk)[2 * i + 1];
        const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&bv);
        acc += p0.x * __low2float(b2[0]) + p0.y * __high2float(b2[0]) + p0.z * __low2float(b2[1]) +
               p0.w * __high2float(b2[1]) + p1.x * __low2float(b2[2]) + p1.y * __high2float(b2[2]) +
               p1.z * __low2float(b2[3]) + p1.w * __high2float(b2[3]);
      }
    } else {
      for (int64_t d = lane; d < D; d += 32) acc += pk[d] * __bfloat162float(basis[d]);
    }
  }
  acc = block_sum<kThreads>(acc, red);
  if (threadIdx.x == 0) a.zc[item] = a.silu ? acc / (1.f + expf(-acc)) : acc;
}

// delta[b, d] = decoder[d] . zc[b]; one warp per (b, d).
__device__ void decode(const CollapseArgs& a, int64_t w, float* delta) {
  const int lane = threadIdx.x % 32;
  const int64_t Rc = a.collapse_r, D = a.d_model;
  const int64_t b = w / D, d = w % D;
  const float* z = a.zc + b * Rc;
  const __nv_bfloat16* dec = a.decoder + d * Rc;
  float acc = 0.f;
  for (int64_t r = lane; r < Rc; r += 32) acc += __bfloat162float(dec[r]) * z[r];
  acc = warp_sum(acc);
  if (lane == 0) delta[w] = acc;
}

// (The minimum of one block per SM lets ptxas use the registers the pooling's 32 loads in flight
// want: left to itself it capped the kernel at 64 registers and spilled.)
__global__ void __launch_bounds__(kThreads, 1) collapse_kernel(CollapseArgs a, Phases p, int64_t x_stride,
                                                            int64_t trace_stride) {
  __shared__ PoolSmem pool_smem;
  __shared__ float red[kWarps];
  auto grid = cooperative_groups::this_grid();
  // Read before the first barrier: block 0 advances the pointers after the last one.
  float* const delta = a.io->delta;
  const int64_t blocks = gridDim.x;
  for (int64_t item = blockIdx.x; item < p.pool_items; item += blocks) pool(a, p, item, pool_smem);
  grid.sync();
  for (int64_t item = blockIdx.x; item < p.basis_items; item += blocks) basis_product(a, item, red);
  grid.sync();
  for (int64_t w = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32; w < p.decode_warps; w += blocks * kWarps)
    decode(a, w, delta);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    StepIO* io = a.io;
    io->x += x_stride;
    io->delta += x_stride;
    if (io->gate) {
      io->gate += trace_stride;
      io->slot += trace_stride;
    }
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

void launch_collapse_and_advance(const CollapseArgs& a, int64_t x_stride, int64_t trace_stride, cudaStream_t stream) {
  if (a.batch == 0) return;  // nothing to collapse, and both strides are zero
  const Phases p = phases_of(a);
  // As many blocks as the largest phase can use, capped at what is resident at once (a cooperative
  // launch must fit, and a grid barrier costs more with more blocks).
  const int64_t widest = std::max({p.pool_items, p.basis_items, ceil_div(p.decode_warps, kWarps)});
  static std::atomic<int> resident_on[kMaxDevices] = {};
  const int64_t resident = once_per_device(resident_on, [] {
    const int n = max_ctas_per_wave(collapse_kernel, dim3(kThreads), 0);
    SWAPFFN_REQUIRE(n > 0, "collapse: the kernel cannot be resident on this device");
    return n;
  });
  const auto grid = static_cast<unsigned>(std::min(widest, resident));
  launch_cooperative(collapse_kernel, dim3(grid), dim3(kThreads), stream, a, p, x_stride, trace_stride);
}

}  // namespace swapffn::cuda

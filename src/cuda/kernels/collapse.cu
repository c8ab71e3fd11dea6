// The collapse as one cooperative kernel: four phases over small grids, each a few microseconds of
// dependent L2 round trips at B = 1, used to be four kernels plus a one-thread pointer-advance
// kernel, and each kernel boundary in the graph cost more than a grid barrier. Every phase strides
// over the same work items as the separate kernels did, with the same summation orders (same bits).
#include <algorithm>
#include <atomic>

#include <cooperative_groups.h>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/collapse.hpp"
#include "cuda/kernels/row_reduce.cuh"
#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda {

namespace {
constexpr int kChunk = 32;     // cores per partial sum
constexpr int kThreads = 256;  // d values per pooling item; 8 warps, one output each, in the dot products
constexpr int kWarps = kThreads / 32;
constexpr int kKPerPass = 8;   // k accumulated per pass over a chunk's values of h

// Work items of the four phases (the grids of the four kernels this one replaced).
struct Phases {
  int64_t pool_cols;     // ceil(D / kThreads)
  int64_t chunks;        // ceil(C / kChunk)
  int64_t pool_items;    // pool_cols * chunks * B: one block each
  int64_t pooled;        // B * K * D: one thread each
  int64_t basis_items;   // B * Rc: one block each
  int64_t decode_warps;  // B * D: one warp each
};

Phases phases_of(const CollapseArgs& a) {
  Phases p{};
  p.pool_cols = (a.d_model + kThreads - 1) / kThreads;
  p.chunks = collapse_chunks(a.cores);
  p.pool_items = p.pool_cols * p.chunks * a.batch;
  p.pooled = a.batch * a.collapse_k * a.d_model;
  p.basis_items = a.batch * a.collapse_r;
  p.decode_warps = a.batch * a.d_model;
  return p;
}

// partial[b, chunk, k, d] = sum over the chunk's cores c (ascending) of alpha[c, k] * h[b, c, d].
// The chunk's 32 values of h are loaded into registers at once (all loads in flight; one load per
// iteration was a chain of 32 dependent L2 round trips), and so is the chunk's alpha, by the whole
// block into shared memory (read inside the loop behind its break on the chunk's length, its cache
// lines came as a chain of round trips). Then eight k per pass accumulate in ascending core order.
__device__ void pool_partial(const CollapseArgs& a, const Phases& p, int64_t item, float (*al)[kKPerPass]) {
  const int64_t col = item % p.pool_cols, chunk = item / p.pool_cols % p.chunks, b = item / (p.pool_cols * p.chunks);
  const int64_t d = col * kThreads + threadIdx.x, D = a.d_model, K = a.collapse_k;
  const bool active = d < D;  // every thread takes part in the block's alpha loads and barriers
  const int64_t c0 = chunk * kChunk;
  const int n = static_cast<int>(c0 + kChunk < a.cores ? kChunk : a.cores - c0);
  float hv[kChunk];
#pragma unroll
  for (int i = 0; i < kChunk; ++i) hv[i] = active && i < n ? a.h[(b * a.cores + c0 + i) * D + d] : 0.f;
  for (int64_t k0 = 0; k0 < K; k0 += kKPerPass) {
    __syncthreads();  // the previous pass (or item) is done reading al
    for (int e = threadIdx.x; e < kChunk * kKPerPass; e += kThreads) {
      const int i = e / kKPerPass, j = e % kKPerPass;
      al[i][j] = i < n && k0 + j < K ? a.alpha[(c0 + i) * K + k0 + j] : 0.f;
    }
    __syncthreads();
    float acc[kKPerPass] = {};
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i >= n) break;
#pragma unroll
      for (int j = 0; j < kKPerPass; ++j) acc[j] += al[i][j] * hv[i];
    }
#pragma unroll
    for (int j = 0; j < kKPerPass; ++j)
      if (active && k0 + j < K) a.partial[((b * p.chunks + chunk) * K + k0 + j) * D + d] = acc[j];
  }
}

// pooled[b, k, d] = sum over chunks (ascending) of partial[b, chunk, k, d].
__device__ void pool_finish(const CollapseArgs& a, const Phases& p, int64_t i) {
  const int64_t KD = a.collapse_k * a.d_model;
  const int64_t b = i / KD, kd = i % KD;
  float acc = 0.f;
  // Loads in flight, adds in order.
#pragma unroll 8
  for (int64_t ch = 0; ch < p.chunks; ++ch) acc += a.partial[(b * p.chunks + ch) * KD + kd];
  a.pooled[i] = acc;
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

// delta[b, d] = decoder[d] . zc[b]; one warp per (b, d). A padding row of a slot step gets zeros.
__device__ void decode(const CollapseArgs& a, int64_t w, float* delta, const SlotSource& slots) {
  const int lane = threadIdx.x % 32;
  const int64_t Rc = a.collapse_r, D = a.d_model;
  const int64_t b = w / D, d = w % D;
  const float* z = a.zc + b * Rc;
  const __nv_bfloat16* dec = a.decoder + d * Rc;
  float acc = 0.f;
  for (int64_t r = lane; r < Rc; r += 32) acc += __bfloat162float(dec[r]) * z[r];
  acc = warp_sum(acc);
  if (lane == 0) delta[w] = is_padding_row(slots, b) ? 0.f : acc;
}

__global__ void __launch_bounds__(kThreads) collapse_kernel(CollapseArgs a, Phases p, int64_t x_stride,
                                                            int64_t trace_stride) {
  __shared__ float al[kChunk][kKPerPass];
  __shared__ float red[kWarps];
  auto grid = cooperative_groups::this_grid();
  // Read before the first barrier: block 0 advances the pointers after the last one.
  float* const delta = a.io->delta;
  const SlotSource slots = a.io->pool;
  const int64_t blocks = gridDim.x, threads = blocks * kThreads;
  for (int64_t item = blockIdx.x; item < p.pool_items; item += blocks) pool_partial(a, p, item, al);
  grid.sync();
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < p.pooled; i += threads) pool_finish(a, p, i);
  grid.sync();
  for (int64_t item = blockIdx.x; item < p.basis_items; item += blocks) basis_product(a, item, red);
  grid.sync();
  for (int64_t w = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32; w < p.decode_warps; w += blocks * kWarps)
    decode(a, w, delta, slots);
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

int64_t collapse_chunks(int64_t cores) { return (cores + kChunk - 1) / kChunk; }

void launch_collapse_and_advance(const CollapseArgs& a, int64_t x_stride, int64_t trace_stride, cudaStream_t stream) {
  if (a.batch == 0) return;  // nothing to collapse, and both strides are zero
  const Phases p = phases_of(a);
  // As many blocks as the largest phase can use, capped at what is resident at once (a cooperative
  // launch must fit, and a grid barrier costs more with more blocks).
  const int64_t widest = std::max({p.pool_items, ceil_div(p.pooled, kThreads), p.basis_items,
                                   ceil_div(p.decode_warps, kWarps)});
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

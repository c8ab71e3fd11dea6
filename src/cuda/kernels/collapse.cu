#include "cuda/cuda_check.hpp"
#include "cuda/kernels/collapse.hpp"
#include "cuda/kernels/row_reduce.cuh"

namespace swapffn::cuda {

namespace {
constexpr int kChunk = 32;        // cores per partial sum
constexpr int kPoolThreads = 128;  // d values per block in the pooling kernels
constexpr int kWarpThreads = 256;  // 8 warps, one output each, in the dot-product kernels

// partial[b, chunk, k, d] = sum over the chunk's cores c (ascending) of alpha[c, k] * h[b, c, d].
// The chunk's 32 values of h are loaded into registers at once (all loads in flight; a loop
// loading one per iteration was a chain of 32 dependent L2 round trips, ~12 us at B = 1), and so
// is the chunk's alpha, by the whole block into shared memory (read inside the loop, behind its
// break on the chunk's length, its 8 cache lines had come as a chain of L2 round trips: 13.9 us at
// B = 1). Then eight k per pass accumulate over them in the same ascending order.
__global__ void __launch_bounds__(kPoolThreads) collapse_pool_partial_kernel(CollapseArgs a) {
  constexpr int kKPerPass = 8;
  __shared__ float al[kChunk][kKPerPass];
  const int64_t d = blockIdx.x * int64_t{kPoolThreads} + threadIdx.x;
  const int64_t chunk = blockIdx.y, b = blockIdx.z, D = a.d_model, K = a.collapse_k;
  const bool active = d < D;  // every thread takes part in the block's alpha loads and barriers
  const int64_t c0 = chunk * kChunk;
  const int n = static_cast<int>(c0 + kChunk < a.cores ? kChunk : a.cores - c0);
  const int64_t chunks = gridDim.y;
  float hv[kChunk];
#pragma unroll
  for (int i = 0; i < kChunk; ++i) hv[i] = active && i < n ? a.h[(b * a.cores + c0 + i) * D + d] : 0.f;
  for (int64_t k0 = 0; k0 < K; k0 += kKPerPass) {
    if (k0 > 0) __syncthreads();  // the previous pass is done reading al
    for (int e = threadIdx.x; e < kChunk * kKPerPass; e += kPoolThreads) {
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
      if (active && k0 + j < K) a.partial[((b * chunks + chunk) * K + k0 + j) * D + d] = acc[j];
  }
}

// pooled[b, k, d] = sum over chunks (ascending) of partial[b, chunk, k, d].
__global__ void __launch_bounds__(kPoolThreads) collapse_pool_finish_kernel(CollapseArgs a, int64_t chunks) {
  const int64_t KD = a.collapse_k * a.d_model;
  const int64_t i = blockIdx.x * int64_t{kPoolThreads} + threadIdx.x;
  if (i >= a.batch * KD) return;
  const int64_t b = i / KD, kd = i % KD;
  float acc = 0.f;
#pragma unroll 8
  for (int64_t ch = 0; ch < chunks; ++ch) acc += a.partial[(b * chunks + ch) * KD + kd];  // loads in flight, adds in order
  a.pooled[i] = acc;
}

// zc[b, r] = sum_k pooled[b, k] . basis[k, r]; one block per (b, r), warp w taking k = w, w + 8, ...
// (a warp per (b, r) walked the K basis rows one after another: 224 warps at B = 1, 16 us).
__global__ void __launch_bounds__(kWarpThreads) collapse_basis_kernel(CollapseArgs a) {
  __shared__ float red[kWarpThreads / 32];
  const int64_t b = blockIdx.x / a.collapse_r, r = blockIdx.x % a.collapse_r;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t Rc = a.collapse_r, D = a.d_model;
  float acc = 0.f;
  for (int64_t k = warp; k < a.collapse_k; k += kWarpThreads / 32) {
    const float* p = a.pooled + (b * a.collapse_k + k) * D;
    const __nv_bfloat16* basis = a.basis + (k * Rc + r) * D;
    if (D % 8 == 0) {
      // 16-byte loads, several in flight: a scalar walk here is a chain of dependent L2 round trips.
#pragma unroll 4
      for (int64_t i = lane; i < D / 8; i += 32) {
        const uint4 bv = reinterpret_cast<const uint4*>(basis)[i];
        const float4 p0 = reinterpret_cast<const float4*>(p)[2 * i], p1 = reinterpret_cast<const float4*>(p)[2 * i + 1];
        const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&bv);
        acc += p0.x * __low2float(b2[0]) + p0.y * __high2float(b2[0]) + p0.z * __low2float(b2[1]) +
               p0.w * __high2float(b2[1]) + p1.x * __low2float(b2[2]) + p1.y * __high2float(b2[2]) +
               p1.z * __low2float(b2[3]) + p1.w * __high2float(b2[3]);
      }
    } else {
      for (int64_t d = lane; d < D; d += 32) acc += p[d] * __bfloat162float(basis[d]);
    }
  }
  acc = block_sum<kWarpThreads>(acc, red);
  if (threadIdx.x == 0) a.zc[blockIdx.x] = a.silu ? acc / (1.f + expf(-acc)) : acc;
}

// delta[b, d] = decoder[d] . zc[b]; one warp per (b, d).
__global__ void __launch_bounds__(kWarpThreads) collapse_decode_kernel(CollapseArgs a) {
  const int64_t w = blockIdx.x * int64_t{kWarpThreads / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t Rc = a.collapse_r, D = a.d_model;
  if (w >= a.batch * D) return;
  const int64_t b = w / D, d = w % D;
  const float* z = a.zc + b * Rc;
  const __nv_bfloat16* dec = a.decoder + d * Rc;
  float acc = 0.f;
  for (int64_t r = lane; r < Rc; r += 32) acc += __bfloat162float(dec[r]) * z[r];
  acc = warp_sum(acc);
  if (lane == 0) a.io->delta[w] = acc;
}

unsigned blocks(int64_t items, int per_block) { return static_cast<unsigned>((items + per_block - 1) / per_block); }
}  // namespace

int64_t collapse_chunks(int64_t cores) { return (cores + kChunk - 1) / kChunk; }

void launch_collapse(const CollapseArgs& a, cudaStream_t stream) {
  if (a.batch == 0) return;
  const int64_t chunks = collapse_chunks(a.cores);
  SWAPFFN_REQUIRE(chunks <= 65535 && a.batch <= 65535,
                  "collapse: too many cores or sequences for one launch grid");
  SWAPFFN_REQUIRE(a.batch * a.collapse_r <= int64_t{0x7fffffff}, "collapse: batch * collapse_r too large for one grid");
  const dim3 pool_grid(blocks(a.d_model, kPoolThreads), static_cast<unsigned>(chunks),
                       static_cast<unsigned>(a.batch));
  collapse_pool_partial_kernel<<<pool_grid, kPoolThreads, 0, stream>>>(a);
  SWAPFFN_CHECK_LAUNCH();
  collapse_pool_finish_kernel<<<blocks(a.batch * a.collapse_k * a.d_model, kPoolThreads), kPoolThreads, 0,
                                stream>>>(a, chunks);
  SWAPFFN_CHECK_LAUNCH();
  collapse_basis_kernel<<<static_cast<unsigned>(a.batch * a.collapse_r), kWarpThreads, 0, stream>>>(a);
  SWAPFFN_CHECK_LAUNCH();
  collapse_decode_kernel<<<blocks(a.batch * a.d_model, kWarpThreads / 32), kWarpThreads, 0, stream>>>(a);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda

// NVFP4 batched GEMV on Hopper: c[m, l] = fp16(sum_k a[m,k,l] b[0,k,l]).
//
// Why it exists: the GEMV is bound by streaming `a` from HBM once (K/2 bytes per row plus K/16
// scale bytes), so the kernel is built around the loads: every lane issues 16-byte streaming loads
// (ld.global.cs: evict-first, `a` is never re-read) for four rows at once and prefetches the next
// k-chunk before decoding the current one, and split-K over CTAs fills all SMs when M * L is small.
// The multiply-add runs on the tensor cores (mma m16n8k16 with b in column 0 of the n8 tile):
// decoding to fp16 pairs and one MMA per 256 products costs about half the ALU work of fp32 FMAs,
// keeps fp32 accumulation, and leaves the ALUs free for the dequantization.
//
// Work split: a CTA owns 32 rows (a warp's two m16 tiles); its `Warps` warps take interleaved
// 128-element k-chunks (each lane 32 elements = one 16-byte load per row) of the CTA's K range;
// warps then reduce through shared memory in warp order and split-K partials are summed by the
// last-arriving CTA in split order, so the result is deterministic.
#include <cuda_fp16.h>

#include "cuda/cuda_check.hpp"
#include "cuda/kernels/nvfp4/nvfp4_dequant.cuh"
#include "cuda/kernels/nvfp4/nvfp4_launch.hpp"
#include "cuda/kernels/nvfp4/nvfp4_tile_mainloop.cuh"
#include "swapffn/error.hpp"

namespace swapffn::cuda::nvfp4 {

namespace {

// Rows per CTA = rows per warp: two m16 tiles. Four tiles (64 rows) needed 235 registers, which
// left 8 warps per SM and too few loads in flight (profiled: 22% of DRAM bandwidth); two tiles
// fit in 128 registers, so 16 warps per SM stream `a`, at the price of decoding b for every
// 64 instead of 128 rows.
constexpr int kMT = 2;
constexpr int kRowsPerCta = 16 * kMT;
static_assert(kRowsPerCta == kGemvRowsPerCta, "API and kernel must agree on the GEMV row block");
constexpr int kMaxThreadsPerSm = 512;  // 128 registers per thread
constexpr int kChunk = 128;  // k elements per chunk: 4 lanes x 32

// Scale pair (scale columns j, j+1, j even) of `row`, plain or blocked; both bytes are adjacent.
__device__ __forceinline__ int64_t scale_pair_offset(const OperandArgs& op, int64_t row, int64_t k, int64_t j) {
  if (op.rk_blocks == 0) return row * (k / 16) + j;
  return (row / 128) * op.rk_blocks * 512 + (j / 4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 + (j % 4);
}

struct ChunkRegs {
  uint4 a[2 * kMT];       // rows mt*16 + g (+8): index 2*mt + half
  uint32_t sa[2 * kMT];   // their scale pairs
  uint4 b;
  uint32_t sb;
};

template <int Warps>
__global__ void __launch_bounds__(Warps * 32, kMaxThreadsPerSm / (Warps * 32)) nvfp4_gemv_kernel(const GemvArgs args) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int row_block = blockIdx.x, split = blockIdx.y, batch = blockIdx.z;
  const int64_t row_base = static_cast<int64_t>(row_block) * kRowsPerCta;
  const uint8_t* a = args.a.data + batch * args.a.data_batch;
  const uint8_t* sfa = args.a.scales + batch * args.a.scale_batch;
  const uint8_t* b = args.b.data + batch * args.b.data_batch;
  const uint8_t* sfb = args.b.scales + batch * args.b.scale_batch;
  const int64_t chunks = (args.k + kChunk - 1) / kChunk;
  const int64_t c0 = split * chunks / args.split_k, c1 = (split + 1) * chunks / args.split_k;

  auto load = [&](int64_t chunk, ChunkRegs& r) {
    const int64_t kk = chunk * kChunk + 32 * t;  // this lane's 32 elements
    const bool kok = kk < args.k;
#pragma unroll
    for (int i = 0; i < 2 * kMT; ++i) {
      const int64_t row = row_base + (i >> 1) * 16 + g + (i & 1) * 8;
      const bool ok = kok && row < args.m;
      r.a[i] = ok ? __ldcs(reinterpret_cast<const uint4*>(a + row * (args.k / 2) + kk / 2)) : make_uint4(0, 0, 0, 0);
      r.sa[i] = ok ? __ldcs(reinterpret_cast<const unsigned short*>(sfa + scale_pair_offset(args.a, row, args.k, kk / 16))) : 0u;
    }
    r.b = kok ? __ldg(reinterpret_cast<const uint4*>(b + kk / 2)) : make_uint4(0, 0, 0, 0);
    r.sb = kok ? __ldg(reinterpret_cast<const unsigned short*>(sfb + scale_pair_offset(args.b, 0, args.k, kk / 16))) : 0u;
  };

  float acc[kMT][4] = {};
  auto compute = [&](const ChunkRegs& r) {
    uint32_t hb[16];
    dequant32(r.b, r.sb, hb);
    // b is column 0 of the n8 tile: only lanes with g == 0 hold it, the other columns are zero.
#pragma unroll
    for (int i = 0; i < 16; ++i) hb[i] = g == 0 ? hb[i] : 0u;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      uint32_t lo[16], hi[16];
      dequant32(r.a[2 * mt], r.sa[2 * mt], lo);
      dequant32(r.a[2 * mt + 1], r.sa[2 * mt + 1], hi);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t frag[4] = {lo[2 * j], hi[2 * j], lo[2 * j + 1], hi[2 * j + 1]};
        mma_16816(acc[mt], frag, hb[2 * j], hb[2 * j + 1]);
      }
    }
  };
  // Two register buffers in ping-pong (no copies between them, which would wait for the loads):
  // while one chunk is decoded the next one's loads are in flight.
  ChunkRegs r0, r1;
  int64_t chunk = c0 + warp;
  if (chunk < c1) load(chunk, r0);
  for (; chunk < c1; chunk += 2 * Warps) {
    if (chunk + Warps < c1) load(chunk + Warps, r1);
    compute(r0);
    if (chunk + Warps >= c1) break;
    if (chunk + 2 * Warps < c1) load(chunk + 2 * Warps, r0);
    compute(r1);
  }

  // Column 0 lives in lanes with t == 0: acc[mt][0] is row mt*16+g, acc[mt][2] row mt*16+g+8.
  __shared__ float red[Warps][kRowsPerCta];
  if (t == 0) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      red[warp][mt * 16 + g] = acc[mt][0];
      red[warp][mt * 16 + g + 8] = acc[mt][2];
    }
  }
  __syncthreads();
  float v = 0.0f;
  if (threadIdx.x < kRowsPerCta) {
    v = red[0][threadIdx.x];
#pragma unroll
    for (int w = 1; w < Warps; ++w) v += red[w][threadIdx.x];
  }
  if (args.split_k > 1) {
    const int64_t tile = static_cast<int64_t>(batch) * gridDim.x + row_block;
    float* part = args.partials + tile * args.split_k * kRowsPerCta;
    if (threadIdx.x < kRowsPerCta) __stcg(part + split * kRowsPerCta + threadIdx.x, v);
    __threadfence();
    __syncthreads();
    __shared__ int is_last;
    if (threadIdx.x == 0) is_last = atomicAdd(args.counters + tile, 1) == args.split_k - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    if (threadIdx.x < kRowsPerCta) {
      v = __ldcg(part + threadIdx.x);
      for (int s = 1; s < args.split_k; ++s) v += __ldcg(part + s * kRowsPerCta + threadIdx.x);
    }
    if (threadIdx.x == 0) args.counters[tile] = 0;
  }
  const int64_t row = row_base + threadIdx.x;
  if (threadIdx.x < kRowsPerCta && row < args.m)
    static_cast<__half*>(args.c)[batch * args.m + row] = __float2half_rn(v);
}

template <int Warps>
void launch(const GemvArgs& args, cudaStream_t stream) {
  static_assert(Warps * 32 >= kRowsPerCta, "the final reduction uses one thread per row");
  static_assert(Warps * 32 <= kMaxThreadsPerSm, "launch bounds need at least one CTA per SM");
  const dim3 grid(static_cast<unsigned>((args.m + kRowsPerCta - 1) / kRowsPerCta), static_cast<unsigned>(args.split_k),
                  static_cast<unsigned>(args.l));
  nvfp4_gemv_kernel<Warps><<<grid, Warps * 32, 0, stream>>>(args);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace

void launch_gemv(const GemvArgs& args, int warps, cudaStream_t stream) {
  switch (warps) {
    case 2: launch<2>(args, stream); return;
    case 4: launch<4>(args, stream); return;
    case 8: launch<8>(args, stream); return;
    default: SWAPFFN_FAIL("NVFP4 GEMV supports 2, 4 or 8 warps per CTA, not " + std::to_string(warps));
  }
}

}  // namespace swapffn::cuda::nvfp4

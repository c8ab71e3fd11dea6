// NVFP4 batched GEMV on Hopper: c[m, l] = fp16(sum_k a[m,k,l] b[0,k,l]).
//
// Why it exists: the GEMV is bound by streaming `a` from HBM once (K/2 bytes per row plus K/16
// scale bytes), so the kernel is built around the loads: every lane issues 16-byte streaming loads
// (ld.global.cs: evict-first, `a` is never re-read) for four rows at once and prefetches the next
// k-chunk before decoding the current one, and split-K over CTAs fills all SMs when M * L is small.
// The decode is int8: twice an e2m1 value is an integer in [-12, 12]; PRMT byte-table look-ups
// turn the nibbles into int8 and DP4A sums a block's 16 products exactly in int32; the block's sum
// is scaled once by sfa * sfb / 4 (one FFMA): ~2.3 instructions per element against ~5.5 for an
// fp16 decode into MMAs, so the kernel is bound by the loads it keeps in flight.
//
// Work split: a CTA owns 32 rows (a warp's two m16 tiles); its `Warps` warps take interleaved
// 128-element k-chunks (each lane 32 elements = one 16-byte load per row) of the CTA's K range;
// warps then reduce through shared memory in warp order and split-K partials are summed by the
// last-arriving CTA in split order, so the result is deterministic.
#include <cuda_fp16.h>

#include "cuda/runtime/cuda_check.hpp"
#include "nvfp4_gemv_int8.cuh"
#include "nvfp4_launch.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda::nvfp4 {

namespace {

using gemv::b_int8;
using gemv::block_dot16;
using gemv::scale_pair_offset;
using gemv::scales_f32;

// Rows per CTA = rows per warp: two m16 tiles. Four tiles (64 rows) needed 235 registers, which
// left 8 warps per SM and too few loads in flight (profiled: 22% of DRAM bandwidth); two tiles
// fit in 128 registers, so 16 warps per SM stream `a`, at the price of decoding b for every
// 64 instead of 128 rows.
constexpr int kMT = 2;
constexpr int kRowsPerCta = 16 * kMT;
static_assert(kRowsPerCta == kGemvRowsPerCta, "API and kernel must agree on the GEMV row block");
// 128 registers per thread: the int8 decode spilled 248 bytes at 80 with its two chunks of loads
// in flight.
constexpr int kMaxThreadsPerSm = 512;
constexpr int kChunk = 128;  // k elements per chunk: 4 lanes x 32

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

  float dot[2 * kMT] = {};  // this lane's partial sum of each of its rows
  auto compute = [&](const ChunkRegs& r) {
    uint32_t p[8];
    b_int8(r.b, p);
    const float2 sb = scales_f32(r.sb);
    const float sbq[2] = {sb.x * 0.25f, sb.y * 0.25f};  // (2a)(2b) = 4ab
#pragma unroll
    for (int i = 0; i < 2 * kMT; ++i) {
      const uint32_t w[4] = {r.a[i].x, r.a[i].y, r.a[i].z, r.a[i].w};
      const float2 sa = scales_f32(r.sa[i]);
#pragma unroll
      for (int blk = 0; blk < 2; ++blk)  // elements 16 blk .. 16 blk + 15: words 2 blk, 2 blk + 1
        dot[i] = __fmaf_rn(static_cast<float>(block_dot16(w[2 * blk], w[2 * blk + 1], p + 4 * blk)),
                           (blk ? sa.y : sa.x) * sbq[blk], dot[i]);
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

  // The 4 lanes of a row (t = 0..3) hold its k quarters: add them in a fixed order; lane t == 0
  // then holds row mt*16+g in sum[2*mt], mt*16+g+8 in sum[2*mt+1].
  float sum[2 * kMT];
#pragma unroll
  for (int i = 0; i < 2 * kMT; ++i) {
    float v = dot[i];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    sum[i] = v;
  }
  __shared__ float red[Warps][kRowsPerCta];
  if (t == 0) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      red[warp][mt * 16 + g] = sum[2 * mt];
      red[warp][mt * 16 + g + 8] = sum[2 * mt + 1];
    }
  }
  __syncthreads();
  float v = 0.0f;
  if (threadIdx.x < kRowsPerCta) {
    v = red[0][threadIdx.x];
#pragma unroll
    for (int w = 1; w < Warps; ++w) v += red[w][threadIdx.x];
  }
  gemv::finish_rows(args, row_block, split, batch, v);
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
    case 4: return launch<4>(args, stream);
    case 8: return launch<8>(args, stream);
    default: SWAPFFN_FAIL("NVFP4 GEMV supports 4 or 8 warps per CTA, not " + std::to_string(warps));
  }
}

}  // namespace swapffn::cuda::nvfp4

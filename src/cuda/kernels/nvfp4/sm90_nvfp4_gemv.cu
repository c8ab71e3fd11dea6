// NVFP4 batched GEMV on Hopper: c[m, l] = fp16(sum_k a[m,k,l] b[0,k,l]).
//
// Why it exists: the GEMV is bound by streaming `a` from HBM once (K/2 bytes per row plus K/16
// scale bytes), so the kernel is built around the loads: every lane copies its 16 bytes of four rows
// (and their scales, and its 16 bytes of b) with cp.async into its warp's private shared-memory
// ring, kDepth k-chunks ahead of the one it decodes, so the bytes in flight cost no registers
// (the register double buffer it replaces held one chunk ahead and left the loads latency-bound,
// ~1.5 of 3 TB/s); split-K over CTAs fills all SMs when M * L is small. A lane reads back only
// what it copied itself, so the ring needs no barrier: cp.async.wait_group orders it.
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
constexpr int kDepth = 4;    // ring slots per warp: chunks whose copies are in flight or ready

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

// One ring slot of a warp: every lane's copies of one chunk, lane-minor (conflict-free 16-byte
// reads). Scales are copied as the aligned 4-byte word that holds the lane's pair.
struct ChunkSlot {
  uint4 a[2 * kMT][32];
  uint32_t sa[2 * kMT][32];
  uint4 b[32];
  uint32_t sb[32];
};
template <int Warps>
constexpr int gemv_smem_bytes() {
  return Warps * kDepth * static_cast<int>(sizeof(ChunkSlot));
}

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

  extern __shared__ __align__(16) uint8_t gemv_smem[];
  ChunkSlot* ring = reinterpret_cast<ChunkSlot*>(gemv_smem) + warp * kDepth;
  const uint8_t* zero_src = reinterpret_cast<const uint8_t*>(dummy_source);
  // The scale pair of k column j (even) sits in the aligned word at j & ~3, high half when j % 4 == 2
  // (both layouts keep j's group of 4 contiguous; bases and batch strides are 4-byte aligned).
  const int pair_shift = 16 * (t & 1);
  // Copies of `chunk` into slot `slot`; out-of-range rows and k are zero-filled, so they add 0.
  auto issue = [&](int64_t chunk, int slot) {
    ChunkSlot& d = ring[slot];
    const int64_t kk = chunk * kChunk + 32 * t;  // this lane's 32 elements
    const bool kok = chunk < c1 && kk < args.k;
#pragma unroll
    for (int i = 0; i < 2 * kMT; ++i) {
      const int64_t row = row_base + (i >> 1) * 16 + g + (i & 1) * 8;
      const bool ok = kok && row < args.m;
      cp_async16(smem_addr(&d.a[i][lane]), ok ? a + row * (args.k / 2) + kk / 2 : zero_src, ok);
      cp_async4(smem_addr(&d.sa[i][lane]), ok ? sfa + (scale_pair_offset(args.a, row, args.k, kk / 16) & ~int64_t{3}) : zero_src, ok);
    }
    cp_async16(smem_addr(&d.b[lane]), kok ? b + kk / 2 : zero_src, kok);
    cp_async4(smem_addr(&d.sb[lane]), kok ? sfb + (scale_pair_offset(args.b, 0, args.k, kk / 16) & ~int64_t{3}) : zero_src, kok);
  };
  auto read = [&](int slot, ChunkRegs& r) {
    const ChunkSlot& d = ring[slot];
#pragma unroll
    for (int i = 0; i < 2 * kMT; ++i) {
      r.a[i] = d.a[i][lane];
      r.sa[i] = (d.sa[i][lane] >> pair_shift) & 0xFFFFu;
    }
    r.b = d.b[lane];
    r.sb = (d.sb[lane] >> pair_shift) & 0xFFFFu;
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
  // This warp's chunks are c0 + warp + i * Warps. kDepth - 1 of them are in flight while one is
  // decoded; every iteration commits one copy group (empty past the end) so that
  // wait_group<kDepth - 2> always means "chunk i has landed".
  const int64_t first = c0 + warp;
#pragma unroll
  for (int i = 0; i < kDepth - 1; ++i) {
    issue(first + i * Warps, i);
    cp_async_commit();
  }
  for (int i = 0; first + static_cast<int64_t>(i) * Warps < c1; ++i) {
    cp_async_wait<kDepth - 2>();
    ChunkRegs r;
    read(i % kDepth, r);
    issue(first + static_cast<int64_t>(i + kDepth - 1) * Warps, (i + kDepth - 1) % kDepth);  // the slot read last iteration
    cp_async_commit();
    compute(r);
  }
  cp_async_wait<0>();

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
  constexpr int smem = gemv_smem_bytes<Warps>();
  static_assert(smem * (kMaxThreadsPerSm / (Warps * 32)) <= 227 * 1024, "the rings of the resident CTAs fit one SM");
  CUDA_CHECK(cudaFuncSetAttribute(nvfp4_gemv_kernel<Warps>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  nvfp4_gemv_kernel<Warps><<<grid, Warps * 32, smem, stream>>>(args);
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

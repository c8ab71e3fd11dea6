// The block-scaled tile mainloop shared by the NVFP4 GEMM, dual GEMM and grouped GEMM kernels.
//
// Why this shape: Hopper has no FP4 MMA, so the operands must become 16-bit before the tensor
// cores see them. Each CTA streams raw fp4 bytes + e4m3 scales (cp.async, `Stages` deep, a quarter
// of the bytes of fp16 tiles), then all its threads dequantize the stage once into an fp16 tile in
// shared memory (exact, see nvfp4_dequant.cuh) and the warps multiply it with mma.sync m16n8k16
// (fp32 accumulation) fed by ldmatrix. The fp16 tile is double-buffered so that dequantizing
// k-tile t+1 (ALU) and multiplying k-tile t (tensor cores) are independent and interleave, with
// one barrier per k-tile. Dequantizing once per CTA (instead of per warp straight into fragments)
// costs ~2.5 ALU instructions per MMA instead of ~7; see docs/NVFP4.md for the numbers.
//
// Free k permutation: a dot product does not depend on the order of its k terms, so the fp16
// tile stores the k columns of a 64-wide k-tile in a fixed permuted order (raw 16-byte chunk q,
// 32 elements, lands in fp16 chunks q, q+2, q+4, q+6), the same for A and B rows. That keeps
// the shared-memory stores conflict-free with a plain XOR-8 swizzle.
//
// Rows of the CTA tile: [0, BM) are A rows, then NB blocks of BN rows, one per B operand (NB = 2 for
// the dual GEMM, whose two products share the dequantized A tile).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "nvfp4_dequant.cuh"
#include "nvfp4_wgmma.cuh"

namespace swapffn::cuda::nvfp4 {

template <int WarpsM_, int WarpsN_, int NT_, int NB_, int Stages_, int MinBlocks_>
struct TileCfg {
  static constexpr int kWarpsM = WarpsM_, kWarpsN = WarpsN_;
  static constexpr int kMT = 4;    // m16 tiles per warp: warp tile M = 64
  static constexpr int kNT = NT_;  // n8 tiles per warp per B operand
  static constexpr int kNB = NB_;  // B operands (1, or 2 for the dual GEMM)
  static constexpr int kStages = Stages_;
  static constexpr int kMinBlocks = MinBlocks_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kAccThreads = kThreads;  // threads that hold accumulators (split-K)
  static constexpr int kSplitUnit = 1;          // split-K boundaries fall on multiples of this many k-tiles
  static constexpr int BM = 16 * kMT * kWarpsM;
  static constexpr int BN = 8 * kNT * kWarpsN;  // per B operand
  static constexpr int BK = 64;                 // elements per k-tile: 32 raw bytes, 4 scales
  static constexpr int kRows = BM + kNB * BN;
  static constexpr int kRawStride = BK / 2 + 16;  // padded so 8 consecutive rows hit 8 bank groups
  static constexpr int kHalfRowBytes = BK * 2;    // 128 B: 8 swizzled 16-byte chunks
  static constexpr int kRawBytes = kStages * kRows * kRawStride;
  static constexpr int kScaleBytes = kStages * kRows * (BK / 16);
  static constexpr int kHalfBytes = 2 * kRows * kHalfRowBytes;
  static constexpr int kSmemBytes = kHalfBytes + kRawBytes + kScaleBytes;
  static constexpr int kSmemAlloc = kSmemBytes + 1024;  // + slack to align the fp16 tiles to 1024 B (wgmma)
  static constexpr int kDequantTasks = kRows * (BK / 32);  // one task: 32 elements of one row
  static constexpr int kTasksPerThread = kDequantTasks / kThreads;
  static constexpr int kAcc = kNB * kMT * kNT * 4;  // fp32 accumulators per thread

  static_assert(kNT % 2 == 0, "B fragments are loaded two n8 tiles at a time (ldmatrix x4)");
  static_assert(kRows % 32 == 0, "dequant maps one warp to 32 consecutive rows");
  static_assert(kDequantTasks % kThreads == 0, "dequant tasks must divide evenly among threads");
  static_assert(kStages >= 2, "the cp.async pipeline needs at least two stages");
  static_assert(kHalfBytes % 1024 == 0 && kRawBytes % 16 == 0, "smem regions must stay aligned");
};

// Where one operand's tile comes from. Rows at or beyond `rows` are zero-filled (their fp4 zeros
// times zero scales dequantize to exact zeros and never create NaN).
struct TileSrc {
  const uint8_t* data = nullptr;    // this batch's (rows, K/2) bytes
  const uint8_t* scales = nullptr;  // this batch's scales (plain or blocked)
  int64_t rows = 0;                 // valid rows
  int64_t row0 = 0;                 // first row of the tile
  int64_t k = 0;                    // K (elements)
  int64_t rk_blocks = 0;            // blocked layout: ceil((K/16)/4), 0 for plain
};

// Source of zero-fill copies: cp.async needs a valid global address even when it reads 0 bytes.
__device__ __align__(16) const uint32_t dummy_source[4] = {0, 0, 0, 0};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <class Cfg>
struct TileMainloop {
  // acc[b][mt][nt][i]: B operand b, m16 tile mt, n8 tile nt, mma accumulator register i.
  using Acc = float[Cfg::kNB][Cfg::kMT][Cfg::kNT][4];

  uint8_t* half_;   // [2][kRows][128 B]
  uint8_t* raw_;    // [Stages][kRows][kRawStride]
  uint8_t* scale_;  // [Stages][kRows][4]

  // smem: the dynamic shared memory (Cfg::kSmemAlloc bytes); the fp16 tiles start 1024-aligned.
  __device__ explicit TileMainloop(uint8_t* smem)
      : half_(smem + ((1024 - (smem_addr(smem) & 1023)) & 1023)),
        raw_(half_ + Cfg::kHalfBytes),
        scale_(half_ + Cfg::kHalfBytes + Cfg::kRawBytes) {}

  // This thread's share of every stage's copies, resolved once: the rows a thread copies are the
  // same for every k-tile, so only the k offset changes (32 data bytes per k-tile; 4 scale bytes
  // plain, 512 blocked). Resolving per k-tile instead indexes the TileSrc array at run time, which
  // puts it in local memory and puts 64-bit address arithmetic on every copy.
  static constexpr int kDataSlots = (2 * Cfg::kRows + Cfg::kThreads - 1) / Cfg::kThreads;
  static constexpr int kScaleSlots = (Cfg::kRows + Cfg::kThreads - 1) / Cfg::kThreads;
  struct Producer {
    const uint8_t* data[kDataSlots];  // k-tile 0 address (null: zero-fill or no slot)
    uint32_t data_dst[kDataSlots];
    const uint8_t* scale[kScaleSlots];
    uint32_t scale_dst[kScaleSlots];
    uint32_t scale_step[kScaleSlots];
  };

  __device__ Producer make_producer(const TileSrc (&src)[1 + Cfg::kNB]) const {
    Producer p;
#pragma unroll
    for (int j = 0; j < kDataSlots; ++j) {
      const int i = threadIdx.x + j * Cfg::kThreads;
      const int r = i >> 1, q = i & 1;
      p.data[j] = nullptr;
      p.data_dst[j] = smem_addr(raw_ + r * Cfg::kRawStride + q * 16);
      if (i < 2 * Cfg::kRows) {
        const int o = operand_of(r);
        const TileSrc& t = o == 0 ? src[0] : (o == 1 ? src[1] : src[Cfg::kNB]);
        const int64_t row = t.row0 + local_row(r);
        if (row < t.rows) p.data[j] = t.data + row * (t.k / 2) + q * 16;
      }
    }
#pragma unroll
    for (int j = 0; j < kScaleSlots; ++j) {
      const int r = threadIdx.x + j * Cfg::kThreads;
      p.scale[j] = nullptr;
      p.scale_dst[j] = smem_addr(scale_ + r * 4);
      p.scale_step[j] = 4;
      if (r < Cfg::kRows) {
        const int o = operand_of(r);
        const TileSrc& t = o == 0 ? src[0] : (o == 1 ? src[1] : src[Cfg::kNB]);
        const int64_t row = t.row0 + local_row(r);
        if (row < t.rows) {
          p.scale[j] = t.scales + (t.rk_blocks == 0 ? row * (t.k / 16)
                                                     : (row / 128) * t.rk_blocks * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4);
          p.scale_step[j] = t.rk_blocks == 0 ? 4 : 512;
        }
      }
    }
    return p;
  }

  // Issue the cp.async copies of k-tile kt into stage s (no commit). Rows beyond the operand are
  // zero-filled (source size 0; the source address is then never read).
  __device__ void load_stage(const Producer& p, int kt, int s) const {
#pragma unroll
    for (int j = 0; j < kDataSlots; ++j) {
      if (threadIdx.x + j * Cfg::kThreads < 2 * Cfg::kRows) {
        const bool ok = p.data[j] != nullptr;
        cp_async16(p.data_dst[j] + s * Cfg::kRows * Cfg::kRawStride, ok ? p.data[j] + kt * (Cfg::BK / 2) : raw_dummy(), ok);
      }
    }
#pragma unroll
    for (int j = 0; j < kScaleSlots; ++j) {
      if (threadIdx.x + j * Cfg::kThreads < Cfg::kRows) {
        const bool ok = p.scale[j] != nullptr;
        cp_async4(p.scale_dst[j] + s * Cfg::kRows * 4, ok ? p.scale[j] + kt * p.scale_step[j] : raw_dummy(), ok);
      }
    }
  }

  // A valid global address for zero-fill copies (never dereferenced: source size 0).
  __device__ static const uint8_t* raw_dummy() { return reinterpret_cast<const uint8_t*>(&dummy_source); }

  // Dequantize task j of this thread from raw stage s into fp16 buffer `buf`.
  __device__ void dequant_task(int j, int s, int buf) const {
    const int task = threadIdx.x + j * Cfg::kThreads;
    const int lane = task & 31, w = task >> 5;
    const int q = w & 1, r = (w >> 1) * 32 + lane;  // a warp covers 32 consecutive rows, one chunk
    const uint4 raw = *reinterpret_cast<const uint4*>(raw_ + (s * Cfg::kRows + r) * Cfg::kRawStride + q * 16);
    const uint32_t sc = *reinterpret_cast<const uint16_t*>(scale_ + (s * Cfg::kRows + r) * 4 + q * 2);
    uint32_t h[16];
    dequant32(raw, sc, h);
    uint8_t* row = half_ + (buf * Cfg::kRows + r) * Cfg::kHalfRowBytes;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int chunk = (q + 2 * i) ^ (r & 7);
      *reinterpret_cast<uint4*>(row + chunk * 16) = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
    }
  }

  // One k16 step s (0..3) of the warp's MMAs on fp16 buffer `buf`.
  __device__ void mma_step(Acc& acc, int buf, int s, int warp_m, int warp_n) const {
    const int lane = threadIdx.x & 31;
    const uint32_t base = smem_addr(half_ + buf * Cfg::kRows * Cfg::kHalfRowBytes);
    uint32_t a[Cfg::kMT][4];
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt) {
      const int r = warp_m * 16 * Cfg::kMT + mt * 16 + (lane & 15);
      const int chunk = (2 * s + (lane >> 4)) ^ (r & 7);
      ldmatrix_x4(base + r * Cfg::kHalfRowBytes + chunk * 16, a[mt]);
    }
#pragma unroll
    for (int b = 0; b < Cfg::kNB; ++b) {
#pragma unroll
      for (int np = 0; np < Cfg::kNT / 2; ++np) {
        const int r = Cfg::BM + b * Cfg::BN + warp_n * 8 * Cfg::kNT + np * 16 + (lane & 7) + ((lane >> 4) << 3);
        const int chunk = (2 * s + ((lane >> 3) & 1)) ^ (r & 7);
        uint32_t f[4];
        ldmatrix_x4(base + r * Cfg::kHalfRowBytes + chunk * 16, f);
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt) {
          mma_16816(acc[b][mt][2 * np], a[mt], f[0], f[1]);
          mma_16816(acc[b][mt][2 * np + 1], a[mt], f[2], f[3]);
        }
      }
    }
  }

  // Accumulate k-tiles [kt0, kt0 + count) into acc (which the caller zeroes).
  __device__ void run(const TileSrc (&src)[1 + Cfg::kNB], int kt0, int count, Acc& acc) const {
    const int warp = threadIdx.x >> 5;
    const int warp_m = warp / Cfg::kWarpsN, warp_n = warp % Cfg::kWarpsN;
    const Producer prod = make_producer(src);
#pragma unroll
    for (int s = 0; s < Cfg::kStages - 1; ++s) {
      if (s < count) load_stage(prod, kt0 + s, s);
      cp_async_commit();
    }
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
#pragma unroll
    for (int j = 0; j < Cfg::kTasksPerThread; ++j) dequant_task(j, 0, 0);

    for (int t = 0; t < count; ++t) {
      // Refill the stage that k-tile t-1 used; every thread finished dequantizing it before the
      // previous barrier.
      const int next = t + Cfg::kStages - 1;
      if (next < count) load_stage(prod, kt0 + next, next % Cfg::kStages);
      cp_async_commit();
      cp_async_wait<Cfg::kStages - 2>();  // k-tile t+1 has landed (this thread's copies)
      __syncthreads();                    // ... everyone's; fp16 tile t complete; tile t-1 consumed
      const bool more = t + 1 < count;
      const int buf = t & 1;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        if (more) {
#pragma unroll
          for (int j = 0; j < Cfg::kTasksPerThread; ++j)
            if (j * 4 / Cfg::kTasksPerThread == s) dequant_task(j, (t + 1) % Cfg::kStages, buf ^ 1);
        }
        mma_step(acc, buf, s, warp_m, warp_n);
      }
    }
    cp_async_wait<0>();
  }


  // The same pipeline with warpgroup MMAs (sm_90a): each of the two warpgroups owns 64 A rows and
  // issues m64nBNk16 per B operand and k16 step; the wgmma of k-tile t runs asynchronously while
  // the threads dequantize k-tile t+1, and completes before the next barrier.
  using WgAcc = float[Cfg::kNB][Cfg::BN / 2];
  __device__ void run_wgmma(const TileSrc (&src)[1 + Cfg::kNB], int kt0, int count, WgAcc& acc) const {
    static_assert(Cfg::BM == 128 && Cfg::kThreads == 256, "wgmma path: two warpgroups of 64 rows");
    static_assert(Cfg::BN == 64 || Cfg::BN == 128, "wgmma path: BN must be 64 or 128");
    const int wg = threadIdx.x >> 7;
    const Producer prod = make_producer(src);
#pragma unroll
    for (int s = 0; s < Cfg::kStages - 1; ++s) {
      if (s < count) load_stage(prod, kt0 + s, s);
      cp_async_commit();
    }
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
#pragma unroll
    for (int j = 0; j < Cfg::kTasksPerThread; ++j) dequant_task(j, 0, 0);
    fence_proxy_async();

    for (int t = 0; t < count; ++t) {
      const int next = t + Cfg::kStages - 1;
      if (next < count) load_stage(prod, kt0 + next, next % Cfg::kStages);
      cp_async_commit();
      cp_async_wait<Cfg::kStages - 2>();
      __syncthreads();
      const int buf = t & 1;
      const uint32_t base = smem_addr(half_ + buf * Cfg::kRows * Cfg::kHalfRowBytes);
      wgmma_fence();
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint64_t da = sw128_desc(base + wg * 64 * Cfg::kHalfRowBytes + s * 32);
#pragma unroll
        for (int b = 0; b < Cfg::kNB; ++b) {
          const uint64_t db = sw128_desc(base + (Cfg::BM + b * Cfg::BN) * Cfg::kHalfRowBytes + s * 32);
          if constexpr (Cfg::BN == 128) wgmma_m64n128k16(acc[b], da, db);
          else wgmma_m64n64k16(acc[b], da, db);
        }
      }
      wgmma_commit();
      if (t + 1 < count) {
#pragma unroll
        for (int j = 0; j < Cfg::kTasksPerThread; ++j) dequant_task(j, (t + 1) % Cfg::kStages, buf ^ 1);
        fence_proxy_async();
      }
      wgmma_wait<0>();
    }
    cp_async_wait<0>();
  }

  __device__ static int operand_of(int r) { return r < Cfg::BM ? 0 : 1 + (r - Cfg::BM) / Cfg::BN; }
  __device__ static int local_row(int r) { return r < Cfg::BM ? r : (r - Cfg::BM) % Cfg::BN; }
};

// Position of accumulator (mt, nt, i) of this thread inside the warp's tile: row and column
// offsets relative to the warp tile origin (mma m16n8 C fragment layout).
__device__ __forceinline__ int acc_row(int mt, int i) { return mt * 16 + ((threadIdx.x & 31) >> 2) + (i >= 2 ? 8 : 0); }
__device__ __forceinline__ int acc_col(int nt, int i) { return nt * 8 + (threadIdx.x & 3) * 2 + (i & 1); }

// Barrier among threads [0, N) only (named barrier 1): the split-K reduction runs in the threads
// that hold accumulators, which in the rs kernels are not all of the CTA's threads.
template <int N>
__device__ __forceinline__ void acc_threads_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(N) : "memory");
}

// Adds parts [from, parts) of a tile's fp32 partials (slot(j): part j's float4 groups, kAcc / 4 of
// them per thread of [0, kThreads)) to `flat` in part order; with from = 0 part 0 is assigned.
// Part by part, up to 8 float4 groups' loads issued together (one L2 round trip per part and chunk
// of groups; with the parts innermost every group waited for the previous group's sums).
template <int kAcc, int kThreads, class Slot>
__device__ void sum_parts(float* flat, Slot slot, int from, int parts) {
  constexpr int kVec = kAcc / 4;
  constexpr int kChunk = kVec < 8 ? kVec : 8;  // 32 registers of loads in flight (more spill the 128-register tiles)
  static_assert(kVec % kChunk == 0, "whole chunks of float4 groups");
#pragma unroll
  for (int c0 = 0; c0 < kVec; c0 += kChunk) {
    for (int s = from; s < parts; ++s) {
      const float4* src = slot(s);
      float4 p[kChunk];
#pragma unroll
      for (int v = 0; v < kChunk; ++v) p[v] = __ldcg(src + (c0 + v) * kThreads + threadIdx.x);
#pragma unroll
      for (int v = 0; v < kChunk; ++v) {
        float* f = flat + 4 * (c0 + v);
        f[0] = s == 0 ? p[v].x : f[0] + p[v].x;
        f[1] = s == 0 ? p[v].y : f[1] + p[v].y;
        f[2] = s == 0 ? p[v].z : f[2] + p[v].z;
        f[3] = s == 0 ? p[v].w : f[3] + p[v].w;
      }
    }
  }
}

// Stores this thread's kAcc accumulators into a part's slot (float4 groups, thread-minor).
template <int kAcc, int kThreads>
__device__ void store_part(const float* flat, float4* slot) {
#pragma unroll
  for (int v = 0; v < kAcc / 4; ++v)
    __stcg(slot + v * kThreads + threadIdx.x, make_float4(flat[4 * v], flat[4 * v + 1], flat[4 * v + 2], flat[4 * v + 3]));
}

// Split-K in a fixed order: each of the `nsplit` CTAs of an output tile stores its fp32 partials
// (kAcc floats in each of threads [0, kThreads)) in its slot (split s: the s-th from `partials`),
// and the last one to arrive (per-tile counter) sums all splits in order 0..nsplit-1 and returns
// true with `flat` holding the total; the others return false. The order never depends on arrival,
// so results are bitwise deterministic. The last CTA resets the counter for the next launch.
template <int kAcc, int kThreads>
__device__ bool splitk_reduce(float* flat, float* partials, int* counter, int split, int nsplit) {
  float4* all = reinterpret_cast<float4*>(partials);
  auto slot = [&](int j) { return all + static_cast<int64_t>(j) * (kAcc / 4) * kThreads; };
  store_part<kAcc, kThreads>(flat, slot(split));
  __threadfence();
  acc_threads_sync<kThreads>();
  __shared__ int is_last;
  if (threadIdx.x == 0) is_last = atomicAdd(counter, 1) == nsplit - 1;
  acc_threads_sync<kThreads>();
  if (!is_last) return false;
  __threadfence();
  sum_parts<kAcc, kThreads>(flat, slot, 0, nsplit);
  if (threadIdx.x == 0) *counter = 0;
  return true;
}

// Store value(mt, nt, i) of this thread's accumulator positions as fp16 into row-major c (N
// columns), skipping rows >= m and columns >= n.
template <class Cfg, class Value>
__device__ void store_tile(__half* c, int64_t m, int64_t n, int64_t row0, int64_t col0,
                           Value value) {
  const int warp = threadIdx.x >> 5;
  const int64_t wr = row0 + (warp / Cfg::kWarpsN) * 16 * Cfg::kMT;
  const int64_t wc = col0 + (warp % Cfg::kWarpsN) * 8 * Cfg::kNT;
  const bool pairs = (n & 1) == 0;  // 4-byte aligned column pairs
#pragma unroll
  for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < Cfg::kNT; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // h: rows g (regs 0,1) and g+8 (regs 2,3)
        const int64_t row = wr + acc_row(mt, 2 * h), col = wc + acc_col(nt, 2 * h);
        if (row >= m || col >= n) continue;
        const __half v0 = __float2half_rn(value(mt, nt, 2 * h)), v1 = __float2half_rn(value(mt, nt, 2 * h + 1));
        __half* dst = c + row * n + col;
        if (pairs) {
          *reinterpret_cast<__half2*>(dst) = __halves2half2(v0, v1);
        } else {
          dst[0] = v0;
          if (col + 1 < n) dst[1] = v1;
        }
      }
}


// Store value(b?, j, i) for the wgmma accumulator layout: warpgroup wg owns rows wg*64.., its warp
// w (of 4) rows 16w + lane/4 (+8 for i >= 2); register 4j+i is column 8j + 2(lane%4) + (i&1).
template <int BN, class Value>
__device__ void store_tile_wg(__half* c, int64_t m, int64_t n, int64_t row0, int64_t col0, Value value) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t wr = row0 + (warp >> 2) * 64 + (warp & 3) * 16 + (lane >> 2);
  const bool pairs = (n & 1) == 0;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = wr + 8 * h, col = col0 + 8 * j + 2 * (lane & 3);
      if (row >= m || col >= n) continue;
      const __half v0 = __float2half_rn(value(4 * j + 2 * h)), v1 = __float2half_rn(value(4 * j + 2 * h + 1));
      __half* dst = c + row * n + col;
      if (pairs) {
        *reinterpret_cast<__half2*>(dst) = __halves2half2(v0, v1);
      } else {
        dst[0] = v0;
        if (col + 1 < n) dst[1] = v1;
      }
    }
}

}  // namespace swapffn::cuda::nvfp4

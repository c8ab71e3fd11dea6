// Warp-specialised block-scaled mainloop for the NVFP4 GEMM, dual GEMM and grouped GEMM (the
// `*_ws` tiles).
//
// Why: the shared mainloop (nvfp4_tile_mainloop.cuh) has every thread copy, dequantize and issue
// MMAs, with a CTA barrier per k-tile; Nsight Compute showed it latency-bound on the
// dequantization (tensor pipe ~25% busy, 0.74 eligible warps per scheduler). Here the roles are
// split so that no warp ever waits for the whole CTA:
// - dequant warpgroups (threads 256..511) load raw e2m1 bytes and e4m3 scales straight into
//   registers, `kDepth` k-tiles ahead (ld.global.nc, 16 bytes per thread), convert them exactly to
//   fp16 (nvfp4_dequant.cuh) into a ring of `kStages` swizzled shared-memory stages and arrive on
//   the stage's `full` mbarrier;
// - consumer warpgroups (threads 0..255, 64 A rows each) wait on `full`, issue wgmma on the stage,
//   keep one k-tile of MMAs in flight and arrive on the stage's `empty` mbarrier once the MMAs
//   that read it have completed.
// Each dequant thread loads exactly the bytes it converts, so raw data needs no cross-thread
// synchronisation at all (no shared-memory staging of raw bytes either). Rows outside the operand
// are neither loaded nor converted: their stage rows hold stale values, which only reach output
// rows/columns that are never stored (A row m feeds only c row m, B row n only column n).
//
// Stage layout: as in nvfp4_tile_mainloop.cuh (128-byte fp16 rows in wgmma's 128-byte swizzle,
// raw chunk q of a row's 32 bytes lands in fp16 chunks q, q+2, q+4, q+6), so the consumers use the
// same descriptors. Lane mapping of a dequant warp: lanes 0-15 take chunk 0 and lanes 16-31 chunk 1
// of 16 consecutive rows, so a warp's loads cover 16 full 32-byte sectors and each 8-lane phase of
// its 16-byte shared stores hits 8 distinct chunk columns (rows r..r+7 XOR-swizzle apart).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels/nvfp4/nvfp4_dequant.cuh"
#include "cuda/kernels/nvfp4/nvfp4_tile_mainloop.cuh"
#include "cuda/kernels/nvfp4/nvfp4_wgmma.cuh"

namespace swapffn::cuda::nvfp4 {

// Ring_ = false: raw bytes go straight to registers, kDepth k-tiles ahead (32 bytes of a row per
// k-tile: each warp load touches 16 rows). Ring_ = true: the dequant threads first copy whole
// 128-byte row segments (4 k-tiles) with cp.async into a double-buffered raw ring in shared memory
// (each warp copy covers 4 full lines), synchronise among themselves once per 4 k-tiles (named
// barrier 2), and convert from there; this trades shared-memory traffic for full-line global
// requests.
template <int BN_, int NB_, int Stages_, int Depth_, bool Ring_, int Span_ = 1>
struct WsCfg {
  static constexpr int BM = 128, BN = BN_, BK = 64;
  static constexpr int kNB = NB_;
  static constexpr int kStages = Stages_;  // fp16 stages in the shared-memory ring
  static constexpr int kDepth = Depth_;    // register variant: load steps in flight per thread
  static constexpr bool kRing = Ring_;
  static constexpr int kSpan = Span_;      // register variant: k-tiles per load step (1 or 2)
  static constexpr int kConsumerThreads = 256;
  static constexpr int kDequantThreads = 256;
  static constexpr int kThreads = kConsumerThreads + kDequantThreads;
  static constexpr int kAccThreads = kConsumerThreads;  // threads that hold accumulators (split-K)
  static constexpr int kMinBlocks = 1;
  static constexpr int kRows = BM + kNB * BN;
  static constexpr int kRowBytes = BK * 2;  // 128 B of fp16: one swizzle atom row
  static constexpr int kStageBytes = kRows * kRowBytes;
  static constexpr int kTasks = kRows * 2 * kSpan / kDequantThreads;  // 16-byte raw chunks per thread and step
  static constexpr int kAcc = kNB * BN / 2;                   // fp32 accumulators per consumer thread
  // Raw ring (kRing): 2 rounds of 4 k-tiles; a row's 128 bytes padded to 144 so that 8 consecutive
  // rows' 16-byte reads hit 8 distinct bank groups; 16 scale bytes per row and round.
  static constexpr int kRoundKtiles = 4;
  static constexpr int kRawStride = 144;
  static constexpr int kRawRoundBytes = kRows * kRawStride;
  static constexpr int kScaleRoundBytes = kRows * 16;
  static constexpr int kRawBytes = kRing ? 2 * (kRawRoundBytes + kScaleRoundBytes) : 0;
  static constexpr int kSplitUnit = kRing ? kRoundKtiles : kSpan;  // split-K boundaries on whole steps
  static constexpr int kSmemAlloc = kStages * kStageBytes + kRawBytes + 2 * kStages * 8 + 1024;  // + align slack
  static_assert(kSmemAlloc <= 227 * 1024, "shared memory per CTA");
  static_assert(!kRing || kRows == kDequantThreads, "ring copies: one scale row per dequant thread");
  static_assert(!kRing || kSpan == 1, "the ring variant converts one k-tile per stage");
  static_assert((kSpan == 1 || kSpan == 2) && kStages % kSpan == 0, "a step's stages never wrap the ring");

  static_assert(BN == 64 || BN == 128, "wgmma m64nBNk16 with BN 64 or 128");
  static_assert(kRows % 128 == 0, "each dequant warp owns whole 16-row blocks in every task");
  static_assert(kStageBytes % 1024 == 0, "stages stay 1024-byte aligned for the swizzle");
  static_assert(kStages >= 2 && kDepth >= 1, "ring and load pipeline need depth");
};

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.release.cta.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Blocks until the phase of parity `parity` has completed. A fresh barrier counts its (virtual)
// preceding phase, parity 1, as completed, which lets producers start without a pre-arrival.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Streaming loads of read-only operand bytes: no L1 allocation (every byte is used once per CTA).
__device__ __forceinline__ uint4 ldg_nc_v4(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ldg_nc_u16(const uint8_t* p) {
  uint16_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];\n" : "=h"(v) : "l"(p));
  return v;
}

// A valid global address for cp.async zero-fill copies (source size 0: never read).
__device__ __forceinline__ const uint8_t* zero_fill_src() { return reinterpret_cast<const uint8_t*>(&dummy_source); }

template <class Cfg>
struct WsMainloop {
  using Acc = float[Cfg::kNB][Cfg::BN / 2];

  uint8_t* stages_;  // [kStages][kRows][128 B], 1024-aligned
  uint8_t* raw_;     // kRing: [2][kRows][kRawStride] raw bytes, then [2][kRows][16] scales
  uint32_t full_;    // kStages mbarriers: stage dequantized (kDequantThreads arrivals)
  uint32_t empty_;   // kStages mbarriers: stage's MMAs done (kConsumerThreads arrivals)

  __device__ explicit WsMainloop(uint8_t* smem)
      : stages_(smem + ((1024 - (smem_addr(smem) & 1023)) & 1023)),
        raw_(stages_ + Cfg::kStages * Cfg::kStageBytes),
        full_(smem_addr(raw_ + Cfg::kRawBytes)),
        empty_(full_ + 8 * Cfg::kStages) {}

  // Runs the mainloop over k-tiles [kt0, kt0 + count). Returns true in consumer threads, whose
  // `acc` (zeroed by the caller) then holds the sums; dequant threads return false and must leave.
  // All threads of the CTA must call it (it starts with a CTA barrier for the mbarrier init).
  __device__ bool run(const TileSrc (&src)[1 + Cfg::kNB], int kt0, int count, Acc& acc) const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < Cfg::kStages; ++s) {
        mbar_init(full_ + 8 * s, Cfg::kDequantThreads);
        mbar_init(empty_ + 8 * s, Cfg::kConsumerThreads);
      }
    }
    __syncthreads();
    if (threadIdx.x >= Cfg::kConsumerThreads) {
      if constexpr (Cfg::kRing) dequantize_ring(src, kt0, count);
      else dequantize(src, kt0, count);
      return false;
    }
    consume(count, acc);
    return true;
  }

 private:
  __device__ void consume(int count, Acc& acc) const {
    const int wg = threadIdx.x >> 7;
    int s = 0, prev = 0;
    uint32_t phase = 0;
    for (int t = 0; t < count; ++t) {
      mbar_wait(full_ + 8 * s, phase);
      const uint32_t base = smem_addr(stages_ + s * Cfg::kStageBytes);
      wgmma_fence();
#pragma unroll
      for (int k16 = 0; k16 < 4; ++k16) {
        const uint64_t da = sw128_desc(base + wg * 64 * Cfg::kRowBytes + k16 * 32);
#pragma unroll
        for (int b = 0; b < Cfg::kNB; ++b) {
          const uint64_t db = sw128_desc(base + (Cfg::BM + b * Cfg::BN) * Cfg::kRowBytes + k16 * 32);
          if constexpr (Cfg::BN == 128) wgmma_m64n128k16(acc[b], da, db);
          else wgmma_m64n64k16(acc[b], da, db);
        }
      }
      wgmma_commit();
      // Keep this k-tile's MMAs in flight; the previous one's have completed, so its stage is free.
      wgmma_wait<1>();
      if (t > 0) mbar_arrive(empty_ + 8 * prev);
      prev = s;
      if (++s == Cfg::kStages) {
        s = 0;
        phase ^= 1;
      }
    }
    wgmma_wait<0>();
  }

  // Register variant. A load step covers kSpan k-tiles: each row's kSpan * 32 bytes are read by
  // 2 * kSpan lanes of one warp request (kSpan = 2: 8 rows x 64 bytes, 8 lines per request instead
  // of 16, which halves the L1 tag work per byte; see docs/NVFP4.md). Chunk c of a row belongs to
  // k-tile c / 2 of the step, half c % 2 of it; every thread arrives on all kSpan stages of a step.
  __device__ void dequantize(const TileSrc (&src)[1 + Cfg::kNB], int kt0, int count) const {
    constexpr int kSpan = Cfg::kSpan, kRowsPerTask = 16 / kSpan;
    const int d = threadIdx.x - Cfg::kConsumerThreads;
    const int warp = d >> 5, lane = d & 31;
    const int c = lane / kRowsPerTask, q = c & 1;
    // Per task: step-0 addresses (null: row outside the operand), scale bytes per step, and the
    // task's row offset in its stage. r % 8 == lane % 8 for every task (8- or 16-row blocks), so
    // each 8-lane phase of the shared stores covers 8 rows of one chunk column: conflict-free.
    const uint8_t* data[Cfg::kTasks];
    const uint8_t* scale[Cfg::kTasks];
    uint32_t step[Cfg::kTasks], row_off[Cfg::kTasks];
#pragma unroll
    for (int j = 0; j < Cfg::kTasks; ++j) {
      const int r = (warp + 8 * j) * kRowsPerTask + lane % kRowsPerTask;
      const RowSrc rs = row_src(src, r, kt0);
      row_off[j] = (c >> 1) * Cfg::kStageBytes + r * Cfg::kRowBytes;
      data[j] = rs.data == nullptr ? nullptr : rs.data + c * 16;
      scale[j] = rs.scale == nullptr ? nullptr : rs.scale + (c >> 1) * rs.step + 2 * q;
      step[j] = rs.step * kSpan;
    }
    const int sw = lane & 7;
    const int steps = count / kSpan;
    constexpr int kStepBytes = kSpan * Cfg::BK / 2;

    uint4 raw[Cfg::kDepth][Cfg::kTasks];
    uint32_t sc[Cfg::kDepth][Cfg::kTasks];
#pragma unroll
    for (int i = 0; i < Cfg::kDepth; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::kTasks; ++j)
        if (i < steps && data[j] != nullptr) {
          raw[i][j] = ldg_nc_v4(data[j] + i * kStepBytes);
          sc[i][j] = ldg_nc_u16(scale[j] + i * step[j]);
        }

    int s = 0;
    uint32_t phase = 0;
    for (int p0 = 0; p0 < steps; p0 += Cfg::kDepth) {
#pragma unroll
      for (int i = 0; i < Cfg::kDepth; ++i) {
        const int p = p0 + i;
        if (p >= steps) break;
#pragma unroll
        for (int u = 0; u < kSpan; ++u) mbar_wait(empty_ + 8 * (s + u), phase ^ 1);
        uint8_t* stage = stages_ + s * Cfg::kStageBytes;
#pragma unroll
        for (int j = 0; j < Cfg::kTasks; ++j) {
          if (data[j] == nullptr) continue;
          uint32_t h[16];
          dequant32(raw[i][j], sc[i][j], h);
#pragma unroll
          for (int e = 0; e < 4; ++e)
            *reinterpret_cast<uint4*>(stage + row_off[j] + (((q + 2 * e) ^ sw) * 16)) =
                make_uint4(h[4 * e], h[4 * e + 1], h[4 * e + 2], h[4 * e + 3]);
          // Refill this register slot with step p + kDepth while the others are converted.
          const int next = p + Cfg::kDepth;
          if (next < steps) {
            raw[i][j] = ldg_nc_v4(data[j] + next * kStepBytes);
            sc[i][j] = ldg_nc_u16(scale[j] + next * step[j]);
          }
        }
        fence_proxy_async();  // generic-proxy stores -> wgmma's async-proxy reads
#pragma unroll
        for (int u = 0; u < kSpan; ++u) mbar_arrive(full_ + 8 * (s + u));
        s += kSpan;
        if (s == Cfg::kStages) {
          s = 0;
          phase ^= 1;
        }
      }
    }
  }

  // Row r's source in operand order (compile-time operand index, see dequantize()).
  struct RowSrc {
    const uint8_t* data = nullptr;   // k-tile-0 bytes of the row, null outside the operand
    const uint8_t* scale = nullptr;  // k-tile-0 scales of the row
    uint32_t step = 0;               // scale bytes per k-tile (4 plain, 512 blocked)
  };
  __device__ static RowSrc row_src(const TileSrc (&src)[1 + Cfg::kNB], int r, int kt0) {
    const int o = r < Cfg::BM ? 0 : 1 + (r - Cfg::BM) / Cfg::BN;
    const int local = r < Cfg::BM ? r : (r - Cfg::BM) % Cfg::BN;
    RowSrc rs;
#pragma unroll
    for (int oi = 0; oi <= Cfg::kNB; ++oi) {
      const TileSrc& t = src[oi];
      const int64_t row = t.row0 + local;
      if (oi != o || row >= t.rows) continue;
      rs.data = t.data + row * (t.k / 2) + static_cast<int64_t>(kt0) * (Cfg::BK / 2);
      rs.step = t.rk_blocks == 0 ? 4 : 512;
      rs.scale = t.scales +
                 (t.rk_blocks == 0 ? row * (t.k / 16)
                                   : (row / 128) * t.rk_blocks * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4) +
                 static_cast<int64_t>(kt0) * rs.step;
    }
    return rs;
  }

  __device__ void dequantize_ring(const TileSrc (&src)[1 + Cfg::kNB], int kt0, int count) const {
    constexpr int kCopies = Cfg::kRows * 8 / Cfg::kDequantThreads;  // 16-byte copies per thread and round
    const int d = threadIdx.x - Cfg::kConsumerThreads;
    const int warp = d >> 5, lane = d & 31, q = lane >> 4;
    // Copies: chunk i = d + 256 j is 16-byte column i % 8 of row i / 8 (a warp copies 4 full rows).
    const uint8_t* copy_src[kCopies];
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const int i = d + j * Cfg::kDequantThreads;
      const RowSrc rs = row_src(src, i >> 3, kt0);
      copy_src[j] = rs.data == nullptr ? nullptr : rs.data + (i & 7) * 16;
    }
    const RowSrc srow = row_src(src, d, kt0);  // this thread copies row d's scales
    bool valid[Cfg::kTasks];
#pragma unroll
    for (int j = 0; j < Cfg::kTasks; ++j) valid[j] = row_src(src, (warp + 8 * j) * 16 + (lane & 15), kt0).data != nullptr;

    const uint32_t raw0 = smem_addr(raw_);
    const uint32_t scale0 = raw0 + 2 * Cfg::kRawRoundBytes;
    auto issue = [&](int round) {
      const uint32_t slot = round & 1;
#pragma unroll
      for (int j = 0; j < kCopies; ++j) {
        const int i = d + j * Cfg::kDequantThreads;
        const bool ok = copy_src[j] != nullptr;
        cp_async16(raw0 + slot * Cfg::kRawRoundBytes + (i >> 3) * Cfg::kRawStride + (i & 7) * 16,
                   ok ? copy_src[j] + round * (Cfg::kRoundKtiles * Cfg::BK / 2) : zero_fill_src(), ok);
      }
#pragma unroll
      for (int g = 0; g < Cfg::kRoundKtiles; ++g) {
        const bool ok = srow.scale != nullptr;
        cp_async4(scale0 + slot * Cfg::kScaleRoundBytes + d * 16 + g * 4,
                  ok ? srow.scale + (round * Cfg::kRoundKtiles + g) * srow.step : zero_fill_src(), ok);
      }
      cp_async_commit();
    };

    const int rounds = count / Cfg::kRoundKtiles;
    if (rounds > 0) issue(0);
    int s = 0;
    uint32_t phase = 0;
    const int sw = lane & 7;
    for (int round = 0; round < rounds; ++round) {
      cp_async_wait<0>();
      // Every dequant thread's copies of this round have landed, and every one has finished
      // converting the previous round, whose slot the next copies overwrite.
      asm volatile("bar.sync 2, %0;\n" ::"n"(Cfg::kDequantThreads) : "memory");
      if (round + 1 < rounds) issue(round + 1);
      const uint32_t slot = round & 1;
#pragma unroll
      for (int v = 0; v < Cfg::kRoundKtiles; ++v) {
        mbar_wait(empty_ + 8 * s, phase ^ 1);
        uint8_t* stage = stages_ + s * Cfg::kStageBytes;
#pragma unroll
        for (int j = 0; j < Cfg::kTasks; ++j) {
          if (!valid[j]) continue;
          const int r = (warp + 8 * j) * 16 + (lane & 15);
          const uint4 raw = *reinterpret_cast<const uint4*>(raw_ + slot * Cfg::kRawRoundBytes + r * Cfg::kRawStride +
                                                            v * (Cfg::BK / 2) + q * 16);
          const uint32_t sc = *reinterpret_cast<const uint16_t*>(raw_ + 2 * Cfg::kRawRoundBytes +
                                                                slot * Cfg::kScaleRoundBytes + r * 16 + v * 4 + q * 2);
          uint32_t h[16];
          dequant32(raw, sc, h);
#pragma unroll
          for (int c = 0; c < 4; ++c)
            *reinterpret_cast<uint4*>(stage + r * Cfg::kRowBytes + (((q + 2 * c) ^ sw) * 16)) =
                make_uint4(h[4 * c], h[4 * c + 1], h[4 * c + 2], h[4 * c + 3]);
        }
        fence_proxy_async();
        mbar_arrive(full_ + 8 * s);
        if (++s == Cfg::kStages) {
          s = 0;
          phase ^= 1;
        }
      }
    }
  }
};

}  // namespace swapffn::cuda::nvfp4

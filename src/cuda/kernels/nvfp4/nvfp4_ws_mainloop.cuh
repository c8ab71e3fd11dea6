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

template <int BN_, int NB_, int Stages_, int Depth_>
struct WsCfg {
  static constexpr int BM = 128, BN = BN_, BK = 64;
  static constexpr int kNB = NB_;
  static constexpr int kStages = Stages_;  // fp16 stages in the shared-memory ring
  static constexpr int kDepth = Depth_;    // k-tiles of raw loads in flight per dequant thread
  static constexpr int kConsumerThreads = 256;
  static constexpr int kDequantThreads = 256;
  static constexpr int kThreads = kConsumerThreads + kDequantThreads;
  static constexpr int kAccThreads = kConsumerThreads;  // threads that hold accumulators (split-K)
  static constexpr int kMinBlocks = 1;
  static constexpr int kRows = BM + kNB * BN;
  static constexpr int kRowBytes = BK * 2;  // 128 B of fp16: one swizzle atom row
  static constexpr int kStageBytes = kRows * kRowBytes;
  static constexpr int kTasks = kRows * 2 / kDequantThreads;  // 16-byte raw chunks per thread per k-tile
  static constexpr int kAcc = kNB * BN / 2;                   // fp32 accumulators per consumer thread
  static constexpr int kSmemAlloc = kStages * kStageBytes + 2 * kStages * 8 + 1024;  // + align slack

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

template <class Cfg>
struct WsMainloop {
  using Acc = float[Cfg::kNB][Cfg::BN / 2];

  uint8_t* stages_;  // [kStages][kRows][128 B], 1024-aligned
  uint32_t full_;    // kStages mbarriers: stage dequantized (kDequantThreads arrivals)
  uint32_t empty_;   // kStages mbarriers: stage's MMAs done (kConsumerThreads arrivals)

  __device__ explicit WsMainloop(uint8_t* smem)
      : stages_(smem + ((1024 - (smem_addr(smem) & 1023)) & 1023)),
        full_(smem_addr(stages_ + Cfg::kStages * Cfg::kStageBytes)),
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
      dequantize(src, kt0, count);
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

  __device__ void dequantize(const TileSrc (&src)[1 + Cfg::kNB], int kt0, int count) const {
    const int d = threadIdx.x - Cfg::kConsumerThreads;
    const int warp = d >> 5, lane = d & 31, q = lane >> 4;
    // Per task: k-tile-0 addresses (null: row outside the operand), scale step per k-tile, and
    // the task's row offset in a stage. r % 8 == lane % 8 for every task (16-row blocks).
    const uint8_t* data[Cfg::kTasks];
    const uint8_t* scale[Cfg::kTasks];
    uint32_t step[Cfg::kTasks], row_off[Cfg::kTasks];
#pragma unroll
    for (int j = 0; j < Cfg::kTasks; ++j) {
      const int r = (warp + 8 * j) * 16 + (lane & 15);
      const int o = r < Cfg::BM ? 0 : 1 + (r - Cfg::BM) / Cfg::BN;
      const int local = r < Cfg::BM ? r : (r - Cfg::BM) % Cfg::BN;
      row_off[j] = r * Cfg::kRowBytes;
      data[j] = nullptr;
      scale[j] = nullptr;
      step[j] = 0;
      // Operand chosen by a compile-time index: selecting src[o] at run time would copy the
      // array to local memory.
#pragma unroll
      for (int oi = 0; oi <= Cfg::kNB; ++oi) {
        const TileSrc& t = src[oi];
        const int64_t row = t.row0 + local;
        if (oi != o || row >= t.rows) continue;
        data[j] = t.data + row * (t.k / 2) + static_cast<int64_t>(kt0) * (Cfg::BK / 2) + q * 16;
        step[j] = t.rk_blocks == 0 ? 4 : 512;
        scale[j] = t.scales +
                   (t.rk_blocks == 0 ? row * (t.k / 16)
                                     : (row / 128) * t.rk_blocks * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4) +
                   static_cast<int64_t>(kt0) * step[j] + 2 * q;
      }
    }
    const int sw = lane & 7;

    uint4 raw[Cfg::kDepth][Cfg::kTasks];
    uint32_t sc[Cfg::kDepth][Cfg::kTasks];
#pragma unroll
    for (int i = 0; i < Cfg::kDepth; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::kTasks; ++j)
        if (i < count && data[j] != nullptr) {
          raw[i][j] = ldg_nc_v4(data[j] + i * (Cfg::BK / 2));
          sc[i][j] = ldg_nc_u16(scale[j] + i * step[j]);
        }

    int s = 0;
    uint32_t phase = 0;
    for (int t0 = 0; t0 < count; t0 += Cfg::kDepth) {
#pragma unroll
      for (int i = 0; i < Cfg::kDepth; ++i) {
        const int t = t0 + i;
        if (t >= count) break;
        mbar_wait(empty_ + 8 * s, phase ^ 1);
        uint8_t* stage = stages_ + s * Cfg::kStageBytes;
#pragma unroll
        for (int j = 0; j < Cfg::kTasks; ++j) {
          if (data[j] == nullptr) continue;
          uint32_t h[16];
          dequant32(raw[i][j], sc[i][j], h);
#pragma unroll
          for (int c = 0; c < 4; ++c)
            *reinterpret_cast<uint4*>(stage + row_off[j] + (((q + 2 * c) ^ sw) * 16)) =
                make_uint4(h[4 * c], h[4 * c + 1], h[4 * c + 2], h[4 * c + 3]);
          // Refill this register slot with k-tile t + kDepth while the others are converted.
          const int next = t + Cfg::kDepth;
          if (next < count) {
            raw[i][j] = ldg_nc_v4(data[j] + next * (Cfg::BK / 2));
            sc[i][j] = ldg_nc_u16(scale[j] + next * step[j]);
          }
        }
        fence_proxy_async();  // generic-proxy stores -> wgmma's async-proxy reads
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

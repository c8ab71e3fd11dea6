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
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "nvfp4/nvfp4_dequant.cuh"
#include "nvfp4/nvfp4_launch.hpp"
#include "nvfp4/nvfp4_tile_mainloop.cuh"
#include "nvfp4/nvfp4_wgmma.cuh"
#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda::nvfp4 {

// Ring_ = false: raw bytes go straight to registers, kDepth k-tiles ahead (32 bytes of a row per
// k-tile: each warp load touches 16 rows). Ring_ = true: the dequant threads first copy whole
// 128-byte row segments (4 k-tiles) with cp.async into a double-buffered raw ring in shared memory
// (each warp copy covers 4 full lines), synchronise among themselves once per 4 k-tiles (named
// barrier 2), and convert from there; this trades shared-memory traffic for full-line global
// requests. Tma_ = true (with Ring_ = false): the same 4-k-tile rounds, copied by the TMA unit (one
// tensor-map box per operand for the bytes and the plain scales, one bulk copy per operand for
// blocked scales) into a double-buffered raw ring that completes on mbarriers. Global loads then
// cost no LSU data-pipe wavefronts (the profiled limiter of the register variant, docs/NVFP4.md);
// the dequant warps read the ring with conflict-free 16-byte shared loads (the boxes land 128-byte
// swizzled). PreA_ = true (TMA only): A is not dequantized here but once, by a pre-pass that writes
// it as fp16 in the stage's permuted k order (nvfp4_predequant_a.cu); dequant thread 0 has the TMA
// copy each k-tile's A box straight into the fp16 stage, completing on the stage's `full` barrier
// as a transaction, and the dequant warps convert only the B rows. Group_ (TMA only): k-tiles a
// dequant warp converts together (waits for all their stages, converts, then arrives on all), so
// that a warp with one task per k-tile still has independent conversion chains to interleave.
// Assist_ (TMA with PreA_, one task per thread): the consumer warps convert the odd k-tiles of every
// round, kAssistAhead k-tiles ahead of the one they multiply and while its predecessor's wgmma run,
// and the dequant warps only the even ones (docs/NVFP4.md, twelfth step).
template <int BN_, int NB_, int Stages_, int Depth_, bool Ring_, int Span_ = 1, bool Tma_ = false, bool PreA_ = false,
          int Group_ = 1, bool Assist_ = false>
struct WsCfg {
  static constexpr int BM = 128, BN = BN_, BK = 64;
  static constexpr int kNB = NB_;
  static constexpr int kStages = Stages_;  // fp16 stages in the shared-memory ring
  static constexpr int kDepth = Depth_;    // register variant: load steps in flight per thread
  static constexpr bool kRing = Ring_;
  static constexpr bool kTma = Tma_;
  static constexpr int kSpan = Span_;      // register variant: k-tiles per load step (1 or 2)
  static constexpr bool kPreA = PreA_;
  static constexpr int kGroup = Group_;
  static constexpr bool kAssist = Assist_;
  // Consumers convert k-tile t + 3 before multiplying t: the stage it reuses held k-tile t - 2,
  // whose MMAs they released in iteration t - 1 (t + 4 would wait on their own release of t - 1).
  static constexpr int kAssistAhead = 3;
  static constexpr int kConsumerThreads = 256;
  static constexpr int kDequantThreads = 256;
  static constexpr int kThreads = kConsumerThreads + kDequantThreads;
  static constexpr int kAccThreads = kConsumerThreads;  // threads that hold accumulators (split-K)
  static constexpr int kMinBlocks = 1;
  static constexpr int kRows = BM + kNB * BN;
  // Rows the dequant warps fill: all, or (kPreA) the B rows; operands whose raw bytes they read.
  static constexpr int kRawRow0 = kPreA ? BM : 0;
  static constexpr int kRawRows = kRows - kRawRow0;
  static constexpr int kRawOp0 = kPreA ? 1 : 0;
  static constexpr int kRawOps = 1 + kNB - kRawOp0;
  static constexpr int kRowBytes = BK * 2;  // 128 B of fp16: one swizzle atom row
  static constexpr int kStageBytes = kRows * kRowBytes;
  static constexpr int kTasks = kRawRows * 2 * kSpan / kDequantThreads;  // 16-byte raw chunks per thread and step
  static constexpr int kAcc = kNB * BN / 2;                   // fp32 accumulators per consumer thread
  // Raw ring (kRing): 2 rounds of 4 k-tiles; a row's 128 bytes padded to 144 so that 8 consecutive
  // rows' 16-byte reads hit 8 distinct bank groups; 16 scale bytes per row and round.
  static constexpr int kRoundKtiles = 4;
  static constexpr int kRawStride = 144;
  static constexpr int kRawRoundBytes = kRows * kRawStride;
  static constexpr int kScaleRoundBytes = kRows * 16;
  // TMA ring: 2 slots, each the rows' 128-byte segments (4 k-tiles, 128-byte swizzled boxes, so the
  // 16-byte column c of row r sits at c ^ (r % 8)), then 2048 scale bytes per operand (plain: tile
  // rows x 16 bytes; blocked: the 4 k-tiles' 512-byte blocks of the operand's 128-row block).
  static constexpr int kTmaDataBytes = kRawRows * 128;
  static constexpr int kTmaScaleBytes = 2048;
  static constexpr int kTmaSlotBytes = kTmaDataBytes + kRawOps * kTmaScaleBytes;
  static constexpr int kRawBytes = kRing ? 2 * (kRawRoundBytes + kScaleRoundBytes) : kTma ? 2 * kTmaSlotBytes : 0;
  static constexpr int kRawBarBytes = kTma ? 2 * 2 * 8 : 0;  // per slot: full (TMA bytes), empty (read)
  static constexpr int kSplitUnit = kRing || kTma ? kRoundKtiles : kSpan;  // split-K boundaries on whole steps
  static constexpr int kSmemAlloc =
      kStages * kStageBytes + kRawBytes + 2 * kStages * 8 + kRawBarBytes + 1024;  // + align slack
  static_assert(kSmemAlloc <= 227 * 1024, "shared memory per CTA");
  static_assert(!kRing || kRows == kDequantThreads, "ring copies: one scale row per dequant thread");
  static_assert(!kRing || kSpan == 1, "the ring variant converts one k-tile per stage");
  static_assert(!(kRing && kTma), "one raw-byte path per configuration");
  static_assert(!kTma || (kSpan == 1 && kTmaSlotBytes % 1024 == 0 && (BM * 128) % 1024 == 0 && (BN * 128) % 1024 == 0),
                "TMA slots and boxes stay 1024-byte aligned for the 128-byte swizzle");
  static_assert(!kTma || BN * 16 <= kTmaScaleBytes, "plain scale boxes fit an operand's scale region");
  static_assert((kSpan == 1 || kSpan == 2) && kStages % kSpan == 0, "a step's stages never wrap the ring");

  static_assert(BN == 64 || BN == 128, "wgmma m64nBNk16 with BN 64 or 128");
  static_assert(kRawRows % 128 == 0, "each dequant warp owns whole 16-row blocks in every task");
  static_assert(!kPreA || kTma, "the pre-dequantized A tile arrives by TMA");
  static_assert(kGroup == 1 || (kTma && kRoundKtiles % kGroup == 0 && kGroup < kStages),
                "k-tile groups divide a TMA round and leave the consumers a stage");
  static_assert(kStageBytes % 1024 == 0, "stages stay 1024-byte aligned for the swizzle");
  static_assert(kStages >= 2 && kDepth >= 1, "ring and load pipeline need depth");
  static_assert(!kAssist || (kTma && kPreA && kTasks == 1 && kConsumerThreads == kDequantThreads &&
                             kAssistAhead + 2 <= kStages),
                "consumer-assisted conversion: TMA with A pre-dequantized, one task per thread, as many consumer "
                "as dequant warps (a stage's full barrier counts 8 warps either way), and a ring deep enough");
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
  uint8_t* raw_;     // kRing: [2][kRows][kRawStride] raw bytes, then [2][kRows][16] scales; kTma: 2 slots
  uint32_t full_;    // kStages mbarriers: stage dequantized (kDequantThreads arrivals; kTma: one per warp,
                     // kPreA: plus one by the thread that expects the A box's bytes)
  uint32_t empty_;   // kStages mbarriers: stage's MMAs done (kConsumerThreads arrivals; kTma: one per warp)
  uint64_t* raw_full_;   // kTma, per slot: the round's TMA bytes have landed (1 arrival + bytes)
  uint64_t* raw_empty_;  // kTma, per slot: the round is in registers (one arrival per dequant warp)

  __device__ explicit WsMainloop(uint8_t* smem)
      : stages_(smem + ((1024 - (smem_addr(smem) & 1023)) & 1023)),
        raw_(stages_ + Cfg::kStages * Cfg::kStageBytes),
        full_(smem_addr(raw_ + Cfg::kRawBytes)),
        empty_(full_ + 8 * Cfg::kStages),
        raw_full_(reinterpret_cast<uint64_t*>(raw_ + Cfg::kRawBytes + 2 * 8 * Cfg::kStages)),
        raw_empty_(raw_full_ + 2) {}

  // Generic pointer to stage s's full barrier, for TMA copies that complete on it.
  __device__ uint64_t* full_bar(int s) const { return reinterpret_cast<uint64_t*>(raw_ + Cfg::kRawBytes) + s; }

  // The TMA tiles' mainloop: as run(), with the operands' tensor maps (kernel parameters) and the
  // batch index for their third coordinate.
  __device__ bool run_tma(const TileSrc (&src)[1 + Cfg::kNB], const TmaOperands& tma, int batch, int kt0, int count,
                          Acc& acc) const {
    static_assert(Cfg::kTma, "run_tma needs a TMA configuration");
    if (threadIdx.x == 0) {
      // Both sides arrive once per warp here (see consume() and dequantize_tma()).
      for (int s = 0; s < Cfg::kStages; ++s) {
        mbar_init(full_ + 8 * s, Cfg::kDequantThreads / 32 + (Cfg::kPreA ? 1 : 0));
        mbar_init(empty_ + 8 * s, Cfg::kConsumerThreads / 32);
      }
      for (int s = 0; s < 2; ++s) {
        cutlass::arch::ClusterTransactionBarrier::init(&raw_full_[s], 1);
        cutlass::arch::ClusterBarrier::init(&raw_empty_[s],
                                            (Cfg::kDequantThreads + (Cfg::kAssist ? Cfg::kConsumerThreads : 0)) / 32);
      }
      cutlass::arch::fence_barrier_init();  // the inits, visible to the TMA unit's complete_tx
    }
    __syncthreads();
    if (threadIdx.x >= Cfg::kConsumerThreads) {
      dequantize_tma(src, tma, batch, kt0, count);
      return false;
    }
    consume(count, acc, &src);
    return true;
  }

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
  // src: the operands, for the consumers' share of the conversion (Cfg::kAssist); else unused.
  __device__ void consume(int count, Acc& acc, const TileSrc (*src)[1 + Cfg::kNB] = nullptr) const {
    const int wg = threadIdx.x >> 7;
    int s = 0, prev = 0;
    uint32_t phase = 0;
    [[maybe_unused]] uint32_t scale_off = 0, scale_step = 0;
    [[maybe_unused]] int next_odd = 1;  // the next odd k-tile these warps convert
    if constexpr (Cfg::kAssist) task_scales(*src, threadIdx.x, 0, scale_off, scale_step);
    for (int t = 0; t < count; ++t) {
      if constexpr (Cfg::kAssist) {
        // Convert the odd k-tiles up to t + kAssistAhead while the wgmma of t - 1 run.
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        for (; next_odd < count && next_odd <= t + Cfg::kAssistAhead; next_odd += 2) {
          const int u = next_odd, round = u / Cfg::kRoundKtiles, v = u % Cfg::kRoundKtiles, slot = round & 1;
          cutlass::arch::ClusterTransactionBarrier::wait(&raw_full_[slot], (round >> 1) & 1);
          const int r = warp * 16 + (lane & 15);  // raw row, as task 0 of dequant warp `warp`
          const uint8_t* data = raw_ + slot * Cfg::kTmaSlotBytes;
          const uint4 raw = *reinterpret_cast<const uint4*>(data + r * 128 + (((2 * v + (lane >> 4)) ^ (lane & 7)) * 16));
          const uint32_t sc = *reinterpret_cast<const uint16_t*>(data + Cfg::kTmaDataBytes + scale_off + v * scale_step);
          if (v == Cfg::kRoundKtiles - 1) {  // this warp's last read of the slot
            __syncwarp();
            if (lane == 0) cutlass::arch::ClusterBarrier::arrive(&raw_empty_[slot]);
          }
          const int su = u % Cfg::kStages;
          mbar_wait(empty_ + 8 * su, ((u / Cfg::kStages) & 1) ^ 1);
          convert_task(raw, sc, stages_ + su * Cfg::kStageBytes, Cfg::kRawRow0 + r, lane);
          fence_proxy_async();
          __syncwarp();
          if (lane == 0) mbar_arrive(full_ + 8 * su);
        }
      }
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
      // TMA tiles: one arrival per warp (wgmma.wait_group is warp-collective, so the whole warp's
      // reads of the stage are done), a 32x smaller barrier update count per k-tile.
      wgmma_wait<1>();
      if (t > 0 && (!Cfg::kTma || (threadIdx.x & 31) == 0)) mbar_arrive(empty_ + 8 * prev);
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

  // TMA variant: where task j of thread d (of 256, dequant or assisting consumer) finds its scale
  // pair in a slot (offset of k-tile 0 of the round, step per k-tile), plain or blocked layout.
  __device__ static void task_scales(const TileSrc (&src)[1 + Cfg::kNB], int d, int j, uint32_t& off, uint32_t& step) {
    const int warp = d >> 5, lane = d & 31, q = lane >> 4;
    const int r = Cfg::kRawRow0 + (warp + 8 * j) * 16 + (lane & 15);
    const int o = r < Cfg::BM ? 0 : 1 + (r - Cfg::BM) / Cfg::BN;
    const int local = r < Cfg::BM ? r : (r - Cfg::BM) % Cfg::BN;
    off = step = 0;
#pragma unroll
    for (int oi = Cfg::kRawOp0; oi <= Cfg::kNB; ++oi) {
      if (oi != o) continue;
      const TileSrc& t = src[oi];
      const int row = static_cast<int>(t.row0 % 128) + local;  // in the operand's 128-row scale block
      off = (oi - Cfg::kRawOp0) * Cfg::kTmaScaleBytes + q * 2 +
            (t.rk_blocks == 0 ? local * 16 : (row % 32) * 16 + (row / 32) * 4);
      step = t.rk_blocks == 0 ? 4 : 512;
    }
  }

  // One task: 32 raw elements (half q = lane / 16 of a k-tile row) to fp16 in stage row r; chunk
  // q + 2c of the row lands at column (q + 2c) ^ (r % 8), and r % 8 == lane % 8.
  __device__ static void convert_task(uint4 raw, uint32_t sc, uint8_t* stage, int r, int lane) {
    const int q = lane >> 4, sw = lane & 7;
    uint32_t h[16];
    dequant32(raw, sc, h);
#pragma unroll
    for (int c = 0; c < 4; ++c)
      *reinterpret_cast<uint4*>(stage + r * Cfg::kRowBytes + (((q + 2 * c) ^ sw) * 16)) =
          make_uint4(h[4 * c], h[4 * c + 1], h[4 * c + 2], h[4 * c + 3]);
  }

  // TMA variant. Each thread reads its whole round (4 k-tiles) from the slot into registers first,
  // so the shared-load latency is paid once per round, not per k-tile, and the slot is released
  // (raw_empty) before the round is converted. Dequant thread 0 issues round p's copies into slot
  // p % 2 once every dequant warp has read round p - 2; it tests for that after each k-tile instead
  // of blocking, so its warp is not held back to the slowest one. The other threads only wait on
  // raw_full. Warps arrive on full and raw_empty once (lane 0 after __syncwarp; for full, each
  // lane's fence.proxy.async precedes it), 8 barrier updates per k-tile instead of 256. Task
  // mapping as in dequantize(): task j of a thread is row r = (warp + 8 j) * 16 + lane % 16, half
  // q = lane / 16 of the k-tile (kPreA: stage row r = BM + that, raw row r - BM); r % 8 == lane % 8,
  // so the 8 lanes of each phase of the 16-byte ring reads (column (2 v + q) ^ (r % 8)) and of the
  // fp16 stores hit 8 distinct columns. Rows past the operand are converted too, without a test:
  // the TMA zero-fills their bytes (and plain scales; blocked padding is arbitrary), and a stage row
  // only reaches the output row or column it belongs to, which is never stored.
  __device__ void dequantize_tma(const TileSrc (&src)[1 + Cfg::kNB], const TmaOperands& tma, int batch, int kt0,
                                 int count) const {
    const int d = threadIdx.x - Cfg::kConsumerThreads;
    const int warp = d >> 5, lane = d & 31, q = lane >> 4, sw = lane & 7;
    uint32_t scale_off[Cfg::kTasks], scale_step[Cfg::kTasks];
#pragma unroll
    for (int j = 0; j < Cfg::kTasks; ++j) task_scales(src, d, j, scale_off[j], scale_step[j]);
    // kAssist: the consumer warps convert the odd k-tiles of each round.
    auto mine = [](int v) { return !Cfg::kAssist || v % 2 == 0; };
    // Bytes per round: every box in full (TMA counts zero-filled rows too), scales per layout.
    uint32_t round_bytes = Cfg::kTmaDataBytes;
#pragma unroll
    for (int oi = Cfg::kRawOp0; oi <= Cfg::kNB; ++oi)
      round_bytes += src[oi].rk_blocks == 0 ? (oi == 0 ? Cfg::BM : Cfg::BN) * 16 : Cfg::kTmaScaleBytes;

    const int rounds = count / Cfg::kRoundKtiles;
    int issued = 0;  // thread 0: rounds whose copies are issued
    auto issue = [&]() {
      const int slot = issued & 1;
      uint8_t* dst = raw_ + slot * Cfg::kTmaSlotBytes;
      const int kt = kt0 + issued * Cfg::kRoundKtiles;
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&raw_full_[slot], round_bytes);
#pragma unroll
      for (int oi = Cfg::kRawOp0; oi <= Cfg::kNB; ++oi) {
        const TileSrc& t = src[oi];
        const int row0 = static_cast<int>(t.row0);
        const int box_row = (oi == 0 ? 0 : Cfg::BM + (oi - 1) * Cfg::BN) - Cfg::kRawRow0;
        cute::SM90_TMA_LOAD_3D::copy(&tma.data[oi], &raw_full_[slot], 0, dst + box_row * 128, kt * (Cfg::BK / 2), row0,
                                     batch);
        uint8_t* sdst = dst + Cfg::kTmaDataBytes + (oi - Cfg::kRawOp0) * Cfg::kTmaScaleBytes;
        if (t.rk_blocks == 0)
          cute::SM90_TMA_LOAD_3D::copy(&tma.scales[oi], &raw_full_[slot], 0, sdst, kt * (Cfg::BK / 16), row0, batch);
        else
          cute::SM90_BULK_COPY_G2S::copy(t.scales + ((t.row0 / 128) * t.rk_blocks + kt) * 512, &raw_full_[slot], sdst,
                                         Cfg::kTmaScaleBytes);
      }
      ++issued;
    };
    // Thread 0: issue the next round if its slot is free (block: wait for it).
    auto try_issue = [&](bool block) {
      if (d != 0 || issued >= rounds) return;
      const uint32_t parity = ((issued >> 1) & 1) ^ 1;  // a fresh barrier's preceding phase counts as done
      if (block) cutlass::arch::ClusterBarrier::wait(&raw_empty_[issued & 1], parity);
      else if (!cutlass::arch::ClusterBarrier::test_wait(&raw_empty_[issued & 1], parity, 1)) return;
      issue();
    };
    try_issue(true);
    try_issue(true);
    // The fp16 A comes from the pre-pass, which this grid may overlap (programmatic dependent
    // launch): the thread that issues A's copies waits for it to complete, after its first B copies.
    if constexpr (Cfg::kPreA)
      if (d == 0) pdl_wait();

    int s = 0;
    uint32_t phase = 0;
    for (int round = 0; round < rounds; ++round) {
      while (d == 0 && issued <= round) try_issue(true);
      const int slot = round & 1;
      cutlass::arch::ClusterTransactionBarrier::wait(&raw_full_[slot], (round >> 1) & 1);
      const uint8_t* data = raw_ + slot * Cfg::kTmaSlotBytes;
      const uint8_t* scales = data + Cfg::kTmaDataBytes;
      uint4 raw[Cfg::kRoundKtiles][Cfg::kTasks];
      uint32_t sc[Cfg::kRoundKtiles][Cfg::kTasks];
#pragma unroll
      for (int v = 0; v < Cfg::kRoundKtiles; ++v)
#pragma unroll
        for (int j = 0; j < Cfg::kTasks; ++j) {
          if (!mine(v)) continue;
          const int r = (warp + 8 * j) * 16 + (lane & 15);  // raw row
          raw[v][j] = *reinterpret_cast<const uint4*>(data + r * 128 + (((2 * v + q) ^ sw) * 16));
          sc[v][j] = *reinterpret_cast<const uint16_t*>(scales + scale_off[j] + v * scale_step[j]);
        }
      __syncwarp();
      if (lane == 0) cutlass::arch::ClusterBarrier::arrive(&raw_empty_[slot]);  // the slot is in registers now
#pragma unroll
      for (int v0 = 0; v0 < Cfg::kRoundKtiles; v0 += Cfg::kGroup) {
        int gs[Cfg::kGroup];
#pragma unroll
        for (int g = 0; g < Cfg::kGroup; ++g) {
          gs[g] = s;
          mbar_wait(empty_ + 8 * s, phase ^ 1);
          if constexpr (Cfg::kPreA) {
            // The A box (fp16, already in the stage's k order; the TMA applies the swizzle) for
            // this k-tile, as a transaction on the stage's full barrier: consumers wait for it with B.
            if (d == 0) {
              uint64_t* full = full_bar(s);
              cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(full, Cfg::BM * Cfg::kRowBytes);
              cute::SM90_TMA_LOAD_3D::copy(&tma.data[0], full, 0, stages_ + s * Cfg::kStageBytes,
                                           (kt0 + round * Cfg::kRoundKtiles + v0 + g) * Cfg::kRowBytes,
                                           static_cast<int>(src[0].row0), batch);
            }
          }
          if (++s == Cfg::kStages) {
            s = 0;
            phase ^= 1;
          }
        }
#pragma unroll
        for (int g = 0; g < Cfg::kGroup; ++g) {
          if (!mine(v0 + g)) continue;
#pragma unroll
          for (int j = 0; j < Cfg::kTasks; ++j)
            convert_task(raw[v0 + g][j], sc[v0 + g][j], stages_ + gs[g] * Cfg::kStageBytes,
                         Cfg::kRawRow0 + (warp + 8 * j) * 16 + (lane & 15), lane);
        }
        fence_proxy_async();
        __syncwarp();
        if (lane == 0)
#pragma unroll
          for (int g = 0; g < Cfg::kGroup; ++g)
            if (mine(v0 + g)) mbar_arrive(full_ + 8 * gs[g]);
        try_issue(false);
      }
    }
  }
};

}  // namespace swapffn::cuda::nvfp4

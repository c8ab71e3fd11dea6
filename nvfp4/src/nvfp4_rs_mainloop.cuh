// Register-operand mainloop for the NVFP4 GEMM and dual GEMM (the `*_rs` tiles): the weights are
// converted by the warps that multiply them, straight into wgmma's register fragment.
//
// Why: tiles that convert B into an fp16 tile in shared memory for the wgmma to read back spend
// ~84 KB of shared-memory traffic per 64-k tile against 512 tensor cycles, and two barrier
// hand-offs between warp roles (~2x the k-tile's MMA time, docs/NVFP4.md). Hopper's wgmma may take A from
// registers, so the operands are swapped, as in mixed-input GEMMs: the tile computes C^T = B A^T
// with the weight rows (problem N) as wgmma's M dimension, in registers, and the activations
// (problem M; dequantized once by the pre-pass, nvfp4_predequant_a.cu, A16Order::fragment) as the
// shared-memory operand. Nothing converted is written to shared memory and nobody waits for a
// converted stage.
//
// Roles: one producer thread (warpgroup 2) copies each stage by TMA: the activations' two 64-k boxes
// (128-byte swizzle), the weight rows' 64 raw bytes (128 k, unswizzled: a warp's 16-byte reads of
// 8 rows x 64 bytes are conflict-free), their scales (plain: a 16-byte box per row from the even
// stage of the pair, 16-byte aligned, of which this stage uses its 8; blocked: the stage's two
// 512-byte units of each 128-row block). Consumer warpgroups 0 and 1 each own kSlabs slabs of 64
// weight rows (GEMM `128x128rs` / `128x256rs`: 64 or 128 consecutive rows; dual `128x128rs`: the
// same 64 rows of B1 and of B2; dual `128x64rs`: warpgroup 0 B1's 64 rows, warpgroup 1 B2's; GEMM
// `128x64rs`: both the same 64 rows, warpgroup w taking every second stage from stage w), each
// slab with its own accumulators. Thread (g = lane / 4, t = lane % 4) of warp w owns slab
// rows r = 16 (w % 4) + g and r + 8 and, per 128-k stage, raw bytes 16 t .. 16 t + 15 of each
// (scale blocks 2 t and 2 t + 1): 64-k half h of the stage uses the row's words 2 h, 2 h + 1 and
// scale block 2 t + h, and dequant8's pair s of word 2 h + u is the fragment register of k16 step
// s, columns 8 u + 2 t and 8 u + 2 t + 1, where the pre-pass put the activations of the same k.
// A stage is 2 kSlabs units (half, slab) of 4 wgmma; fragments are double-buffered: a unit is
// converted while the unit before it is queued on the tensor pipe, once the unit before that has
// completed (wgmma.wait_group 1), and its registers are pinned until then. A stage is released
// (one arrival per warp that consumes it) once all its units' wgmma have completed; its raw bytes were
// read into registers a unit earlier. (A third buffer gained nothing; with two slabs it also makes
// ptxas serialise the wgmma, C7512.)
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "nvfp4_dequant.cuh"
#include "nvfp4_launch.hpp"
#include "nvfp4_stream_k.cuh"
#include "nvfp4_tile_mainloop.cuh"
#include "nvfp4_wgmma.cuh"
#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda::nvfp4 {

// BM activation rows (problem M: wgmma's N); BN weight rows per weight operand (problem N), NB
// weight operands (1: GEMM; 2: dual GEMM, B1 and B2); BK = 128 k per stage (two 64-k halves).
// WgStride 2: the two consumer warpgroups split the tile's K, warpgroup w taking stages w, w + 2,
// ... of the same 64 weight rows (the GEMM's `128x64rs`); their partial sums are added at the end.
template <int Stages_, int BN_, int NB_, int WgStride_ = 1>
struct RsCfg {
  static constexpr int BM = 128, BN = BN_, BK = 128;
  static constexpr int kNB = NB_;
  static constexpr int kStages = Stages_;
  static constexpr int kWgStride = WgStride_;
  static constexpr bool kPreA = true;  // the activations come from the pre-pass (launched as a PDL dependent)
  static constexpr int kConsumerThreads = 256;
  // + the producer warpgroup. ptxas allocates registers per warpgroup in wgmma kernels (a 288-thread
  // CTA got the same 168 per thread as 384), so the producer gives registers back (setmaxnreg) and
  // the consumers, which hold kSlabs x 64 accumulators and two fragment buffers, take them.
  static constexpr int kThreads = kConsumerThreads + 128;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static_assert(128 * kProducerRegs + kConsumerThreads * kConsumerRegs <= 65536, "register file per SM");
  static constexpr int kAccThreads = kConsumerThreads;
  static constexpr int kMinBlocks = 1;
  static constexpr int kWRows = BN * NB_;             // weight rows in a stage, operand o at rows o * BN
  static constexpr int kSlabs = kWRows * kWgStride / 128;  // 64-row wgmma slabs per consumer warpgroup
  // fp32 accumulators per consumer thread that split-K reduces (with the K split across the
  // warpgroups, each keeps the sums of half of its positions: exchange_halves_rs).
  static constexpr int kAcc = 64 * kSlabs / kWgStride;
  static constexpr int kSplitUnit = 1;                // split-K boundaries on whole stages
  static constexpr int kActBytes = 2 * BM * 128;      // two 64-k boxes of fp16 activations
  static constexpr int kWeightBytes = kWRows * 64;    // 128 k of e2m1 per weight row
  static constexpr int kScaleBytes = kWRows * 16;     // plain: a 16-byte box per row; blocked: 1024 per 128 rows
  static constexpr int kStageBytes = kActBytes + kWeightBytes + kScaleBytes;
  static constexpr int kSmemAlloc = kStages * kStageBytes + 2 * kStages * 8 + 1024;  // + align slack
  static_assert(kStages >= 2, "the producer must be able to run ahead of the consumers");
  static_assert(kSmemAlloc <= 227 * 1024, "shared memory per CTA");
  static_assert(kStageBytes % 1024 == 0 && (BM * 128) % 1024 == 0,
                "stages and activation boxes stay 1024-byte aligned for the 128-byte swizzle");
  static_assert((NB_ == 1 && WgStride_ == 1 && (BN == 128 || BN == 256)) || (NB_ == 1 && WgStride_ == 2 && BN == 64) ||
                    (NB_ == 2 && WgStride_ == 1 && (BN == 128 || BN == 64)),
                "GEMM: 1 or 2 slabs of 64 weight rows per consumer warpgroup, or one slab shared by both with "
                "K split between them; dual GEMM: one slab of each operand (BN = 128) or one operand per "
                "warpgroup (BN = 64)");
  static_assert(kStages % kWgStride == 0, "each warpgroup keeps to its own ring slots");
  static constexpr int kScaleBlocks = (BN + 127) / 128;  // 128-row blocks of blocked scales per operand
  static_assert(BN <= 256, "a TMA box has at most 256 rows");
  static_assert(BM == 128, "the register-operand wgmma is m64n128k16");

  // First stage row of slab j of consumer warpgroup wg (operand o's rows are o * BN .. o * BN + BN - 1),
  // and the weight operand it belongs to.
  __device__ static constexpr int slab_row(int wg, int j) {
    return NB_ == 1 ? (WgStride_ == 1 ? wg * (BN / 2) : 0) + j * 64 : j * BN + wg * 64;
  }
  __device__ static constexpr int slab_operand(int wg, int j) { return slab_row(wg, j) / BN; }
};

// The tensor maps an rs CTA copies from, in the kernel parameter (__grid_constant__): the
// activations' fp16 copy, and weight operand o's bytes and plain scales. Two sources: the GEMM's
// TmaOperands (operand 0 is the activations) and the maps of a grouped GEMM's group. They are
// reached through these overloads rather than a struct of pointers: building such a struct cost
// the two-slab consumers registers they do not have (ptxas C7600).
__device__ __forceinline__ const CUtensorMap* act_map(const TmaOperands& t) { return &t.data[0]; }
__device__ __forceinline__ const CUtensorMap* weight_map(const TmaOperands& t, int o) { return &t.data[1 + o]; }
__device__ __forceinline__ const CUtensorMap* scale_map(const TmaOperands& t, int o) { return &t.scales[1 + o]; }
__device__ __forceinline__ const CUtensorMap* act_map(const GroupMaps& g) { return &g.act; }
__device__ __forceinline__ const CUtensorMap* weight_map(const GroupMaps& g, int) { return &g.data; }
__device__ __forceinline__ const CUtensorMap* scale_map(const GroupMaps& g, int) { return &g.scales; }
// Rows of a weight or plain-scale box: the tile's BN (0 here) for the GEMM's maps, which are made
// per tile; kGroupBoxRows for a group's, which serve both widths of the grouped rs grid.
template <class Maps>
struct WeightBoxRows {
  static constexpr int value = 0;
};
template <>
struct WeightBoxRows<GroupMaps> {
  static constexpr int value = kGroupBoxRows;
};

template <class Cfg>
struct RsMainloop {
  using Acc = float[Cfg::kSlabs][64];

  uint8_t* stages_;  // [kStages][activations | weights | scales], 1024-aligned
  uint64_t* full_;   // per stage: its TMA bytes have landed (1 arrival + bytes)
  uint64_t* empty_;  // per stage: its wgmma have completed (one arrival per consumer warp)

  __device__ explicit RsMainloop(uint8_t* smem)
      : stages_(smem + ((1024 - (smem_addr(smem) & 1023)) & 1023)),
        full_(reinterpret_cast<uint64_t*>(stages_ + Cfg::kStages * Cfg::kStageBytes)),
        empty_(full_ + Cfg::kStages) {}

  // Runs stages [kt0, kt0 + count) of 128 k. src[0]: the activations (row0 = first row of the
  // tile; their fp16 copy is act_map(maps)), src[1 + o]: weight operand o (weight_map(maps, o),
  // plain scales scale_map(maps, o)). Returns true in consumer threads, whose `acc` (zeroed by the
  // caller) then holds the slabs' sums in wgmma's accumulator layout with weight rows as rows; the
  // producer warpgroup returns false and must leave. All threads must call it (it starts with a CTA
  // barrier).
  template <class Maps>
  __device__ bool run(const TileSrc (&src)[1 + Cfg::kNB], const Maps& maps, int batch, int kt0, int count,
                      Acc& acc) const {
    if (!start()) {
      if (threadIdx.x == Cfg::kConsumerThreads) produce(src, maps, batch, kt0, count, 0);
      return false;
    }
    if (count > 0) consume(src, kt0, count, acc, 0);
    return true;
  }

  // Stream-K (nvfp4_stream_k.cuh): runs every segment of CTA `cta` of `sk` through one stage ring.
  // src_of(tile, src, batch) gives a tile's sources and batch. After each segment the consumer
  // threads call epilogue(segment, acc) with the segment's sums in acc, then acc is zeroed for
  // the next; the producer's copies of the next segment meanwhile run ahead. All threads must
  // call it; the epilogue may synchronise the 256 consumer threads (named barrier 1) but must not
  // touch the stages.
  template <class Maps, class SrcOf, class Epilogue>
  __device__ void run_stream_k(const StreamK& sk, int cta, const Maps& maps, SrcOf&& src_of, Epilogue&& epilogue,
                               Acc& acc) const {
    static_assert(Cfg::kWgStride == 1, "stream-K segments have any stage count: both warpgroups take every stage");
    int ring = 0;  // stages through the ring so far
    // Separate loops per role: ptxas ignores setmaxnreg where consumer code is reachable after the
    // producer's decrease.
    if (!start()) {
      if (threadIdx.x != Cfg::kConsumerThreads) return;
      sk.for_each(cta, [&](const StreamKSegment& seg) {
        TileSrc src[1 + Cfg::kNB];
        int batch = 0;
        src_of(seg.tile, src, batch);
        produce(src, maps, batch, seg.kt0, seg.count, ring);
        ring += seg.count;
      });
      return;
    }
    sk.for_each(cta, [&](const StreamKSegment& seg) {
      TileSrc src[1 + Cfg::kNB];
      int batch = 0;
      src_of(seg.tile, src, batch);
      consume(src, seg.kt0, seg.count, acc, ring);
      ring += seg.count;
      epilogue(seg, acc);
#pragma unroll
      for (int j = 0; j < Cfg::kSlabs; ++j)
#pragma unroll
        for (int r = 0; r < 64; ++r) acc[j][r] = 0.0f;
    });
  }

 private:
  // Initialises the ring's barriers and splits the roles: false in the producer warpgroup (which
  // gives its registers to the consumers), true in the consumer threads.
  __device__ bool start() const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < Cfg::kStages; ++s) {
        cutlass::arch::ClusterTransactionBarrier::init(&full_[s], 1);
        cutlass::arch::ClusterBarrier::init(&empty_[s], Cfg::kConsumerThreads / 32 / Cfg::kWgStride);
      }
      cutlass::arch::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x >= Cfg::kConsumerThreads) {
      setmaxnreg_dec<Cfg::kProducerRegs>();
      return false;
    }
    setmaxnreg_inc<Cfg::kConsumerRegs>();
    return true;
  }

  // Copies stages [kt0, kt0 + count) into the ring, whose first `ring` stages were used before
  // (by earlier segments of a stream-K CTA); the first segment waits for the pre-pass.
  template <class Maps>
  __device__ void produce(const TileSrc (&src)[1 + Cfg::kNB], const Maps& maps, int batch, int kt0, int count,
                          int ring) const {
    // Blocked scales: one bulk copy of the stage's two 512-byte units per 128-row block that
    // exists (a block past the operand's last row block is not in memory; its rows are never stored);
    // a 64-row tile copies its block's units whole and reads its half of them.
    uint32_t bytes = Cfg::kActBytes + Cfg::kWeightBytes;
#pragma unroll
    for (int o = 0; o < Cfg::kNB; ++o) {
      const TileSrc& w = src[1 + o];
      if (w.rk_blocks == 0) bytes += Cfg::BN * 16;
#pragma unroll
      for (int blk = 0; blk < Cfg::kScaleBlocks; ++blk)
        if (w.rk_blocks != 0 && w.row0 + blk * 128 < w.rows) bytes += 2 * 512;
    }
    const int arow0 = static_cast<int>(src[0].row0);
    constexpr int kBoxRows = WeightBoxRows<Maps>::value == 0 ? Cfg::BN : WeightBoxRows<Maps>::value;
    static_assert(Cfg::BN % kBoxRows == 0, "a tile's weight rows are whole boxes");
    auto copy_weights = [&](int t) {
      const int s = (ring + t) % Cfg::kStages, kt = kt0 + t;
      uint8_t* st = stages_ + s * Cfg::kStageBytes;
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full_[s], bytes);
#pragma unroll
      for (int o = 0; o < Cfg::kNB; ++o) {
        const TileSrc& w = src[1 + o];
        const int wrow0 = static_cast<int>(w.row0);
#pragma unroll
        for (int r = 0; r < Cfg::BN; r += kBoxRows)
          cute::SM90_TMA_LOAD_3D::copy(weight_map(maps, o), &full_[s], 0, st + Cfg::kActBytes + (o * Cfg::BN + r) * 64,
                                       kt * (Cfg::BK / 2), wrow0 + r, batch);
        uint8_t* sdst = st + Cfg::kActBytes + Cfg::kWeightBytes + o * Cfg::BN * 16;
        if (w.rk_blocks == 0) {
#pragma unroll
          for (int r = 0; r < Cfg::BN; r += kBoxRows)
            cute::SM90_TMA_LOAD_3D::copy(scale_map(maps, o), &full_[s], 0, sdst + r * 16, (kt & ~1) * (Cfg::BK / 16), wrow0 + r,
                                         batch);
        } else {
          // compute-sanitizer racecheck (2025.3) does not follow a plain bulk copy's completion
          // through the mbarriers and reports the consumers' scale reads; tensor copies it follows.
#pragma unroll
          for (int blk = 0; blk < Cfg::kScaleBlocks; ++blk)
            if (w.row0 + blk * 128 < w.rows)
              cute::SM90_BULK_COPY_G2S::copy(w.scales + ((w.row0 / 128 + blk) * w.rk_blocks + 2 * kt) * 512, &full_[s],
                                             sdst + blk * 2048, 2 * 512);
        }
      }
    };
    auto copy_activations = [&](int t) {
      const int s = (ring + t) % Cfg::kStages, kt = kt0 + t;
      uint8_t* st = stages_ + s * Cfg::kStageBytes;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        cute::SM90_TMA_LOAD_3D::copy(act_map(maps), &full_[s], 0, st + h * Cfg::BM * 128, (2 * kt + h) * 128, arow0, batch);
    };
    // The first stages' weights go out before waiting for the pre-pass that writes the activations
    // (this grid is its programmatic dependent).
    const int first = ring > 0 ? 0 : count < Cfg::kStages ? count : Cfg::kStages;
    for (int t = 0; t < first; ++t) copy_weights(t);
    if (ring == 0) pdl_wait();
    for (int t = 0; t < first; ++t) copy_activations(t);
    for (int t = first; t < count; ++t) {
      const int g = ring + t;
      if (g >= Cfg::kStages) cutlass::arch::ClusterBarrier::wait(&empty_[g % Cfg::kStages], ((g / Cfg::kStages) & 1) ^ 1);
      copy_weights(t);
      copy_activations(t);
    }
  }

  using Frag = uint32_t[4][4];  // [k16 step][fragment register]

  // Consumes stages [kt0, kt0 + count) of the tile `src` describes from the ring, after `ring`
  // stages of earlier segments, and releases the last one too (a following segment's producer
  // waits for it).
  __device__ void consume(const TileSrc (&src)[1 + Cfg::kNB], int kt0, int count, Acc& acc, int ring) const {
    uint32_t blocked = 0;  // bit o: weight operand o's scales are blocked (each has its own layout)
#pragma unroll
    for (int o = 0; o < Cfg::kNB; ++o) blocked |= (src[1 + o].rk_blocks != 0 ? 1u : 0u) << o;
    // Blocked scales of a 64-row tile: its rows' offset in their 128-row block (0 for wider tiles).
    const int block_row0 = Cfg::BN % 128 == 0 ? 0 : static_cast<int>(src[1].row0 % 128);
    constexpr int kS = Cfg::kSlabs, kUnits = 2 * kS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2;
    const int g = lane >> 2, t = lane & 3;
    // Stage row of this thread in slab j, fragment row rr (r and r + 8), and the offset of its two
    // scale bytes in the stage's scale region (slab j's operand o has its own layout; its region
    // starts at o * BN * 16). Each 128-row block's scales take 2048 bytes in both layouts (blocked:
    // its two 512-byte units first; a 64-row tile's region holds just its block's two units).
    // Recomputed per stage: holding them costs the two-slab tiles registers they do not have.
    const int rbase = (warp & 3) * 16 + g;
    auto stage_row = [&](int j, int rr) { return Cfg::slab_row(wg, j) + rbase + 8 * rr; };
    auto scale_off = [&](int j, int rr, int half) {
      const int r = stage_row(j, rr), o = Cfg::slab_operand(wg, j);
      if (((blocked >> o) & 1) == 0) return r * 16 + 2 * t + half;
      const int rb = r - o * Cfg::BN + block_row0;  // row in the operand's copied blocks
      return o * Cfg::BN * 16 + (rb / 128) * 2048 + (t >> 1) * 512 + (rb % 32) * 16 + ((rb % 128) / 32) * 4 + 2 * (t & 1);
    };

    uint4 raw[kS][2];
    __half2 sc[kS][2];  // {block 2t, block 2t + 1} scales x 64
    auto load = [&](int s, int i) {
      const uint8_t* st = stages_ + s * Cfg::kStageBytes;
      const uint8_t* scales = st + Cfg::kActBytes + Cfg::kWeightBytes;
      // Plain scales: the 16-byte box starts at an even stage (16-byte aligned), this stage's 8
      // bytes are its first or second half.
      const int half = ((kt0 + i) & 1) * 8;
#pragma unroll
      for (int j = 0; j < kS; ++j)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          raw[j][rr] = *reinterpret_cast<const uint4*>(st + Cfg::kActBytes + stage_row(j, rr) * 64 + 16 * t);
          sc[j][rr] = scales_x64(*reinterpret_cast<const uint16_t*>(scales + scale_off(j, rr, half)));
        }
    };
    // Unit u of a stage: half u / kS, slab u % kS.
    auto convert = [&](Frag& f, int u) {
      const int h = u / kS, j = u % kS;
      uint32_t p[4][4];  // [row r u0, r + 8 u0, r u1, r + 8 u1][step]
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const __half2 s = h == 0 ? __low2half2(sc[j][rr]) : __high2half2(sc[j][rr]);
        dequant8(h == 0 ? raw[j][rr].x : raw[j][rr].z, s, p[rr]);
        dequant8(h == 0 ? raw[j][rr].y : raw[j][rr].w, s, p[2 + rr]);
      }
#pragma unroll
      for (int st = 0; st < 4; ++st)
#pragma unroll
        for (int i = 0; i < 4; ++i) f[st][i] = p[i][st];
    };
    auto mma = [&](const Frag& f, int s, int u) {
      const uint32_t base = smem_addr(stages_ + s * Cfg::kStageBytes + (u / kS) * Cfg::BM * 128);
      wgmma_fence();
#pragma unroll
      for (int k16 = 0; k16 < 4; ++k16) wgmma_m64n128k16_rs(acc[u % kS], f[k16], sw128_desc(base + k16 * 32));
      wgmma_commit();
    };
    auto pin = [](Frag& f) {
#pragma unroll
      for (int st = 0; st < 4; ++st)
#pragma unroll
        for (int i = 0; i < 4; ++i) pin_register(f[st][i]);
    };

    // Unit u of every stage uses buffer u % 2 (a stage has an even number of units), so buffer
    // indices are compile-time constants.
    static_assert(kUnits % 2 == 0, "units alternate between the two fragment buffers across stages");
    // The unit of a stage at which the previous stage is released (any unit from 0 may: the wait
    // at unit 0 covers the previous stage). Unit 0 gives the producer the most lead: one-slab tiles
    // 0-5% faster than at unit 1; the two-slab dual tile measured
    // 1% slower there, so it keeps unit 1.
    constexpr int kReleaseUnit = kS == 1 ? 0 : 1;
    // Warpgroup wg's stages: all of them, or every kWgStride-th from wg (the ring slots it uses
    // are then its own: kStages is a multiple of the stride).
    constexpr int kW = Cfg::kWgStride;
    const int i0 = kW == 1 ? 0 : wg;
    if (i0 >= count) return;  // no stage for this warpgroup: its sums stay zero
    Frag f[2];
    int s = (ring + i0) % Cfg::kStages, prev = s;
    uint32_t phase = ((ring + i0) / Cfg::kStages) & 1;
    cutlass::arch::ClusterTransactionBarrier::wait(&full_[s], phase);
    load(s, i0);
    convert(f[0], 0);
    for (int i = i0; i < count; i += kW) {
      const int done = prev;  // the previous stage (prev moves on at this stage's last unit)
#pragma unroll
      for (int u = 0; u < kUnits; ++u) {
        mma(f[u % 2], s, u);
        const bool last = u == kUnits - 1;
        if (last) {
          prev = s;
          s += kW;
          if (s >= Cfg::kStages) {
            s -= Cfg::kStages;
            phase ^= 1;
          }
          if (i + kW < count) {
            cutlass::arch::ClusterTransactionBarrier::wait(&full_[s], phase);
            load(s, i + kW);
          }
        }
        wgmma_wait<1>();  // unit u - 1 has completed: its buffer, the next unit's, is free
        pin(f[(u + 1) % 2]);
        // The previous stage's last unit is unit u - 1 at u = 0: complete after the wait above.
        if (u == kReleaseUnit && i > i0 && lane == 0) cutlass::arch::ClusterBarrier::arrive(&empty_[done]);
        if (!last) convert(f[(u + 1) % 2], u + 1);
        else if (i + kW < count) convert(f[(u + 1) % 2], 0);
      }
    }
    wgmma_wait<0>();
    pin(f[0]);
    pin(f[1]);
    if (lane == 0) cutlass::arch::ClusterBarrier::arrive(&empty_[prev]);
  }
};

// Two consumer warpgroups holding accumulators at the same positions (the dual `128x64rs`: B1's
// and B2's; the GEMM `128x64rs`: the two halves of K) each hand the other the half that the other
// stores: warpgroup 0 stores accumulators 0..31, warpgroup 1 32..63, and theirs[i] is the other
// warpgroup's accumulator at this thread's i-th stored position. Through the drained stages' shared
// memory, after a barrier (a warpgroup's wgmma may still read the last stage when the other
// finishes). All 256 consumer threads call it, after their wgmma have completed.
__device__ __forceinline__ void exchange_halves_rs(uint8_t* smem, const float (&acc)[64], float (&theirs)[32]) {
  float* xchg = reinterpret_cast<float*>(smem);  // [32][256], thread-minor: conflict-free
  const int wg = threadIdx.x >> 7;
  acc_threads_sync<256>();
#pragma unroll
  for (int r = 0; r < 32; ++r) xchg[r * 256 + threadIdx.x] = wg == 0 ? acc[32 + r] : acc[r];
  acc_threads_sync<256>();
  const int other = threadIdx.x ^ 128;
#pragma unroll
  for (int r = 0; r < 32; ++r) theirs[r] = xchg[r * 256 + other];
}

// Stores one slab of the tile as fp16 into row-major c (M x N): accumulator row = weight row =
// column of c (this thread's first one is `col`, the second col + 8), accumulator column =
// activation row = row of c; value(r) is accumulator r, for r = 4 j + (0..3), J0 <= j < J1 (the
// whole slab by default). Skips rows >= m and columns >= n.
template <int J0 = 0, int J1 = 16, class Value>
__device__ void store_slab_rs(__half* c, int64_t m, int64_t n, int64_t row0, int64_t col, Value value) {
  static_assert(0 <= J0 && J0 < J1 && J1 <= 16, "a slab has 16 groups of 4 accumulators per thread");
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = J0; j < J1; ++j)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int64_t row = row0 + 8 * j + 2 * (lane & 3) + p;
      if (row >= m) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (col + 8 * h < n) c[row * n + col + 8 * h] = __float2half_rn(value(4 * j + 2 * h + p));
    }
}

// This thread's first column of c in slab j of its warpgroup (see store_slab_rs).
template <class Cfg>
__device__ int64_t slab_col_rs(int64_t col0, int j) {
  const int warp = threadIdx.x >> 5;
  return col0 + Cfg::slab_row(warp >> 2, j) % Cfg::BN + (warp & 3) * 16 + ((threadIdx.x & 31) >> 2);
}

}  // namespace swapffn::cuda::nvfp4

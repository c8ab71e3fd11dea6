// Register-operand mainloop for the NVFP4 GEMM (the `*_rs` tile): the weights are converted by the
// warps that multiply them, straight into wgmma's register fragment.
//
// Why: the other tiles convert B into an fp16 tile in shared memory that the wgmma then read back,
// so every 64-k tile costs ~84 KB of shared-memory traffic (converted B and A written and read,
// plus the raw ring) against 512 tensor cycles, and two barrier hand-offs between warp roles; the
// profiles put the k-tile at ~2x its MMA time (docs/NVFP4.md). Hopper's wgmma may take A from
// registers, so the operands are swapped, as in mixed-input GEMMs: the tile computes C^T = B A^T
// with the weight rows (problem N) as wgmma's M dimension, in registers, and the activations
// (problem M; dequantized once by the pre-pass, nvfp4_predequant_a.cu, A16Order::fragment) as the
// shared-memory operand. Nothing converted is written to shared memory and nobody waits for a
// converted stage.
//
// Roles: one producer thread (warpgroup 2) copies each stage by TMA: the activations' two 64-k
// boxes (128-byte swizzle), the weight rows' 64 raw bytes (128 k, unswizzled: a warp's 16-byte
// reads of 8 rows x 64 bytes are conflict-free), their scales (plain: a 16-byte box per row from
// the even stage of the pair, 16-byte aligned, of which this stage uses its 8; blocked: the
// stage's two 512-byte units). Consumer
// warpgroups 0 and 1 own 64 weight rows each. Thread (g = lane / 4, t = lane % 4) of warp w owns
// rows r = 16 w + g and r + 8 and, per 128-k stage, raw bytes 16 t .. 16 t + 15 of each (scale
// blocks 2 t and 2 t + 1): 64-k half h of the stage uses the row's words 2 h, 2 h + 1 and scale
// block 2 t + h, and dequant8's pair s of word 2 h + u is the fragment register of k16 step s,
// columns 8 u + 2 t and 8 u + 2 t + 1, where the pre-pass put the activations of the same k.
// Fragments are double-buffered per 64-k half: a half is converted while the previous half's
// wgmma run, once the half before that has completed (wgmma.wait_group 1), and its registers are
// pinned until then. A stage is released (one arrival per consumer warp) once both halves' wgmma
// have completed; its raw bytes were read into registers a half earlier.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/kernels/nvfp4/nvfp4_dequant.cuh"
#include "cuda/kernels/nvfp4/nvfp4_launch.hpp"
#include "cuda/kernels/nvfp4/nvfp4_tile_mainloop.cuh"
#include "cuda/kernels/nvfp4/nvfp4_wgmma.cuh"
#include "cuda/launch.hpp"

namespace swapffn::cuda::nvfp4 {

// BM activation rows (problem M: wgmma's N), BN weight rows (problem N: one 64-row slab per
// consumer warpgroup), BK = 128 k per stage (two 64-k halves).
template <int Stages_>
struct RsCfg {
  static constexpr int BM = 128, BN = 128, BK = 128;
  static constexpr int kNB = 1;
  static constexpr int kStages = Stages_;
  static constexpr bool kPreA = true;  // the activations come from the pre-pass (launched as a PDL dependent)
  static constexpr int kConsumerThreads = 256;
  static constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup
  static constexpr int kAccThreads = kConsumerThreads;
  static constexpr int kMinBlocks = 1;
  static constexpr int kAcc = 64;        // fp32 accumulators per consumer thread (64 x 128 per warpgroup)
  static constexpr int kSplitUnit = 1;   // split-K boundaries on whole stages
  static constexpr int kActBytes = 2 * BM * 128;  // two 64-k boxes of fp16 activations
  static constexpr int kWeightBytes = BN * 64;    // 128 k of e2m1 per weight row
  static constexpr int kScaleBytes = BN * 16;     // plain: a 16-byte box per row; blocked: 1024 bytes
  static constexpr int kStageBytes = kActBytes + kWeightBytes + kScaleBytes;
  static constexpr int kSmemAlloc = kStages * kStageBytes + 2 * kStages * 8 + 1024;  // + align slack
  static_assert(kStages >= 2, "the producer must be able to run ahead of the consumers");
  static_assert(kSmemAlloc <= 227 * 1024, "shared memory per CTA");
  static_assert(kStageBytes % 1024 == 0 && (BM * 128) % 1024 == 0,
                "stages and activation boxes stay 1024-byte aligned for the 128-byte swizzle");
  static_assert(BN == 2 * 64 && kConsumerThreads == 2 * 128, "one 64-row wgmma slab per consumer warpgroup");
  static_assert(BM == 128, "the register-operand wgmma is m64n128k16");
};

template <class Cfg>
struct RsMainloop {
  using Acc = float[Cfg::kAcc];

  uint8_t* stages_;  // [kStages][activations | weights | scales], 1024-aligned
  uint64_t* full_;   // per stage: its TMA bytes have landed (1 arrival + bytes)
  uint64_t* empty_;  // per stage: its wgmma have completed (one arrival per consumer warp)

  __device__ explicit RsMainloop(uint8_t* smem)
      : stages_(smem + ((1024 - (smem_addr(smem) & 1023)) & 1023)),
        full_(reinterpret_cast<uint64_t*>(stages_ + Cfg::kStages * Cfg::kStageBytes)),
        empty_(full_ + Cfg::kStages) {}

  // Runs stages [kt0, kt0 + count) of 128 k. src[0]: the activations (row0 = first row of the
  // tile; their fp16 copy is tma.data[0]), src[1]: the weights (tma.data[1], plain scales
  // tma.scales[1]). Returns true in consumer threads, whose `acc` (zeroed by the caller) then holds
  // the tile's sums in wgmma's accumulator layout with weight rows as rows; the producer warpgroup
  // returns false and must leave. All threads must call it (it starts with a CTA barrier).
  __device__ bool run(const TileSrc (&src)[2], const TmaOperands& tma, int batch, int kt0, int count, Acc& acc) const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < Cfg::kStages; ++s) {
        cutlass::arch::ClusterTransactionBarrier::init(&full_[s], 1);
        cutlass::arch::ClusterBarrier::init(&empty_[s], Cfg::kConsumerThreads / 32);
      }
      cutlass::arch::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x >= Cfg::kConsumerThreads) {
      if (threadIdx.x == Cfg::kConsumerThreads) produce(src, tma, batch, kt0, count);
      return false;
    }
    if (count > 0) consume(src[1].rk_blocks != 0, kt0, count, acc);
    return true;
  }

 private:
  __device__ void produce(const TileSrc (&src)[2], const TmaOperands& tma, int batch, int kt0, int count) const {
    const TileSrc& w = src[1];
    const bool blocked = w.rk_blocks != 0;
    const uint32_t bytes = Cfg::kActBytes + Cfg::kWeightBytes + (blocked ? 2 * 512 : Cfg::kScaleBytes);
    const int arow0 = static_cast<int>(src[0].row0), wrow0 = static_cast<int>(w.row0);
    auto copy_weights = [&](int t) {
      const int s = t % Cfg::kStages, kt = kt0 + t;
      uint8_t* st = stages_ + s * Cfg::kStageBytes;
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full_[s], bytes);
      cute::SM90_TMA_LOAD_3D::copy(&tma.data[1], &full_[s], 0, st + Cfg::kActBytes, kt * (Cfg::BK / 2), wrow0, batch);
      uint8_t* sdst = st + Cfg::kActBytes + Cfg::kWeightBytes;
      if (blocked)
        cute::SM90_BULK_COPY_G2S::copy(w.scales + ((w.row0 / 128) * w.rk_blocks + 2 * kt) * 512, &full_[s], sdst, 2 * 512);
      else
        cute::SM90_TMA_LOAD_3D::copy(&tma.scales[1], &full_[s], 0, sdst, (kt & ~1) * (Cfg::BK / 16), wrow0, batch);
    };
    auto copy_activations = [&](int t) {
      const int s = t % Cfg::kStages, kt = kt0 + t;
      uint8_t* st = stages_ + s * Cfg::kStageBytes;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        cute::SM90_TMA_LOAD_3D::copy(&tma.data[0], &full_[s], 0, st + h * Cfg::BM * 128, (2 * kt + h) * 128, arow0, batch);
    };
    // The first stages' weights go out before waiting for the pre-pass that writes the activations
    // (this grid is its programmatic dependent).
    const int first = count < Cfg::kStages ? count : Cfg::kStages;
    for (int t = 0; t < first; ++t) copy_weights(t);
    pdl_wait();
    for (int t = 0; t < first; ++t) copy_activations(t);
    for (int t = first; t < count; ++t) {
      cutlass::arch::ClusterBarrier::wait(&empty_[t % Cfg::kStages], ((t / Cfg::kStages) & 1) ^ 1);
      copy_weights(t);
      copy_activations(t);
    }
  }

  using Frag = uint32_t[4][4];  // [k16 step][fragment register]

  __device__ void consume(bool blocked, int kt0, int count, Acc& acc) const {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = warp * 16 + g, r1 = r0 + 8;  // weight rows of the tile (warp w of warpgroup wg: 64 wg + 16 (w % 4))
    auto scale_off = [&](int r) {
      return blocked ? (t >> 1) * 512 + (r % 32) * 16 + (r / 32) * 4 + 2 * (t & 1) : r * 16 + 2 * t;
    };
    const int so0 = scale_off(r0), so1 = scale_off(r1);
    // Plain scales: the 16-byte box starts at an even stage (16-byte aligned), this stage's 8 bytes
    // are its first or second half.
    auto stage_scale_off = [&](int i) { return blocked ? 0 : ((kt0 + i) & 1) * 8; };

    uint4 raw0, raw1;
    __half2 sc0, sc1;  // {block 2t, block 2t + 1} scales x 64 of rows r0, r1
    auto load = [&](int s, int i) {
      const uint8_t* st = stages_ + s * Cfg::kStageBytes;
      raw0 = *reinterpret_cast<const uint4*>(st + Cfg::kActBytes + r0 * 64 + 16 * t);
      raw1 = *reinterpret_cast<const uint4*>(st + Cfg::kActBytes + r1 * 64 + 16 * t);
      const uint8_t* sc = st + Cfg::kActBytes + Cfg::kWeightBytes + stage_scale_off(i);
      sc0 = scales_x64(*reinterpret_cast<const uint16_t*>(sc + so0));
      sc1 = scales_x64(*reinterpret_cast<const uint16_t*>(sc + so1));
    };
    auto convert = [&](Frag& f, int h) {
      uint32_t p[4][4];  // [row r0 u0, r1 u0, r0 u1, r1 u1][step]
      const __half2 s0 = h == 0 ? __low2half2(sc0) : __high2half2(sc0);
      const __half2 s1 = h == 0 ? __low2half2(sc1) : __high2half2(sc1);
      dequant8(h == 0 ? raw0.x : raw0.z, s0, p[0]);
      dequant8(h == 0 ? raw1.x : raw1.z, s1, p[1]);
      dequant8(h == 0 ? raw0.y : raw0.w, s0, p[2]);
      dequant8(h == 0 ? raw1.y : raw1.w, s1, p[3]);
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) f[s][i] = p[i][s];
    };
    auto mma = [&](const Frag& f, int s, int h) {
      const uint32_t base = smem_addr(stages_ + s * Cfg::kStageBytes + h * Cfg::BM * 128);
      wgmma_fence();
#pragma unroll
      for (int k16 = 0; k16 < 4; ++k16) wgmma_m64n128k16_rs(acc, f[k16], sw128_desc(base + k16 * 32));
      wgmma_commit();
    };
    auto pin = [](Frag& f) {
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) pin_register(f[s][i]);
    };

    Frag f0, f1;
    int s = 0, prev = 0;
    uint32_t phase = 0;
    cutlass::arch::ClusterTransactionBarrier::wait(&full_[0], 0);
    load(0, 0);
    convert(f0, 0);
    for (int i = 0; i < count; ++i) {
      mma(f0, s, 0);
      wgmma_wait<1>();  // the previous stage's second half has completed: f1 and that stage are free
      pin(f1);
      if (i > 0 && lane == 0) cutlass::arch::ClusterBarrier::arrive(&empty_[prev]);
      convert(f1, 1);
      mma(f1, s, 1);
      prev = s;
      if (++s == Cfg::kStages) {
        s = 0;
        phase ^= 1;
      }
      if (i + 1 < count) {
        cutlass::arch::ClusterTransactionBarrier::wait(&full_[s], phase);
        load(s, i + 1);
      }
      wgmma_wait<1>();  // this stage's first half has completed: f0 is free
      pin(f0);
      if (i + 1 < count) convert(f0, 0);
    }
    wgmma_wait<0>();
    pin(f1);
  }
};

// Stores the tile as fp16 into row-major c (M x N): accumulator row = weight row = column of c,
// accumulator column = activation row = row of c; skips rows >= m and columns >= n.
template <class Cfg>
__device__ void store_tile_rs(__half* c, int64_t m, int64_t n, int64_t row0, int64_t col0, const float (&acc)[Cfg::kAcc]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col = col0 + warp * 16 + (lane >> 2);
#pragma unroll
  for (int j = 0; j < Cfg::BM / 8; ++j)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int64_t row = row0 + 8 * j + 2 * (lane & 3) + p;
      if (row >= m) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (col + 8 * h < n) c[row * n + col + 8 * h] = __float2half_rn(acc[4 * j + 2 * h + p]);
    }
}

}  // namespace swapffn::cuda::nvfp4

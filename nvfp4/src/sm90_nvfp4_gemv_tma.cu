// NVFP4 batched GEMV on Hopper with `a` streamed through a TMA ring in shared memory.
//
// Why it exists: with the int8 decode the register-load GEMV (sm90_nvfp4_gemv.cu) waits on the
// bytes it can keep in flight, which registers bound (two 128-element chunks per lane; Nsight
// Compute: long-scoreboard stall on top, DRAM at 61% of peak). Here one producer lane keeps
// `Stages` k-steps of the CTA's 32 rows in flight with two TMA boxes per step (32 rows x step_k / 2
// bytes of e2m1 data, viewed as 8-byte elements so that a box row can be up to 1 KB, and 32 rows x
// step_k / 16 bytes of plain scales; evict-first, `a` is read once), which costs no registers, and
// the consumer warps run the int8 dot products on conflict-free shared loads. Wider steps ask DRAM
// for longer runs of each row (256 bytes per row and request reached only the register loads'
// ~2 TB/s).
//
// b is the same for every row: the consumers convert the CTA's K range of it to int8 (and its
// scales to fp32 / 4) once, into shared memory, while the ring's first steps are in flight.
// Consumer thread (col, rg) owns the 32 k-elements col of every step (one 16-byte chunk per row)
// for rows rg, rg + kRowGroups, ...: a row's 16 columns live in one half-warp, so its sum needs
// only shuffles, in a fixed order, and split-K partials are added in split order (deterministic).
// Needs K % 256 == 0 (16-byte row pitches) and 16-byte aligned `a` scales (plain: a TMA box of
// 32 rows; blocked 128x4: one bulk copy of the row block's units per stage);
// the API refuses other problems for this path, and configs whose shared memory does not fit.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/runtime/cuda_check.hpp"
#include "nvfp4_gemv_int8.cuh"
#include "nvfp4_launch.hpp"
#include "cuda/runtime/tma.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda::nvfp4 {

namespace {

template <int Warps_, int Stages_, int Width_, bool Blocked_>
struct GemvTmaCfg {
  static constexpr int kWarps = Warps_;    // consumer warps; one more warp issues the copies
  static constexpr int kStages = Stages_;  // ring stages in flight
  static constexpr int kWidth = Width_;    // 512-element sub-steps per stage
  static constexpr int kRows = kGemvRowsPerCta;
  static constexpr int kSubK = 512;                   // k elements of a sub-step: 16 columns of 32
  static constexpr int kStepK = kSubK * kWidth;       // k elements per stage
  static constexpr int kRowBytes = kStepK / 2;        // one row of the data box (8-byte elements)
  static constexpr int kScaleRowBytes = kStepK / 16;  // plain: one row of the scale box
  static constexpr bool kBlocked = Blocked_;
  // Blocked scales: a stage takes the whole 512-byte units (128 rows x 4 scale columns) of the
  // CTA's 128-row block, one bulk copy; the CTA uses its 32 rows' quarter of each unit (the other
  // quarters belong to the neighbouring CTAs, which read them from L2).
  static constexpr int kUnits = kStepK / 64;
  static constexpr int kScaleBytes = kBlocked ? kUnits * 512 : kRows * kScaleRowBytes;
  static constexpr int kDataBytes = kRows * kRowBytes;
  static constexpr int kStageBytes = kDataBytes + kScaleBytes;
  static constexpr int kConsumers = kWarps * 32;
  static constexpr int kCols = kSubK / 32;  // consumer columns: 32 k-elements (one 16-byte chunk) each
  static constexpr int kRowGroups = kConsumers / kCols;
  static constexpr int kRowsPerThread = kRows / kRowGroups;
  static constexpr int kThreads = kConsumers + 32;
  // b per sub-step in shared memory: 512 int8 (two uint4 per column, column-interleaved so that 8
  // consecutive columns' loads cover 128 contiguous bytes) and 32 fp32 block scales / 4.
  static constexpr int kBBytesPerSub = kSubK + (kSubK / 16) * 4;

  static_assert(kCols == 16, "a row's columns fill one half-warp (the row sums use xor shuffles 8..1)");
  static_assert(kRows % kRowGroups == 0 && kRowsPerThread >= 1, "consumer warps split the rows evenly");
  static_assert(kWidth == 1 || kWidth == 2 || kWidth == 4, "data boxes of 256, 512 or 1024 bytes per row");
  static_assert(kStageBytes % 128 == 0, "TMA destinations stay 128-byte aligned");
  static_assert(kStageBytes == kRows * (kStepK / 2) + (kBlocked ? kStepK * 8 : kRows * (kStepK / 16)) &&
                    kBBytesPerSub * kWidth == kStepK + (kStepK / 16) * 4,
                "the kernel's shared-memory layout matches gemv_tma_smem_bytes");
  static_assert(kStages >= 2, "the ring needs a stage in flight while one is consumed");
};

__device__ __forceinline__ uint4 lds128(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) nvfp4_gemv_tma_kernel(const GemvArgs args, const int steps_per_cta,
                                                                     const __grid_constant__ CUtensorMap a_map,
                                                                     const __grid_constant__ CUtensorMap sfa_map) {
  using Barrier = cutlass::arch::ClusterBarrier;
  using TxBarrier = cutlass::arch::ClusterTransactionBarrier;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 127) & ~uintptr_t{127});
  uint8_t* b_int8s = stages + Cfg::kStages * Cfg::kStageBytes;  // [sub-steps][2][16 cols][16 B]
  const int subs_per_cta = steps_per_cta * Cfg::kWidth;
  float* b_scales = reinterpret_cast<float*>(b_int8s + subs_per_cta * Cfg::kSubK);  // [sub-steps][16 cols][2]
  uint64_t* full = reinterpret_cast<uint64_t*>(b_scales + subs_per_cta * (Cfg::kSubK / 16));
  uint64_t* empty = full + Cfg::kStages;
  __shared__ float row_sum[Cfg::kRows];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row_block = blockIdx.x, split = blockIdx.y, batch = blockIdx.z;
  const int steps = static_cast<int>((args.k + Cfg::kStepK - 1) / Cfg::kStepK);
  const int s0 = static_cast<int>(static_cast<int64_t>(split) * steps / args.split_k);
  const int count = static_cast<int>(static_cast<int64_t>(split + 1) * steps / args.split_k) - s0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      Barrier::init(&full[s], 1);
      Barrier::init(&empty[s], Cfg::kWarps);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (warp == Cfg::kWarps) {
    // Producer: refill a stage once every consumer warp has released it.
    if (lane == 0) {
      constexpr uint64_t kEvictFirst = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST);
      const int row0 = row_block * Cfg::kRows;
      for (int i = 0; i < count; ++i) {
        const int s = i % Cfg::kStages;
        if (i >= Cfg::kStages) Barrier::wait(&empty[s], ((i / Cfg::kStages) - 1) & 1);
        uint8_t* dst = stages + s * Cfg::kStageBytes;
        if constexpr (Cfg::kBlocked) {
          // The units of this step that exist (the last step may end past the row block's units).
          const int64_t unit0 = static_cast<int64_t>(s0 + i) * Cfg::kUnits;
          const int units = static_cast<int>(std::min<int64_t>(Cfg::kUnits, args.a.rk_blocks - unit0));
          TxBarrier::arrive_and_expect_tx(&full[s], Cfg::kDataBytes + units * 512);  // data box in full
          // compute-sanitizer racecheck (2025.3) does not follow a plain bulk copy's completion
          // through the mbarrier and reports the scale reads below; tensor copies it follows.
          cute::SM90_BULK_COPY_G2S::copy(
              args.a.scales + batch * args.a.scale_batch + ((row0 / 128) * args.a.rk_blocks + unit0) * 512, &full[s],
              dst + Cfg::kDataBytes, units * 512);
        } else {
          TxBarrier::arrive_and_expect_tx(&full[s], Cfg::kStageBytes);  // boxes count in full, zero fill too
          cute::SM90_TMA_LOAD_3D::copy(&sfa_map, &full[s], kEvictFirst, dst + Cfg::kDataBytes,
                                       (s0 + i) * Cfg::kScaleRowBytes, row0, batch);
        }
        // The data map has 8-byte elements: its x coordinate counts them.
        cute::SM90_TMA_LOAD_3D::copy(&a_map, &full[s], kEvictFirst, dst, (s0 + i) * (Cfg::kRowBytes / 8), row0, batch);
      }
    }
    __syncwarp();
  } else {
    const int ct = threadIdx.x, col = ct % Cfg::kCols, rg = ct / Cfg::kCols;
    // b of the CTA's K range to int8 and fp32 / 4 in shared memory; loads of up to 4 columns are
    // issued before any is converted, so the prologue costs one round trip per 4 columns.
    {
      const uint8_t* b = args.b.data + batch * args.b.data_batch;
      const uint8_t* sfb = args.b.scales + batch * args.b.scale_batch;
      const int units = subs_per_cta * Cfg::kCols;
      const int64_t k0 = static_cast<int64_t>(s0) * Cfg::kStepK;
      constexpr int kBatch = 4;
      for (int u0 = ct; u0 < units; u0 += kBatch * Cfg::kConsumers) {
        uint4 raw[kBatch];
        uint32_t sc[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int u = u0 + j * Cfg::kConsumers;
          const int64_t kk = k0 + static_cast<int64_t>(u) * 32;  // unit u: sub-step u / 16, column u % 16
          const bool ok = u < units && kk < args.k;
          raw[j] = ok ? __ldg(reinterpret_cast<const uint4*>(b + kk / 2)) : make_uint4(0, 0, 0, 0);
          sc[j] = ok ? __ldg(reinterpret_cast<const unsigned short*>(sfb + gemv::scale_pair_offset(args.b, 0, args.k,
                                                                                                    kk / 16)))
                     : 0u;
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int u = u0 + j * Cfg::kConsumers;
          if (u >= units) break;
          const int q = u / Cfg::kCols, c = u % Cfg::kCols;
          uint32_t p[8];
          gemv::b_int8(raw[j], p);
          *reinterpret_cast<uint4*>(b_int8s + ((2 * q) * Cfg::kCols + c) * 16) = make_uint4(p[0], p[1], p[2], p[3]);
          *reinterpret_cast<uint4*>(b_int8s + ((2 * q + 1) * Cfg::kCols + c) * 16) = make_uint4(p[4], p[5], p[6], p[7]);
          const float2 sb = gemv::scales_f32(sc[j]);
          *reinterpret_cast<float2*>(b_scales + (q * Cfg::kCols + c) * 2) = make_float2(sb.x * 0.25f, sb.y * 0.25f);
        }
      }
      asm volatile("bar.sync 1, %0;\n" ::"r"(Cfg::kConsumers) : "memory");  // consumers only
    }

    float dot[Cfg::kRowsPerThread] = {};
    // Blocked scales: this CTA's quarter of each 512-byte unit (rows 32 q .. 32 q + 31 of the block).
    const int quarter = row_block % 4;
    for (int i = 0; i < count; ++i) {
      const int s = i % Cfg::kStages;
      TxBarrier::wait(&full[s], (i / Cfg::kStages) & 1);
      const uint8_t* st = stages + s * Cfg::kStageBytes;
#pragma unroll
      for (int j = 0; j < Cfg::kWidth; ++j) {
        const int q = i * Cfg::kWidth + j;  // sub-step
        const uint4 p0 = lds128(b_int8s + ((2 * q) * Cfg::kCols + col) * 16);
        const uint4 p1 = lds128(b_int8s + ((2 * q + 1) * Cfg::kCols + col) * 16);
        const float2 sbq = *reinterpret_cast<const float2*>(b_scales + (q * Cfg::kCols + col) * 2);
        const uint32_t p[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
        const int chunk = j * Cfg::kCols + col;  // 16-byte chunk of the stage's row
        // Past K (the last step's tail) the data is zero-filled, but blocked scales there are stale
        // stage bytes (possibly NaN), so such chunks are skipped.
        if (static_cast<int64_t>(s0 + i) * Cfg::kStepK + chunk * 32 >= args.k) continue;
#pragma unroll
        for (int r = 0; r < Cfg::kRowsPerThread; ++r) {
          const int row = rg + r * Cfg::kRowGroups;
          const uint4 w = lds128(st + row * Cfg::kRowBytes + chunk * 16);
          // Scale columns 2 chunk, 2 chunk + 1: plain [row][column]; blocked unit chunk / 2, row
          // r % 32 at 16 r, the quarter's 4 columns at 4 quarter, these two at 2 (chunk % 2).
          const int soff = Cfg::kBlocked ? (chunk / 2) * 512 + row * 16 + quarter * 4 + (chunk % 2) * 2
                                         : row * Cfg::kScaleRowBytes + chunk * 2;
          const float2 sa =
              gemv::scales_f32(*reinterpret_cast<const unsigned short*>(st + Cfg::kDataBytes + soff));
          dot[r] = __fmaf_rn(static_cast<float>(gemv::block_dot16(w.x, w.y, p)), sa.x * sbq.x, dot[r]);
          dot[r] = __fmaf_rn(static_cast<float>(gemv::block_dot16(w.z, w.w, p + 4)), sa.y * sbq.y, dot[r]);
        }
      }
      __syncwarp();
      if (lane == 0) Barrier::arrive(&empty[s]);
    }
#pragma unroll
    for (int r = 0; r < Cfg::kRowsPerThread; ++r) {
      float v = dot[r];
#pragma unroll
      for (int x = Cfg::kCols / 2; x >= 1; x /= 2) v += __shfl_xor_sync(0xffffffffu, v, x);
      if (col == 0) row_sum[rg + r * Cfg::kRowGroups] = v;
    }
  }
  __syncthreads();
  const float v = threadIdx.x < Cfg::kRows ? row_sum[threadIdx.x] : 0.0f;
  gemv::finish_rows(args, row_block, split, batch, v);
}

template <int Warps, int Stages, int Width, bool Blocked>
void launch(const GemvArgs& args, cudaStream_t stream) {
  using Cfg = GemvTmaCfg<Warps, Stages, Width, Blocked>;
  const int64_t steps = (args.k + Cfg::kStepK - 1) / Cfg::kStepK;
  const int steps_per_cta = static_cast<int>((steps + args.split_k - 1) / args.split_k);
  const size_t smem = gemv_tma_smem_bytes(args.k, args.split_k, Stages, Cfg::kStepK, Blocked);
  const CUtensorMap a_map = make_tma_3d_u8(args.a.data, args.k / 2, args.m, args.l, args.k / 2, args.a.data_batch,
                                           Cfg::kRowBytes, Cfg::kRows, false, 8);
  // Blocked scales go by bulk copy; the map is then unused (the data map stands in for it).
  const CUtensorMap sfa_map = Blocked ? a_map
                                      : make_tma_3d_u8(args.a.scales, args.k / 16, args.m, args.l, args.k / 16,
                                                       args.a.scale_batch, Cfg::kScaleRowBytes, Cfg::kRows, false);
  auto kernel = nvfp4_gemv_tma_kernel<Cfg>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((args.m + Cfg::kRows - 1) / Cfg::kRows), static_cast<unsigned>(args.split_k),
                  static_cast<unsigned>(args.l));
  kernel<<<grid, Cfg::kThreads, smem, stream>>>(args, steps_per_cta, a_map, sfa_map);
  SWAPFFN_CHECK_LAUNCH();
}

// The instantiated rings, the ones choose_gemv_config picks (8 consumer warps): 2 stages of 1024 k
// (few CTAs per SM), 2 or 4 stages of 2048 (several waves of CTAs; 4 stages, 147 KB, one CTA per
// SM, only where a CTA has that many steps). Blocked scales add 6 KB per 1024 k of stage.
template <bool Blocked>
bool launch_ring(const GemvArgs& args, int stages, int step_k, cudaStream_t stream) {
  if (stages == 2 && step_k == 1024) return launch<8, 2, 2, Blocked>(args, stream), true;
  if (stages == 2 && step_k == 2048) return launch<8, 2, 4, Blocked>(args, stream), true;
  if (stages == 4 && step_k == 2048) return launch<8, 4, 4, Blocked>(args, stream), true;
  return false;
}

}  // namespace

bool gemv_tma_built(int warps, int stages, int step_k) {
  return warps == 8 && ((stages == 2 && step_k == 1024) || (step_k == 2048 && (stages == 2 || stages == 4)));
}

void launch_gemv_tma(const GemvArgs& args, int warps, int stages, int step_k, cudaStream_t stream) {
  const bool blocked = args.a.rk_blocks != 0;
  const bool launched = warps == 8 && (blocked ? launch_ring<true>(args, stages, step_k, stream)
                                               : launch_ring<false>(args, stages, step_k, stream));
  if (!launched)
    SWAPFFN_FAIL("NVFP4 GEMV load=tma is not built for warps=" + std::to_string(warps) + " stages=" +
                 std::to_string(stages) + " step_k=" + std::to_string(step_k));
}

}  // namespace swapffn::cuda::nvfp4

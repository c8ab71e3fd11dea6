// The event router (event_router.hpp) with router_w split over K across a cluster of 8 CTAs.
//
// Why it exists: the per-CTA event router (event_router.cu) has every CTA copy all of router_w
// (128 KB at the defaults) into shared memory. At small M (B = 1: 64 CTAs of 8 rows, one per SM)
// each SM's ingest of those 128 KB is the longest link of the kernel's chain (its warps wait on the
// copy for ~19% of their samples) and half the SMs stay idle. Here CTA s of a cluster holds only
// K-slice s of router_w and computes that slice's partial z for all of the cluster's rows, with the
// m16n8k16 MMAs over the same 16-k steps in the same order that warp s of the per-CTA kernel runs.
// The CTA that owns a row adds the row's 8 slice partials in slice order, reading them through
// distributed shared memory, and then decides, exchanges and normalises the row with the per-CTA
// kernel's code (event_router_row.cuh). Every row gets the per-CTA kernel's bits.
#include <cooperative_groups.h>

#include <cstdint>
#include <string>

#include <cute/arch/cluster_sm90.hpp>
#include <cute/arch/copy_sm75.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm80.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/cuda_check.hpp"
#include "cuda/kernels/event_router.hpp"
#include "cuda/kernels/event_router_row.cuh"
#include "cuda/launch.hpp"

namespace swapffn::cuda {
namespace {

using router::kMaxRouter;
using router::kMaxVec;
using router::kMmaRows;
using router::kPad;
using router::kSlices;

template <int kRows>
struct KsplitShape {
  static_assert(kRows == 16 || kRows == 32 || kRows == 64, "a cluster takes 16, 32 or 64 rows");
  static constexpr int kMTiles = kRows / kMmaRows;
  static constexpr int kOwnRows = kRows / kSlices;  // rows each CTA decides: one per warp
  static constexpr int kWarps = kOwnRows > 4 ? kOwnRows : 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMaxPairs = kMaxRouter / 16;  // pairs of n8 blocks of z
  static constexpr int kTasksPerWarp = (kMTiles * kMaxPairs + kWarps - 1) / kWarps;  // (m tile, pair) per warp
  static constexpr int kMaxSliceVec = kRows * (32 * kMaxVec / kSlices) / kThreads;  // slice float4 per thread
  static_assert(kRows * (32 * kMaxVec / kSlices) % kThreads == 0, "the slice loads divide evenly over the threads");
};

struct KsplitSmem {
  size_t w, n, part, z, rs, param;
  __host__ __device__ size_t total() const { return w + n + part + z + rs + param + 16; }
};
// w: router_w's slice [R][D/8 + pad] bf16; n: the slice of the MMA operand [rows][D/8 + pad] bf16;
// part: the slice's partial z [rows][R] fp32 (read by the cluster); z: the owned rows' z [rows/8][R];
// rs: every row's RMS scale [rows]; param: router_gain's slice [D/8], norm_gain [D], swap_w [R],
// bank_w [R, 4], swap_b, bank_b [4] (fp32); then the mbarrier.
__host__ __device__ inline KsplitSmem ksplit_layout(int64_t d, int64_t r, int rows) {
  const auto r16 = [](int64_t bytes) { return size_t((bytes + 15) / 16 * 16); };
  const int64_t w = d / kSlices;
  return {r16(r * (w + kPad) * 2), r16(rows * (w + kPad) * 2), r16(rows * r * 4),
          r16(rows / kSlices * r * 4), r16(rows * 4), r16((w + d + 5 * r + 5) * 4)};
}

template <int kRows>
__global__ void __launch_bounds__(KsplitShape<kRows>::kThreads) event_router_ksplit_kernel(EventRouterArgs a) {
  using Shape = KsplitShape<kRows>;
  constexpr int kThreads = Shape::kThreads, kWarps = Shape::kWarps;
  extern __shared__ __align__(128) uint8_t smem[];
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int D = static_cast<int>(a.d_model), R = static_cast<int>(a.d_router), rows = static_cast<int>(a.rows);
  const int W = D / kSlices, W4 = W / 4, ld = W + kPad;
  const KsplitSmem L = ksplit_layout(D, R, kRows);
  __nv_bfloat16* w_smem = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* n_smem = reinterpret_cast<__nv_bfloat16*>(smem + L.w);
  float* part = reinterpret_cast<float*>(smem + L.w + L.n);
  float* z_smem = reinterpret_cast<float*>(smem + L.w + L.n + L.part);
  float* rs_smem = reinterpret_cast<float*>(smem + L.w + L.n + L.part + L.z);
  float* rgain = reinterpret_cast<float*>(smem + L.w + L.n + L.part + L.z + L.rs);  // slice s of router_gain
  float* ngain = rgain + W;
  float* swap_w = ngain + D;
  float* bank_w = swap_w + R;
  float* biases = bank_w + 4 * R;  // swap_b, bank_b[4]
  uint64_t* w_ready = reinterpret_cast<uint64_t*>(smem + L.total() - 16);
  const int s = static_cast<int>(cluster.block_rank());  // this CTA's K-slice
  const int row0 = static_cast<int>(blockIdx.x / kSlices) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // 0. The weights (router_w's slice s, the small vectors) by bulk copies before the PDL wait, as in
  //    the per-CTA kernel. The relaxed cluster arrival here is waited on before the first write into
  //    another CTA's shared memory: every CTA of the cluster has started by then.
  if (threadIdx.x == 0) {
    cutlass::arch::ClusterTransactionBarrier::init(w_ready, 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  cute::cluster_arrive_relaxed();
  if (warp == 0) {
    const uint32_t vec_bytes = uint32_t(W + (a.norm_gain ? D : 0) + 5 * R) * 4;
    if (lane == 0) cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(w_ready, uint32_t(R) * W * 2 + vec_bytes);
    __syncwarp();
    for (int r = lane; r < R; r += 32)
      cute::SM90_BULK_COPY_G2S::copy(a.router_w + size_t(r) * D + size_t(s) * W, w_ready, w_smem + r * ld, W * 2);
    if (lane == 0) cute::SM90_BULK_COPY_G2S::copy(a.router_gain + size_t(s) * W, w_ready, rgain, W * 4);
    if (lane == 1 && a.norm_gain) cute::SM90_BULK_COPY_G2S::copy(a.norm_gain, w_ready, ngain, D * 4);
    if (lane == 2) cute::SM90_BULK_COPY_G2S::copy(a.swap_w, w_ready, swap_w, R * 4);
    if (lane == 3) cute::SM90_BULK_COPY_G2S::copy(a.bank_w, w_ready, bank_w, 4 * R * 4);
  }
  if (threadIdx.x < 5) biases[threadIdx.x] = threadIdx.x == 0 ? a.swap_b[0] : a.bank_b[threadIdx.x - 1];
  pdl_wait();  // h, ram and the maps were written by the previous kernels of the step
  pdl_launch_dependents();

  // 1. The row this warp owns, whole, in registers (its RMS scale now, its exchange at the end), and
  //    this CTA's slice of every row of the cluster.
  const int own = s * Shape::kOwnRows + warp;  // cluster-local index of the owned row
  const int64_t m = row0 + own;
  const bool has_row = warp < Shape::kOwnRows && m < rows;  // uniform over the warp
  float4 hv[kMaxVec];
  uint8_t map = 0;
  if (has_row) {
    map = a.stream_map[m];
    router::load_row(a.h, m, D, lane, hv);
  }
  float4 sv[Shape::kMaxSliceVec];
#pragma unroll
  for (int j = 0; j < Shape::kMaxSliceVec; ++j) {
    const int idx = threadIdx.x + kThreads * j, r = idx / W4;
    if (idx < kRows * W4 && row0 + r < rows)
      sv[j] = reinterpret_cast<const float4*>(a.h + size_t(row0 + r) * D + size_t(s) * W)[idx % W4];
  }

  // 2. Each owned row's RMS scale, computed as the per-CTA kernel does, into every CTA of the cluster.
  const float rs = has_row ? router::row_rs(hv, D, a.eps) : 0.f;
  cute::cluster_wait();
  if (has_row && lane < kSlices) *cluster.map_shared_rank(rs_smem + own, lane) = rs;
  cute::cluster_sync();

  // 3. The slice of the router operand bf16(h * rs * router_norm); rows past the operand are zeros.
  cutlass::arch::ClusterTransactionBarrier::wait(w_ready, 0);
  const float4* rg4 = reinterpret_cast<const float4*>(rgain);
#pragma unroll
  for (int j = 0; j < Shape::kMaxSliceVec; ++j) {
    const int idx = threadIdx.x + kThreads * j, r = idx / W4, f = idx % W4;
    if (idx < kRows * W4)
      reinterpret_cast<uint2*>(n_smem + r * ld)[f] =
          row0 + r < rows ? router::router_operand(sv[j], rs_smem[r], rg4[f]) : make_uint2(0u, 0u);
  }
  __syncthreads();

  // 4. Slice s's partial z = n_s @ router_w_s^T: per warp (m16 tile, pair of n8 blocks) tasks, each
  //    accumulated over the slice's 16-k steps in ascending order, as warp s of the per-CTA kernel.
  const int g = lane / 4, t = lane % 4, tasks = Shape::kMTiles * (R / 16);
  float acc[Shape::kTasksPerWarp][2][4] = {};
  for (int k0 = 0; k0 < W; k0 += 16) {
#pragma unroll
    for (int q = 0; q < Shape::kTasksPerWarp; ++q) {
      const int task = warp + kWarps * q;
      if (task >= tasks) continue;
      const int mt = task % Shape::kMTiles, pair = task / Shape::kMTiles;
      uint32_t a0, a1, a2, a3, b[4];
      const __nv_bfloat16* arow = n_smem + (mt * kMmaRows + lane % 16) * ld + (lane / 16) * 8 + k0;
      const __nv_bfloat16* brow = w_smem + (pair * 16 + lane % 8 + (lane / 16) * 8) * ld + ((lane / 8) % 2) * 8 + k0;
      cute::SM75_U32x4_LDSM_N::copy(*reinterpret_cast<const cute::uint128_t*>(arow), a0, a1, a2, a3);
      cute::SM75_U32x4_LDSM_N::copy(*reinterpret_cast<const cute::uint128_t*>(brow), b[0], b[1], b[2], b[3]);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        cute::SM80_16x8x16_F32BF16BF16F32_TN::fma(acc[q][h][0], acc[q][h][1], acc[q][h][2], acc[q][h][3], a0, a1, a2,
                                                  a3, b[2 * h], b[2 * h + 1], acc[q][h][0], acc[q][h][1],
                                                  acc[q][h][2], acc[q][h][3]);
    }
  }
#pragma unroll
  for (int q = 0; q < Shape::kTasksPerWarp; ++q) {
    const int task = warp + kWarps * q;
    if (task >= tasks) continue;
    const int mt = task % Shape::kMTiles, pair = task / Shape::kMTiles;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* p = part + (mt * kMmaRows + g) * R + (2 * pair + h) * 8 + 2 * t;
      *reinterpret_cast<float2*>(p) = make_float2(acc[q][h][0], acc[q][h][1]);
      *reinterpret_cast<float2*>(p + 8 * R) = make_float2(acc[q][h][2], acc[q][h][3]);
    }
  }
  cute::cluster_sync();

  // 5. z of the owned rows: the 8 slice partials in slice order, from the cluster's shared memory.
  //    The arrival after the reads is waited on at the very end: no CTA leaves while another may
  //    still read its shared memory.
  for (int i = threadIdx.x; i < Shape::kOwnRows * R; i += kThreads) {
    const int lr = i / R, c = i % R, idx = (s * Shape::kOwnRows + lr) * R + c;
    z_smem[i] = router::slice_sum([&](int si) { return cluster.map_shared_rank(part, si)[idx]; });
  }
  cute::cluster_arrive();
  __syncthreads();

  // 6. The owned row: decision, exchange with the chosen bank, FFN operand.
  if (has_row) router::finish_row(a, m, z_smem + warp * R, swap_w, biases, bank_w, ngain, map, hv, lane);
  cute::cluster_wait();
}

}  // namespace

size_t event_router_ksplit_smem(int64_t d_model, int64_t d_router, int rows_per_cluster) {
  return ksplit_layout(d_model, d_router, rows_per_cluster).total();
}

void launch_event_router_ksplit(const EventRouterArgs& a, int rows_per_cluster, cudaStream_t stream, bool pdl) {
  const auto go = [&](auto kernel, int threads) {
    const unsigned clusters = static_cast<unsigned>((a.rows + rows_per_cluster - 1) / rows_per_cluster);
    launch_kernel_ex(kernel, dim3(clusters * kSlices), dim3(threads), dim3(kSlices, 1, 1),
                     int(event_router_ksplit_smem(a.d_model, a.d_router, rows_per_cluster)), stream, pdl, a);
  };
  switch (rows_per_cluster) {
    case 16: return go(event_router_ksplit_kernel<16>, KsplitShape<16>::kThreads);
    case 32: return go(event_router_ksplit_kernel<32>, KsplitShape<32>::kThreads);
    case 64: return go(event_router_ksplit_kernel<64>, KsplitShape<64>::kThreads);
    default: SWAPFFN_FAIL("event router: a cluster takes 16, 32 or 64 rows, not " + std::to_string(rows_per_cluster));
  }
}

}  // namespace swapffn::cuda

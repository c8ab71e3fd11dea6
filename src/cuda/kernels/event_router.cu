#include "cuda/kernels/event_router.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include <cute/arch/copy_sm75.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm80.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/event_router_row.cuh"
#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda {
namespace {

// Rows per CTA (kRows): 8 while the grid is small (64 CTAs at M = 512; the MMA's other 8 rows are
// zeros), 16 and then 32 (16 warps, two m16 MMA tiles) as rows grow: each CTA copies all of
// router_w (128 KB) into shared memory and only one CTA fits per SM, so larger M wants fewer,
// wider CTAs. The choice does not change any row's arithmetic: every row's z is the sum over the
// same 8 K-slices of D, in the same order, each slice accumulated by one warp's MMAs.
using router::kMaxRouter;
using router::kMaxVec;
using router::kMmaRows;
using router::kPad;
using router::kSlices;
constexpr int kNBlocks = 8;  // n8 blocks of z per pass (64 columns)

template <int kRows>
struct RouterShape {
  static_assert(kRows == 8 || kRows == 16 || kRows == 32, "a CTA owns 8, 16 or 32 rows");
  static constexpr int kMTiles = kRows > 16 ? kRows / kMmaRows : 1;
  static constexpr int kWarps = kSlices * kMTiles;
  static constexpr int kRowsPerWarp = kRows / kWarps;
  static constexpr int kOperandRows = kMmaRows * kMTiles;  // MMA rows, zero padded
};

struct Smem {
  size_t w_bytes, n_bytes, z_bytes, param_bytes;
  __host__ __device__ size_t total() const { return w_bytes + n_bytes + z_bytes + param_bytes + 16; }
};
// w: router_w [R][D + pad] bf16; n: the MMA operand [rows][D + pad] bf16, reused for the per-warp
// partial sums [warp][16][64] fp32 once the MMAs are done; z [rows][R]; param: router_gain [D],
// norm_gain [D], swap_w [R], bank_w [R, 4], swap_b, bank_b [4] (fp32).
__host__ __device__ Smem smem_layout(int64_t d, int64_t r, int operand_rows, int warps) {
  const size_t operand = size_t(operand_rows) * size_t(d + kPad) * 2;
  const size_t partial = size_t(warps) * kMmaRows * kNBlocks * 8 * 4;
  return {size_t(r) * size_t(d + kPad) * 2, ((operand > partial ? operand : partial) + 15) / 16 * 16,
          size_t(operand_rows) * size_t(r) * 4,
          (size_t(2 * d + 5 * r + 5) * 4 + 15) / 16 * 16};  // keeps the mbarrier after it 8-byte aligned
}
template <int kRows>
__host__ __device__ Smem smem_layout(int64_t d, int64_t r) {
  using S = RouterShape<kRows>;
  return smem_layout(d, r, S::kOperandRows, S::kWarps);
}

// Each warp keeps its rows of h in registers from the first read to the last write (one pass over
// h instead of three), and the weights sit in shared memory, bulk-copied before the PDL wait.
// Element i of a lane's row is float4 index lane + 32 i, the order in which the row's sum of squares
// has always been accumulated (same bits as the three-pass version).
template <int kRows>
__global__ void __launch_bounds__(RouterShape<kRows>::kWarps * 32) event_router_kernel(EventRouterArgs a) {
  using Shape = RouterShape<kRows>;
  constexpr int kWarps = Shape::kWarps, kRowsPerWarp = Shape::kRowsPerWarp;
  extern __shared__ __align__(128) uint8_t smem[];
  const int D = static_cast<int>(a.d_model), R = static_cast<int>(a.d_router);
  const int row_end = static_cast<int>(a.row_begin + a.rows);  // one past this launch's last row
  const Smem L = smem_layout<kRows>(D, R);
  __nv_bfloat16* w_smem = reinterpret_cast<__nv_bfloat16*>(smem);  // [R][D + pad]
  __nv_bfloat16* n_smem = reinterpret_cast<__nv_bfloat16*>(smem + L.w_bytes);  // [operand rows][D + pad]
  float* partial = reinterpret_cast<float*>(smem + L.w_bytes);  // [warp][16][64], after the MMAs
  float* z_smem = reinterpret_cast<float*>(smem + L.w_bytes + L.n_bytes);  // [operand rows][R]
  float* rgain = z_smem + Shape::kOperandRows * R;
  float* ngain = rgain + D;
  float* swap_w = ngain + D;
  float* bank_w = swap_w + R;
  float* biases = bank_w + 4 * R;  // swap_b, bank_b[4]
  uint64_t* w_ready = reinterpret_cast<uint64_t*>(smem + L.w_bytes + L.n_bytes + L.z_bytes + L.param_bytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = static_cast<int>(a.row_begin) + blockIdx.x * kRows;
  const int ld = D + kPad, D4 = D / 4, nvec = D / 128;

  // 0. The weights do not depend on the previous kernel: bulk-copy router_w and the small weight
  //    vectors into shared memory before waiting for it, so the copies overlap its tail and the h
  //    loads below (one transaction barrier for all; no chain of dependent loads in the prologue).
  if (threadIdx.x == 0) {
    cutlass::arch::ClusterTransactionBarrier::init(w_ready, 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (warp == 0) {
    const uint32_t vec_bytes = uint32_t(D + (a.norm_gain ? D : 0) + 5 * R) * 4;
    if (lane == 0) cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(w_ready, uint32_t(R) * D * 2 + vec_bytes);
    __syncwarp();
    for (int r = lane; r < R; r += 32)
      cute::SM90_BULK_COPY_G2S::copy(a.router_w + size_t(r) * D, w_ready, w_smem + r * ld, D * 2);
    if (lane == 0) cute::SM90_BULK_COPY_G2S::copy(a.router_gain, w_ready, rgain, D * 4);
    if (lane == 1 && a.norm_gain) cute::SM90_BULK_COPY_G2S::copy(a.norm_gain, w_ready, ngain, D * 4);
    if (lane == 2) cute::SM90_BULK_COPY_G2S::copy(a.swap_w, w_ready, swap_w, R * 4);
    if (lane == 3) cute::SM90_BULK_COPY_G2S::copy(a.bank_w, w_ready, bank_w, 4 * R * 4);
  }
  // The biases (not a multiple of 16 bytes) by plain loads; the __syncthreads after step 1
  // publishes them.
  if (threadIdx.x < 5) biases[threadIdx.x] = threadIdx.x == 0 ? a.swap_b[0] : a.bank_b[threadIdx.x - 1];
  pdl_wait();  // h, ram and the maps were written by the previous kernels of the step
  pdl_launch_dependents();

  // 1. This warp's rows of h into registers (their loads overlap the weight copies), then the
  //    router operand bf16(rms(h) * router_norm) into shared memory; the MMA's padding rows are zeros.
  float4 hv[kRowsPerWarp][kMaxVec];
  float rs[kRowsPerWarp];
  uint8_t map[kRowsPerWarp];
#pragma unroll
  for (int q = 0; q < kRowsPerWarp; ++q) {
    const int r = row0 + warp + kWarps * q;
    if (r >= row_end) continue;
    map[q] = a.stream_map[r];
    router::load_row(a.h, r, D, lane, hv[q]);
  }
#pragma unroll
  for (int q = 0; q < kRowsPerWarp; ++q)
    rs[q] = row0 + warp + kWarps * q < row_end ? router::row_rs(hv[q], D, a.eps) : 0.f;  // uniform over the warp
  cutlass::arch::ClusterTransactionBarrier::wait(w_ready, 0);
  const float4* rg4 = reinterpret_cast<const float4*>(rgain);
#pragma unroll
  for (int q = 0; q < kRowsPerWarp; ++q) {
    const int lr = warp + kWarps * q;
    uint2* dst = reinterpret_cast<uint2*>(n_smem + lr * ld);
    if (row0 + lr >= row_end) {
      for (int k4 = lane; k4 < D4; k4 += 32) dst[k4] = make_uint2(0u, 0u);
      continue;
    }
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i)
      if (i < nvec) dst[lane + 32 * i] = router::router_operand(hv[q][i], rs[q], rg4[lane + 32 * i]);
  }
  for (int lr = kRows + warp; lr < Shape::kOperandRows; lr += kWarps) {
    uint2* dst = reinterpret_cast<uint2*>(n_smem + lr * ld);
    for (int k4 = lane; k4 < D4; k4 += 32) dst[k4] = make_uint2(0u, 0u);
  }
  __syncthreads();

  // 2. z = n @ router_w^T from shared memory: each warp one K-slice of D of one m16 tile for all
  //    columns, then a fixed-order sum over the slices (deterministic, the same for every batch size).
  const int g = lane / 4, t = lane % 4;
  const int mtile = warp / kSlices, k_per_warp = D / kSlices;
  const int kbeg = (warp % kSlices) * k_per_warp;
  const __nv_bfloat16* arow = n_smem + (mtile * kMmaRows + lane % 16) * ld + (lane / 16) * 8;
  // ldmatrix.x4 over two n8 blocks of W: lanes 0-15 address block j's 8 rows at k and k + 8,
  // lanes 16-31 block j + 1's.
  const __nv_bfloat16* brow = w_smem + ((lane % 8) + (lane / 16) * 8) * ld + ((lane / 8) % 2) * 8;
  const int nblocks = R / 8;
  float acc[kNBlocks][4];
#pragma unroll
  for (int j = 0; j < kNBlocks; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  for (int k0 = kbeg; k0 < kbeg + k_per_warp; k0 += 16) {
    uint32_t a0, a1, a2, a3;
    cute::SM75_U32x4_LDSM_N::copy(*reinterpret_cast<const cute::uint128_t*>(arow + k0), a0, a1, a2, a3);
#pragma unroll
    for (int j = 0; j < kNBlocks; j += 2) {
      if (j < nblocks) {
        uint32_t b[4];
        cute::SM75_U32x4_LDSM_N::copy(*reinterpret_cast<const cute::uint128_t*>(brow + j * 8 * ld + k0), b[0], b[1],
                                      b[2], b[3]);
        cute::SM80_16x8x16_F32BF16BF16F32_TN::fma(acc[j][0], acc[j][1], acc[j][2], acc[j][3], a0, a1, a2, a3, b[0],
                                                  b[1], acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
        cute::SM80_16x8x16_F32BF16BF16F32_TN::fma(acc[j + 1][0], acc[j + 1][1], acc[j + 1][2], acc[j + 1][3], a0, a1,
                                                  a2, a3, b[2], b[3], acc[j + 1][0], acc[j + 1][1], acc[j + 1][2],
                                                  acc[j + 1][3]);
      }
    }
  }
  __syncthreads();  // every warp is done reading the operand: its space takes the partial sums
  float* mine = partial + warp * kMmaRows * kNBlocks * 8;
#pragma unroll
  for (int j = 0; j < kNBlocks; ++j) {
    const int col = j * 8 + 2 * t;
    *reinterpret_cast<float2*>(&mine[g * kNBlocks * 8 + col]) = make_float2(acc[j][0], acc[j][1]);
    if (kRows > 8) *reinterpret_cast<float2*>(&mine[(g + 8) * kNBlocks * 8 + col]) = make_float2(acc[j][2], acc[j][3]);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kRows * R; i += kWarps * 32) {
    const int lr = i / R, c = i % R;
    const float* p = partial + ((lr / kMmaRows) * kSlices * kMmaRows + lr % kMmaRows) * kNBlocks * 8 + c;
    z_smem[lr * R + c] = router::slice_sum([&](int wi) { return p[wi * kMmaRows * kNBlocks * 8]; });
  }
  __syncthreads();

  // 3. Per row (the warp that holds it): decisions, the exchange with the chosen bank, the FFN operand.
#pragma unroll
  for (int q = 0; q < kRowsPerWarp; ++q) {
    const int lr = warp + kWarps * q;
    if (row0 + lr < row_end)
      router::finish_row(a, row0 + lr, z_smem + lr * R, swap_w, biases, bank_w, ngain, map[q], hv[q], lane);
  }
}

}  // namespace

void check_event_router_shape(int64_t d_model, int64_t d_router) {
  SWAPFFN_REQUIRE(d_model % 128 == 0 && d_model <= 128 * kMaxVec,
                  "event router needs d_model % 128 == 0 and <= " + std::to_string(128 * kMaxVec) +
                      " (rows held in registers), got " + std::to_string(d_model));
  SWAPFFN_REQUIRE(d_router % 16 == 0 && d_router <= kMaxRouter,
                  "event router needs d_router % 16 == 0 and <= 64, got " + std::to_string(d_router));
  int dev = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  SWAPFFN_REQUIRE(smem_layout<32>(d_model, d_router).total() <= size_t(optin) &&
                      smem_layout<8>(d_model, d_router).total() <= size_t(optin),
                  "event router: d_model " + std::to_string(d_model) + " needs more shared memory than this GPU has");
}

RouterGrid parse_router_grid(const std::string& name) {
  for (RouterGrid g : {RouterGrid::automatic, RouterGrid::cta8, RouterGrid::cta16, RouterGrid::cta32})
    if (to_string(g) == name) return g;
  SWAPFFN_FAIL("event router grid must be auto, 8, 16 or 32, got '" + name + "'");
}

std::string to_string(RouterGrid g) {
  switch (g) {
    case RouterGrid::automatic: return "auto";
    case RouterGrid::cta8: return "8";
    case RouterGrid::cta16: return "16";
    case RouterGrid::cta32: return "32";
  }
  return "?";
}

void check_event_router_rows(const EventRouterArgs& a, const std::string& who) {
  SWAPFFN_REQUIRE(a.row_begin >= 0 && a.rows >= 0 && a.row_begin + a.rows <= a.total_rows,
                  who + ": rows [" + std::to_string(a.row_begin) + ", " + std::to_string(a.row_begin + a.rows) +
                      ") are not within the " + std::to_string(a.total_rows) + " rows of the arrays");
  SWAPFFN_REQUIRE((a.norm_out == nullptr) == (a.norm_gain == nullptr),
                  who + ": the RMSNorm output and its gain must be given together");
}

void launch_event_router(const EventRouterArgs& a, cudaStream_t stream, bool pdl, RouterGrid grid) {
  check_event_router_rows(a, "event router");
  SWAPFFN_REQUIRE(a.film_scale == nullptr && a.film_shift == nullptr,
                  "event router: the core broadcast (film_scale, film_shift) is done by the folded router only");
  if (a.rows == 0) return;
  // The kernel bulk-copies these into shared memory (cp.async.bulk): 16-byte aligned sources, and
  // sizes that are multiples of 16 bytes by check_event_router_shape's D % 128 == 0, R % 16 == 0.
  for (const auto& [p, name] : {std::pair<const void*, const char*>{a.router_w, "router_w"},
                                {a.router_gain, "router_gain"},
                                {a.norm_gain, "norm_gain"},
                                {a.swap_w, "swap_w"},
                                {a.bank_w, "bank_w"}})
    SWAPFFN_REQUIRE(reinterpret_cast<uintptr_t>(p) % 16 == 0,
                    std::string("event router: ") + name + " is not 16-byte aligned (the kernel bulk-copies it)");
  if (grid == RouterGrid::automatic) {
    // Thresholds in rows per SM: 32-row CTAs from ~24 rows per SM (B >= 7 at the defaults on 132
    // SMs), 16-row CTAs from ~12 (B = 4), else 8-row CTAs (B = 1: 64 CTAs). Counted over all
    // total_rows: the launches of the fused backend's row groups run side by side.
    const int64_t sms = sm_count();
    grid = a.total_rows >= 24 * sms ? RouterGrid::cta32 : a.total_rows >= 12 * sms ? RouterGrid::cta16 : RouterGrid::cta8;
  }
  const auto go = [&](auto kernel, int rows_per_cta, int warps, size_t smem) {
    launch_kernel_ex(kernel, dim3(static_cast<unsigned>((a.rows + rows_per_cta - 1) / rows_per_cta)), dim3(warps * 32),
                     dim3(1, 1, 1), int(smem), stream, pdl, a);
  };
  switch (grid) {
    case RouterGrid::cta32:
      return go(event_router_kernel<32>, 32, RouterShape<32>::kWarps, smem_layout<32>(a.d_model, a.d_router).total());
    case RouterGrid::cta16:
      return go(event_router_kernel<16>, 16, RouterShape<16>::kWarps, smem_layout<16>(a.d_model, a.d_router).total());
    case RouterGrid::cta8:
      return go(event_router_kernel<8>, 8, RouterShape<8>::kWarps, smem_layout<8>(a.d_model, a.d_router).total());
    case RouterGrid::automatic: break;
  }
  SWAPFFN_FAIL("event router: unhandled grid " + to_string(grid));
}

}  // namespace swapffn::cuda

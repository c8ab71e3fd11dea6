// FFN up-projection of the fused backend: u = silu(n W1^T) * (n W3^T) in one GEMM.
// W1 and W3 are interleaved offline in blocks of 8 rows (rows 16g..16g+7 = w1[8g..8g+7], rows
// 16g+8..16g+15 = w3[8g..8g+7]; see interleave_w13), so the gate and up values of one output land
// in the same thread's accumulators, two adjacent outputs per thread: the SwiGLU is a register-only
// epilogue with bf16x2 stores, and the two [M, F] fp32 products never exist.
#include <algorithm>
#include <atomic>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/sm90_bf16_gemm.cuh"
#include "cuda/kernels/sm90_bf16_dual_gemm_swiglu.hpp"
#include "cuda/runtime/tma.hpp"

namespace swapffn::cuda {
namespace {

struct SwigluEpilogue {
  struct Params {
    CUtensorMap u;      // u [M, F] bf16, boxes of 64 rows x 64 outputs, 128-byte swizzle
    CUtensorMap u_rem;  // u as bytes, boxes of 64 rows x (BN/2 % 64) outputs, unswizzled (tile widths
                        // that are not a multiple of 128; unused otherwise)
  };
  // The warpgroup's 64 x BN/2 outputs are staged in shared memory as BN/128 boxes of 64 rows x 128
  // bytes, laid out as the TMA's 128-byte swizzle wants them (16-byte chunk c of row r at chunk
  // c ^ (r % 8): both the accumulator-layout writes and the TMA reads are conflict-free), then the
  // rest of the row (BN/2 % 64 outputs, e.g. 24 of a 176-wide tile) as one plain row-major box, and
  // one thread stores them with TMA. The store runs asynchronously: the warpgroup goes on to the next
  // tile's MMAs (persistent variants) while the copy engine writes u; only the next tile's epilogue
  // waits for it to have read the staging. (Thread-issued 16-byte stores kept the warpgroup busy
  // for the whole copy-out; direct bf16x2 stores filled half of each 32-byte sector.) Columns past F
  // (the zero-filled weight rows of a partial last tile) are clipped by the store.
  template <int BN>
  static constexpr int smem_bytes() { return 64 * BN; }  // 64 rows x BN/2 bf16
  template <int BN>
  static constexpr int full_boxes() { return BN / 128; }
  template <int BN>
  static constexpr int rem_bytes() { return BN % 128; }  // bytes per row of the remainder box
  // The dual GEMM never splits K (launch<> fixes SplitK = 1: the SwiGLU needs whole sums), so every
  // CTA owns all of its tile's columns and the block range is always the whole tile.
  template <int BN>
  __device__ static void apply(const Params& p, float (&acc)[BN / 2], int m_base, int n_base, int /*M*/, int t,
                               uint8_t* stage, int barrier, int /*j_begin*/, int /*j_end*/) {
    static_assert(BN % 16 == 0, "each 16-row W1/W3 group gives one 16-byte chunk of outputs per row");
    constexpr int kBoxBytes = 64 * 128, kFull = full_boxes<BN>(), kRem = rem_bytes<BN>();
    // Shared address of byte `byte` of chunk g (16 bytes: outputs 8g..8g+7) of row r; g is a
    // compile-time index.
    const uint32_t base = cute::cast_smem_ptr_to_uint(stage);
    const auto at = [&](int r, int g, int byte) {
      if (g < 8 * kFull)
        return base + (g / 8) * kBoxBytes + r * 128 + (((g % 8) ^ (r & 7)) * 16) + byte;
      return base + kFull * kBoxBytes + r * kRem + (g - 8 * kFull) * 16 + byte;
    };
    if (t == 0) cute::tma_store_wait<0>();  // the previous tile's store has read the staging
    sm90::warpgroup_bar(barrier);
    const sm90::AccCoord a = sm90::acc_coord(t, 0);
#pragma unroll
    for (int g = 0; g < BN / 16; ++g) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float* gate = &acc[4 * (2 * g) + 2 * half];
        const float* up = &acc[4 * (2 * g + 1) + 2 * half];
        const __nv_bfloat162 v = __floats2bfloat162_rn(silu_mul(gate[0], up[0]), silu_mul(gate[1], up[1]));
        sm90::st_shared_b32(at(a.row + 8 * half, g, a.col * 2), reinterpret_cast<const uint32_t&>(v));  // a.col = 2 (lane % 4)
      }
    }
    cute::tma_store_fence();  // this thread's shared-memory writes become visible to the copy engine
    sm90::warpgroup_bar(barrier);
    if (t == 0) {
#pragma unroll
      for (int b = 0; b < kFull; ++b)
        cute::SM90_TMA_STORE_2D::copy(&p.u, stage + b * kBoxBytes, n_base / 2 + b * 64, m_base);  // rows >= M clipped
      if constexpr (kRem > 0)
        cute::SM90_TMA_STORE_3D::copy(&p.u_rem, stage + kFull * kBoxBytes, (n_base / 2 + kFull * 64) * 2, m_base, 0);
      cute::tma_store_arrive();
    }
  }
  // The stores must be complete before the CTA (and its shared memory) goes away.
  __device__ static void finish(int t) {
    if (t == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
  // silu(g) * up with one multi-function-unit op: sigmoid(g) = (1 + tanh(g/2)) / 2, so with h = g/2
  // it is (h up) tanh(h) + h up. The MUFU unit (16 results per clock per SM) bounds this epilogue,
  // which no MMA overlaps; exp and a reciprocal took two of its ops per output. tanh.approx's relative
  // error (~1e-5) is far below the bf16 rounding of u that follows; a saturated tanh (+-1) gives
  // g up and 0 exactly.
  __device__ static float silu_mul(float g, float up) {
    const float h = 0.5f * g;
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
    const float hu = h * up;
    return fmaf(hu, t, hu);
  }
};

template <int BN, int Stages, int Multicast, bool Persistent>
void launch(const DualGemmSwigluArgs& a, cudaStream_t stream) {
  using Tile = sm90::GemmTile<BN, Stages, Multicast, Persistent>;
  SWAPFFN_REQUIRE(a.n2 > 0 && a.n2 % 16 == 0,
                  "dual GEMM: 2*F = " + std::to_string(a.n2) + " is not a positive multiple of 16 (whole W1/W3 pairs)");
  SWAPFFN_REQUIRE(a.k > 0 && a.k % Tile::BK == 0, "dual GEMM: K = " + std::to_string(a.k) + " is not a positive multiple of 64");
  const CUtensorMap ta = make_tma_2d_bf16_sw128(a.a, a.m, a.k, Tile::kBoxRowsA, 64);
  const CUtensorMap tb = make_tma_2d_bf16_sw128(a.w13, a.n2, a.k, Tile::kBoxRowsB, 64);
  const CUtensorMap tu = make_tma_2d_bf16_sw128(a.u, a.m, a.n2 / 2, 64, 64);
  constexpr int kRem = SwigluEpilogue::rem_bytes<BN>();
  const CUtensorMap tu_rem = kRem > 0 ? make_tma_3d_u8(a.u, uint64_t(a.n2), a.m, 1, uint64_t(a.n2), uint64_t(a.n2) * a.m,
                                                       kRem, 64, false)
                                      : CUtensorMap{};
  auto kernel = sm90::sm90_bf16_gemm_kernel<Tile, SwigluEpilogue>;
  // M tiles rounded up to whole clusters: a CTA past the last row reads zeros and writes nothing.
  // The last N tile may be partial (2F not a multiple of BN): its missing weight rows read as zeros.
  const int m_tiles = (a.m + Tile::BM - 1) / Tile::BM, n_tiles = (a.n2 + BN - 1) / BN;
  const int m_units = (m_tiles + Multicast - 1) / Multicast;  // groups of M tiles sharing a W13 tile
  const int smem = sm90::kernel_smem_bytes<Tile, SwigluEpilogue>();
  dim3 grid(n_tiles, m_units * Multicast, 1);
  if constexpr (Persistent) {
    // As many CTAs (clusters) as are resident at once, each walking every grid-th unit. The
    // occupancy query costs microseconds of host time, more than a small GEMM (eager launches,
    // timing loops), so its answer is kept per device.
    static std::atomic<int> resident_on[kMaxDevices] = {};
    const int resident = once_per_device(resident_on, [&] {
      const int n =
          Multicast > 1 ? max_active_clusters(kernel, dim3(Tile::kThreads), dim3(1, Multicast, 1), smem) : sm_count();
      SWAPFFN_REQUIRE(n > 0, "dual GEMM: no cluster of " + std::to_string(Multicast) + " CTAs of this variant fits the GPU");
      return n;
    });
    const unsigned clusters = static_cast<unsigned>(std::min(m_units * n_tiles, resident));
    grid = Multicast > 1 ? dim3(1, clusters * Multicast, 1) : dim3(clusters);
  }
  launch_kernel_ex(kernel, grid, dim3(Tile::kThreads), dim3(1, Multicast, 1), smem, stream, /*pdl=*/true, ta, tb,
                   SwigluEpilogue::Params{tu, tu_rem}, a.m, a.k / Tile::BK, n_tiles, m_units * n_tiles);
}

// The compiled tiles (fused_options.hpp; why each is a default: fused_config.cpp). Split-K is absent
// on purpose: the SwiGLU needs whole sums. bn 256 x 4 stages: 192 KB of stages, each W13 tile feeds
// 128 rows x 128 outputs (the most reuse).
struct DualEntry {
  DualGemmTile tile;
  void (*fn)(const DualGemmSwigluArgs&, cudaStream_t);
};
constexpr DualEntry kDualTiles[] = {{DualGemmTile::bn256, launch<256, 4, 1, false>},
                                    {DualGemmTile::bn256_persistent, launch<256, 4, 1, true>},
                                    {DualGemmTile::bn256_persistent_mc2, launch<256, 4, 2, true>}};

}  // namespace

std::vector<bf16> interleave_w13(const std::vector<bf16>& w1, const std::vector<bf16>& w3, int64_t f, int64_t k) {
  SWAPFFN_REQUIRE(f % 8 == 0, "d_ff = " + std::to_string(f) + " must be a multiple of 8 to interleave w1/w3");
  SWAPFFN_REQUIRE(w1.size() == size_t(f * k) && w3.size() == size_t(f * k), "w1/w3 sizes do not match [F, K]");
  std::vector<bf16> out(size_t(2 * f * k));
  for (int64_t r = 0; r < f; ++r) {
    const int64_t dst = (r / 8) * 16 + r % 8;
    std::copy_n(&w1[size_t(r * k)], k, &out[size_t(dst * k)]);
    std::copy_n(&w3[size_t(r * k)], k, &out[size_t((dst + 8) * k)]);
  }
  return out;
}

void launch_dual_gemm_swiglu(const DualGemmSwigluArgs& a, DualGemmTile tile, cudaStream_t stream) {
  for (const auto& e : kDualTiles)
    if (e.tile == tile) return e.fn(a, stream);
  SWAPFFN_FAIL(std::string("dual GEMM: no compiled tile ") + to_string(tile));
}

}  // namespace swapffn::cuda

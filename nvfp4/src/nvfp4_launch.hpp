// Internal interface between the NVFP4 API (validation, config choice: nvfp4_api.cpp) and the
// kernel files: plain parameter structs and one launcher per kernel. Launchers assume a validated
// problem and throw swapffn::Error only for CUDA failures.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "swapffn/nvfp4/nvfp4.hpp"

namespace swapffn::cuda::nvfp4 {

// One operand as the kernels see it: batch strides in bytes, blocked-layout block count along K.
struct OperandArgs {
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;
  int64_t data_batch = 0;   // bytes between batches of data
  int64_t scale_batch = 0;  // bytes between batches of scales
  int64_t rk_blocks = 0;    // blocked 128x4 layout: ceil((K/16)/4); 0 for plain
};

OperandArgs operand_args(const swapffn::nvfp4::Operand& op, int64_t rows, int64_t k);

// GEMV rows per CTA (two m16 tiles of one warp; see sm90_nvfp4_gemv.cu).
inline constexpr int kGemvRowsPerCta = 32;

// GEMV load=tma (sm90_nvfp4_gemv_tma.cu): a ring stage holds step_k (1024 or 2048) k of the
// CTA's 32 rows; the shared memory a CTA needs: `stages` stages of 32 rows x step_k / 2 data bytes
// plus scales (plain: 32 rows x step_k / 16 bytes; blocked: the row block's step_k / 64 units of
// 512 bytes), b of its K range as int8 plus fp32 block scales (1.25 bytes per k), the ring's
// barriers and 128 bytes of alignment slack.
inline size_t gemv_tma_smem_bytes(int64_t k, int split_k, int stages, int step_k, bool blocked) {
  const int64_t steps = (k + step_k - 1) / step_k;
  const int64_t steps_per_cta = (steps + split_k - 1) / split_k;
  const size_t scale_bytes = blocked ? static_cast<size_t>(step_k) * 8 : static_cast<size_t>(kGemvRowsPerCta) * (step_k / 16);
  return 128 + static_cast<size_t>(stages) * (kGemvRowsPerCta * (step_k / 2) + scale_bytes) +
         static_cast<size_t>(steps_per_cta) * (step_k + (step_k / 16) * 4) +
         2 * static_cast<size_t>(stages) * sizeof(uint64_t);
}

struct GemvArgs {
  OperandArgs a, b;
  void* c = nullptr;
  int64_t m = 0, k = 0, l = 0;
  int split_k = 1;
  float* partials = nullptr;  // [L][row blocks][split_k][kGemvRowsPerCta]
  int* counters = nullptr;    // [L][row blocks]
};

struct GemmArgs {
  OperandArgs a, b[2];  // b[1] only for the dual GEMM
  void* c = nullptr;
  int64_t m = 0, n = 0, k = 0, l = 0;
  int split_k = 1;
  int stream_k = 0;  // CTAs of a stream-K grid (nvfp4_stream_k.cuh); 0: one CTA per tile and split
  float* partials = nullptr;
  int* counters = nullptr;
  uint8_t* a16 = nullptr;  // rs tiles: the workspace's fp16 copy of A (nvfp4_predequant_a.cu)
};

// Tensor maps of the rs tiles, per operand (a, then b[0], b[1]): data[0] is A's fp16 copy; the
// weights' raw bytes as 3-D byte tensors (K/2, rows, L) and plain scales as (K/16, rows, L).
// Blocked scales need no map: they are copied with bulk copies.
struct TmaOperands {
  CUtensorMap data[3];
  CUtensorMap scales[3];
};
struct NoTma {};

// The register-operand tiles: A dequantized once into the workspace, weights converted into
// wgmma's register operand (nvfp4_rs_mainloop.cuh).
inline bool is_rs_tile(swapffn::nvfp4::Tile t) {
  using swapffn::nvfp4::Tile;
  return t == Tile::m128_n128_rs || t == Tile::m128_n256_rs || t == Tile::m128_n64_rs;
}

// The rs tiles' launch preparation: the operands' tensor maps with boxes of the tile's weight rows,
// A's fp16 map and the pre-pass into args.a16; `tile` becomes `fallback` when the weight scales are
// only 4-byte aligned (TMA needs 16); nothing is done for other tiles.
void prepare_tma_tile(const GemmArgs& args, int nb, swapffn::nvfp4::Tile& tile, swapffn::nvfp4::Tile fallback,
                      TmaOperands& maps, cudaStream_t stream);

// rs tiles: bytes of the fp16 copy of A, the pre-pass that writes it to args.a16 (stream ordered
// before the GEMM, in the k order the tile reads: nvfp4_predequant_a.cu), and its tensor map
// (tile_m rows x 128 bytes, 128-byte swizzle).
size_t predequant_a_bytes(int64_t m, int64_t k, int64_t l);
void launch_predequant_a(const GemmArgs& args, cudaStream_t stream);
CUtensorMap make_tma_a16(uint8_t* a16, int64_t m, int64_t k, int64_t l, int tile_m);

// A group's CTAs. The grids of one tile width: [tile_begin, tile_begin + tiles), tiles_m m tiles of
// each column tile adjacent; narrow_begin == tile_begin. The rs grid (both widths, TileConfig::
// wide_n): its first segment holds every group's wide tiles, tiles_m x group_wide_cols(n, wide_n)
// from tile_begin, and the second the 128-wide tiles of the columns after them, from narrow_begin.
struct GroupArgs {
  OperandArgs a, b;
  void* c = nullptr;
  uint8_t* a16 = nullptr;  // rs tiles: this group's fp16 activations in the workspace
  int m = 0, n = 0, k = 0;
  int tiles_m = 0, tile_begin = 0, narrow_begin = 0;
};

// The groups as kernel parameters, in a block of G group slots (the first `groups` used).
// wide_tiles: the rs grid's first segment (CTAs of 256-wide tiles); a group has
// min(wide_n, ceil(n / 256)) wide column tiles.
template <int G>
struct GroupedArgsOf {
  static constexpr int kCapacity = G;
  GroupArgs g[G];
  int groups = 0;
  int total_tiles = 0;
  int wide_tiles = 0, wide_n = 0;
};
__host__ __device__ inline int group_wide_cols(int n, int wide_n) { return wide_n < (n + 255) / 256 ? wide_n : (n + 255) / 256; }
// The 128-wide column tiles of the columns after a group's wide ones.
__host__ __device__ inline int group_narrow_cols(int n, int wide_n) {
  const int rest = n - 256 * group_wide_cols(n, wide_n);
  return rest > 0 ? (rest + 127) / 128 : 0;
}
using GroupedArgs = GroupedArgsOf<swapffn::nvfp4::kMaxGroups>;

// The grouped GEMM's rs tiles: each group's tensor maps (its fp16 activations, weight bytes and
// plain weight scales; nvfp4_rs_mainloop.cuh), a second kernel parameter beside the groups. Both
// fit the 32 KB kernel-parameter limit (sm_70+, CUDA 12.1+) at 64 groups.
struct GroupMaps {
  CUtensorMap act, data, scales;
};
template <int G>
struct GroupedRsMapsOf {
  GroupMaps g[G];
};
static_assert(sizeof(GroupedArgs) + sizeof(GroupedRsMapsOf<swapffn::nvfp4::kMaxGroups>) + 64 <= 32764,
              "the grouped rs kernel's parameters exceed the 32764-byte kernel-parameter limit");

// Launches copy their kernel parameters, and at 64 group slots the rs grid's are 32 KB: launching
// that grid alone measured 5.9-7.3 us against 3.5-3.8 for the GEMM's 1 KB, and 4.0-4.4 with 8
// slots. So every grouped grid and the rs
// pre-pass launch with a block of kFewGroups slots when the groups fit (4 KB with the rs maps),
// else with all kMaxGroups.
inline constexpr int kFewGroups = 8;
static_assert(kFewGroups <= swapffn::nvfp4::kMaxGroups, "the small parameter block is a prefix of the full one");
template <class F>
void with_group_capacity(const GroupedArgs& args, F&& f) {
  if (args.groups > kFewGroups) {
    f(args);
    return;
  }
  GroupedArgsOf<kFewGroups> few;
  for (int i = 0; i < args.groups; ++i) few.g[i] = args.g[i];
  few.groups = args.groups;
  few.total_tiles = args.total_tiles;
  few.wide_tiles = args.wide_tiles;
  few.wide_n = args.wide_n;
  f(few);
}

// The rs grid's maps of every group (weight and plain-scale boxes of 128 rows, which a 256-wide
// tile copies twice per stage), or false (maps untouched) when a group's weight scales are only
// 4-byte aligned (TMA and bulk copies need 16; the API allows 4). Built for G = kFewGroups and
// kMaxGroups.
inline constexpr int kGroupBoxRows = 128;
template <int G>
bool make_group_maps(const GroupedArgsOf<G>& args, GroupedRsMapsOf<G>& maps);

// The grouped GEMM's pre-pass: every group's activations into its a16, in A16Order::fragment, in
// one launch (the grouped kernel is its programmatic dependent). Built for the same G.
template <int G>
void launch_predequant_a_grouped(const GroupedArgsOf<G>& args, cudaStream_t stream);

// Workspace split into per-tile arrival counters, fp32 partials, then the fp16 copy of A of the
// rs tiles (each part 256-byte aligned).
struct SplitWorkspace {
  size_t counter_bytes = 0, partial_bytes = 0, a16_bytes = 0;
  size_t total() const { return counter_bytes + partial_bytes + a16_bytes; }
};

// Threads of the tile kernel of `tile` (needed to size split-K partials).
int tile_threads(swapffn::nvfp4::Tile tile, bool dual);
// fp32 accumulators per thread.
int tile_acc_per_thread(swapffn::nvfp4::Tile tile, bool dual);

void launch_gemv(const GemvArgs& args, int warps, cudaStream_t stream);
// K % 256 == 0 and 16-byte aligned `a` scales, either layout; shared memory checked by the API,
// which also asks gemv_tma_built whether the (warps, stages, step_k) variant is instantiated.
bool gemv_tma_built(int warps, int stages, int step_k);
void launch_gemv_tma(const GemvArgs& args, int warps, int stages, int step_k, cudaStream_t stream);
void launch_gemm(const GemmArgs& args, swapffn::nvfp4::Tile tile, cudaStream_t stream);
void launch_dual_gemm_swiglu(const GemmArgs& args, swapffn::nvfp4::Tile tile, cudaStream_t stream);
void launch_grouped_gemm(const GroupedArgs& args, swapffn::nvfp4::Tile tile, cudaStream_t stream);

}  // namespace swapffn::cuda::nvfp4

// NVFP4 block-scaled kernels on Hopper: batched GEMV, GEMM, gated dual GEMM (SwiGLU) and grouped
// GEMM on device pointers. Hopper has no FP4 tensor-core MMA, so every kernel dequantizes
// e2m1 x e4m3 exactly into fp16 (<= 6 significant bits, always representable) and multiplies with
// fp32 accumulation; see docs/NVFP4.md.
//
// Layouts (all K-major, batch L outermost, as in issue 5):
//   data   (rows, K/2, L) bytes, strides (K/2, 1, batch_rows*K/2); element k of a row is the low
//          nibble of byte k/2 when k is even, the high nibble when odd.
//   scales (rows, K/16, L) fp8 e4m3fn, plain strides (K/16, 1, batch_rows*K/16), or the blocked
//          128x4 layout of cuBLAS/CUTLASS block-scaled GEMMs (see scale_offset()).
//   c      (M, N, L) fp16, strides (N, 1, M*N); the GEMV writes (M, 1, L).
// Each entry point validates its problem first and throws swapffn::Error naming what is wrong;
// nothing is launched then.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct CUstream_st;  // cudaStream_t without pulling CUDA headers into host-only code

namespace swapffn::nvfp4 {

using Stream = CUstream_st*;

enum class ScaleLayout { plain, blocked_128x4 };

const char* to_string(ScaleLayout layout);

// Byte offset of scale (row i, scale column j, batch b) of a (rows, K/16, L) scale tensor.
inline int64_t scale_offset(ScaleLayout layout, int64_t rows, int64_t kscales, int64_t i, int64_t j,
                            int64_t b) {
  if (layout == ScaleLayout::plain) return (b * rows + i) * kscales + j;
  const int64_t rm = (rows + 127) / 128, rk = (kscales + 3) / 4;
  return b * rm * rk * 512 + (i / 128) * rk * 512 + (j / 4) * 512 + (i % 32) * 16 +
         ((i % 128) / 32) * 4 + (j % 4);
}

// Bytes of a scale tensor of `rows` rows per batch (the blocked layout pads to 128 x 4 blocks).
inline int64_t scale_bytes(ScaleLayout layout, int64_t rows, int64_t kscales, int64_t batches) {
  if (layout == ScaleLayout::plain) return rows * kscales * batches;
  return ((rows + 127) / 128) * ((kscales + 3) / 4) * 512 * batches;
}

// One NVFP4 operand on the device. batch_rows is the number of rows stored per batch (0: the
// problem's row count); the GEMV accepts b stored with 128 rows per batch, of which row 0 is used.
struct Operand {
  const void* data = nullptr;
  const void* scales = nullptr;
  ScaleLayout layout = ScaleLayout::plain;
  int64_t batch_rows = 0;
};

struct GemvProblem {  // c[m, 0, l] = sum_k a[m, k, l] * b[0, k, l]
  int64_t m = 0, k = 0, l = 1;
  Operand a, b;
  void* c = nullptr;
};

struct GemmProblem {  // c[m, n, l] = sum_k a[m, k, l] * b[n, k, l]
  int64_t m = 0, n = 0, k = 0, l = 1;
  Operand a, b;
  void* c = nullptr;
};

struct DualGemmProblem {  // c = fp16(silu(a b1^T) * (a b2^T)), silu and product in fp32
  int64_t m = 0, n = 0, k = 0, l = 1;
  Operand a, b1, b2;
  void* c = nullptr;
};

// G independent GEMMs (each with l = 1) in one launch.
struct GroupedGemmProblem {
  std::vector<GemmProblem> groups;
};

// Requirements (checked): GEMV K % 64 == 0; the others K % 256 == 0; every size > 0; data and
// scales 16-byte / 4-byte aligned; c 4-byte aligned; at most kMaxGroups groups.
inline constexpr int64_t kGemvKMultiple = 64;
inline constexpr int64_t kGemmKMultiple = 256;
inline constexpr int kMaxGroups = 64;

// ---- kernel configurations (separate from the problem; chosen by choose_*(), overridable) ----

// GEMV: 32 rows per CTA, `warps` warps (4 or 8) split each CTA's K range, `split_k` CTAs split K
// further. Each lane multiplies with int8 dot products (DP4A on twice the e2m1 values, the scales
// applied per 16-element block, fp32 accumulation: exact per block).
// load: how `a` reaches the warps: 16-byte register loads by every lane (any problem), or a
// shared-memory ring filled by TMA copies `stages` k-steps of `step_k` elements ahead (8 consumer
// warps; needs a's scales 16-byte aligned, either layout, and K % 256 == 0). Built rings: 2 x 1024,
// 2 x 2048, 4 x 2048 (the ones choose_gemv_config picks).
enum class GemvLoad { registers, tma };
struct GemvConfig {
  int warps = 4;
  int split_k = 1;
  GemvLoad load = GemvLoad::registers;
  int stages = 2;      // load=tma only
  int step_k = 1024;   // load=tma only
};

// Tile GEMMs: CTA tile M x N (per B operand for the dual GEMM), and split_k CTAs per output tile
// (reduced in a fixed order by the last one, so results stay deterministic).
// *_rs tiles (GEMM: 128x128, 128x64; dual GEMM: 128x128 or 128x64 of each product; grouped:
// 128x128, 128x256, or both in one grid: TileConfig::wide_n): A dequantized once by a pre-pass,
// B converted by the MMA warps straight into wgmma's register operand (operands swapped), every
// copy by TMA. The 64-row tiles multiply with mma.sync (small M); the *_wgmma tiles (warpgroup MMAs
// on fp16 tiles in shared memory) run where TMA cannot copy the weight scales (4-byte aligned).
enum class Tile { m64_n128, m64_n64, m128_n128_wgmma, m128_n64_wgmma, m128_n128_rs, m128_n64_rs, m128_n256_rs };
const char* to_string(Tile t);
int tile_m(Tile t);
int tile_n(Tile t);

// stream_k > 0 (dual GEMM tile 128x128rs only; split_k 1; at most the SM count): a persistent grid
// of that many CTAs divides the tiles' 128-k stages evenly, a CTA's range crossing tile boundaries,
// instead of one CTA per tile and split. A tile covered by several CTAs is summed in CTA order by
// the CTA of its first part, so results stay deterministic for a given stream_k. 0: one CTA per
// tile and split.
// wide_n >= 0 (grouped GEMM tile 128x256rs only): each group's first wide_n column tiles are 256
// wide and the rest of its columns are 128-wide tiles, launched after every group's wide tiles, so
// that they fill the last wave's gaps. -1: every tile 256 wide.
struct TileConfig {
  Tile tile = Tile::m128_n128_rs;
  int split_k = 1;
  int stream_k = 0;
  int wide_n = -1;
};

std::string describe(const GemvConfig& c);
std::string describe(const TileConfig& c);

// Whether the GEMV's TMA path (GemvLoad::tma) can run `p`; if not and `why` is given, the reason.
bool gemv_tma_supported(const GemvProblem& p, std::string* why = nullptr);

GemvConfig choose_gemv_config(const GemvProblem& p, int sm_count);
TileConfig choose_gemm_config(const GemmProblem& p, int sm_count);
TileConfig choose_dual_config(const DualGemmProblem& p, int sm_count);
TileConfig choose_grouped_config(const GroupedGemmProblem& p, int sm_count);

// The configs `swapffn-nvfp4 bench` searches and the GPU tests run: the chosen one first, then the
// other built configs that apply to `p` (every tile at a few splits).
std::vector<GemvConfig> gemv_candidates(const GemvProblem& p, int sm_count);
std::vector<TileConfig> gemm_candidates(const GemmProblem& p, int sm_count);
std::vector<TileConfig> dual_candidates(const DualGemmProblem& p, int sm_count);
std::vector<TileConfig> grouped_candidates(const GroupedGemmProblem& p, int sm_count);

// Split-K needs a workspace for fp32 partials and per-tile arrival counters (a fixed 64 KiB
// counter header, then the partials; at most 16384 output tiles per split-K launch), and the
// rs tiles need room after them for an fp16 copy of A (L x M x K x 2 bytes; grouped: every
// group's, each rounded up to 256). Its first kWorkspaceZeroedBytes (the counters; all of a smaller
// one) must be zeroed (cudaMemset) once when allocated, the rest is scratch the kernels write before
// they read it; the kernels leave the counters at zero again, so one workspace of the largest size
// needed serves any number of launches, of any problems and configs, on one stream. Size 0 means
// none is needed.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};
inline constexpr size_t kWorkspaceZeroedBytes = 65536;

size_t workspace_bytes(const GemvProblem& p, const GemvConfig& c);
size_t workspace_bytes(const GemmProblem& p, const TileConfig& c);
size_t workspace_bytes(const DualGemmProblem& p, const TileConfig& c);
size_t workspace_bytes(const GroupedGemmProblem& p, const TileConfig& c);

// ---- entry points (asynchronous on `stream`) ----
void gemv(const GemvProblem& p, const GemvConfig& c, Workspace ws, Stream stream);
void gemm(const GemmProblem& p, const TileConfig& c, Workspace ws, Stream stream);
void dual_gemm_swiglu(const DualGemmProblem& p, const TileConfig& c, Workspace ws, Stream stream);
void grouped_gemm(const GroupedGemmProblem& p, const TileConfig& c, Workspace ws, Stream stream);

// Validation alone (what the entry points run first); throws swapffn::Error.
void validate(const GemvProblem& p);
void validate(const GemmProblem& p);
void validate(const DualGemmProblem& p);
void validate(const GroupedGemmProblem& p);

}  // namespace swapffn::nvfp4

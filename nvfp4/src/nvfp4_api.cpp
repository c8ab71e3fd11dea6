// NVFP4 entry points: validate the problem and the config (throwing swapffn::Error that names what
// is wrong, before anything is launched), lay out the split-K workspace, and call the launchers.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "cuda/runtime/cuda_check.hpp"
#include "nvfp4_launch.hpp"
#include "swapffn/error.hpp"
#include "swapffn/nvfp4/nvfp4.hpp"

namespace swapffn::cuda::nvfp4 {

OperandArgs operand_args(const swapffn::nvfp4::Operand& op, int64_t rows, int64_t k) {
  const int64_t batch_rows = op.batch_rows > 0 ? op.batch_rows : rows;
  OperandArgs a;
  a.data = static_cast<const uint8_t*>(op.data);
  a.scales = static_cast<const uint8_t*>(op.scales);
  a.data_batch = batch_rows * (k / 2);
  a.scale_batch = swapffn::nvfp4::scale_bytes(op.layout, batch_rows, k / 16, 1);
  a.rk_blocks = op.layout == swapffn::nvfp4::ScaleLayout::plain ? 0 : (k / 16 + 3) / 4;
  return a;
}

}  // namespace swapffn::cuda::nvfp4

namespace swapffn::nvfp4 {

namespace cu = swapffn::cuda::nvfp4;

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 30;  // kernels index tiles and k-tiles with int

std::string dims(const char* what, int64_t v) { return std::string(what) + "=" + std::to_string(v); }

bool aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

void check_dim(const std::string& op, const char* name, int64_t v) {
  SWAPFFN_REQUIRE(v > 0 && v < kMaxDim, op + ": " + dims(name, v) + " must be in [1, 2^30)");
}

void check_k(const std::string& op, int64_t k, int64_t multiple) {
  check_dim(op, "K", k);
  SWAPFFN_REQUIRE(k % multiple == 0, op + ": K=" + std::to_string(k) + " is not a multiple of " +
                                         std::to_string(multiple) + " (required by this kernel)");
}

void check_operand(const std::string& op, const char* name, const Operand& o, int64_t rows) {
  const std::string who = op + ": operand " + name;
  SWAPFFN_REQUIRE(o.data != nullptr, who + " data pointer is null");
  SWAPFFN_REQUIRE(o.scales != nullptr, who + " scales pointer is null");
  SWAPFFN_REQUIRE(aligned(o.data, 16), who + " data is not 16-byte aligned");
  SWAPFFN_REQUIRE(aligned(o.scales, 4), who + " scales are not 4-byte aligned");
  SWAPFFN_REQUIRE(o.batch_rows == 0 || o.batch_rows >= rows,
                  who + " has batch_rows=" + std::to_string(o.batch_rows) + " < the " + std::to_string(rows) +
                      " rows the problem uses");
}

void check_output(const std::string& op, const void* c) {
  SWAPFFN_REQUIRE(c != nullptr, op + ": output pointer c is null");
  SWAPFFN_REQUIRE(aligned(c, 4), op + ": output c is not 4-byte aligned");
}

// Split-K workspace layout: a fixed-size counter header, then the partials. The header size does
// not depend on the problem or the config, so a workspace shared by different configs never has
// one config's partials where another keeps its counters (the kernels leave counters at zero, but
// partials are arbitrary floats). A counter-sized-per-config layout did exactly that in the
// bench's config search: a later config found a previous config's partials as its counters.
constexpr int64_t kMaxSplitTiles = 16384;
static_assert(kMaxSplitTiles * sizeof(int) == kWorkspaceZeroedBytes, "the counter header is what must be zeroed");

cu::SplitWorkspace split_workspace(const std::string& op, int64_t tiles, int split, int64_t floats_per_cta) {
  cu::SplitWorkspace w;
  if (split <= 1) return w;
  SWAPFFN_REQUIRE(tiles <= kMaxSplitTiles, op + ": split-K over " + std::to_string(tiles) + " output tiles; at most " +
                                               std::to_string(kMaxSplitTiles) + " are supported (use split_k=1)");
  w.counter_bytes = kMaxSplitTiles * sizeof(int);
  w.partial_bytes = static_cast<size_t>(tiles) * split * floats_per_cta * sizeof(float);
  return w;
}

// Stream-K: one counter per output tile in the same header, then two partial slots per CTA (a
// CTA's first and last tile may be partial; nvfp4_stream_k.cuh).
cu::SplitWorkspace stream_k_workspace(const std::string& op, int64_t tiles, int ctas, int64_t floats_per_cta) {
  SWAPFFN_REQUIRE(tiles <= kMaxSplitTiles, op + ": stream-K over " + std::to_string(tiles) + " output tiles; at most " +
                                               std::to_string(kMaxSplitTiles) + " are supported (use stream_k=0)");
  cu::SplitWorkspace w;
  w.counter_bytes = kMaxSplitTiles * sizeof(int);
  w.partial_bytes = 2 * static_cast<size_t>(ctas) * floats_per_cta * sizeof(float);
  return w;
}

// The launch arguments that the GEMM and the dual GEMM share; the caller adds the B operands.
template <class Problem>
cu::GemmArgs gemm_args(const Problem& p, const TileConfig& c) {
  cu::GemmArgs a;
  a.a = cu::operand_args(p.a, p.m, p.k);
  a.c = p.c;
  a.m = p.m;
  a.n = p.n;
  a.k = p.k;
  a.l = p.l;
  a.split_k = c.split_k;
  a.stream_k = c.stream_k;
  return a;
}

template <class Args>
void attach(const std::string& op, const cu::SplitWorkspace& need, Workspace ws, Args& a) {
  if (need.total() == 0) return;
  SWAPFFN_REQUIRE(ws.ptr != nullptr && ws.bytes >= need.total(),
                  op + ": the config needs a workspace of " + std::to_string(need.total()) + " bytes (" +
                      std::to_string(need.counter_bytes + need.partial_bytes) + " zeroed for split-K or stream-K, " +
                      std::to_string(need.a16_bytes) + " for the fp16 copy of A), got " + std::to_string(ws.bytes) +
                      (ws.ptr ? "" : " (null pointer)"));
  SWAPFFN_REQUIRE(aligned(ws.ptr, 256), op + ": workspace is not 256-byte aligned");
  char* base = static_cast<char*>(ws.ptr);
  if (need.counter_bytes > 0) {
    a.counters = reinterpret_cast<int*>(base);
    a.partials = reinterpret_cast<float*>(base + need.counter_bytes);
  }
  if constexpr (requires { a.a16; })
    if (need.a16_bytes > 0) a.a16 = reinterpret_cast<uint8_t*>(base + need.counter_bytes + need.partial_bytes);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_split(const std::string& op, int split, int64_t ktiles) {
  SWAPFFN_REQUIRE(split >= 1 && split <= ktiles && split <= 64,
                  op + ": split_k=" + std::to_string(split) + " must be in [1, min(64, " + std::to_string(ktiles) +
                      " k-tiles)]");
}

bool gemm_tile_ok(Tile t) {
  return t == Tile::m64_n128 || t == Tile::m128_n128_wgmma || t == Tile::m128_n128_rs || t == Tile::m128_n64_rs;
}
bool dual_tile_ok(Tile t) {
  return t == Tile::m64_n64 || t == Tile::m128_n64_wgmma || t == Tile::m128_n128_rs || t == Tile::m128_n64_rs;
}
bool grouped_tile_ok(Tile t) {
  return t == Tile::m64_n128 || t == Tile::m128_n128_wgmma || t == Tile::m128_n128_rs || t == Tile::m128_n256_rs;
}
constexpr const char* kGemmTiles = "64x128, 128x128wg, 128x128rs, 128x64rs";
constexpr const char* kDualTiles = "64x64, 128x64wg, 128x128rs, 128x64rs";
constexpr const char* kGroupedTiles = "64x128, 128x128wg, 128x128rs, 128x256rs";
constexpr int kMaxStreamKCtas = 4096;

// The rs grids without a fallback tile (stream-K, the grouped `128x256rs`) copy the weight scales
// by TMA, which needs them 16-byte aligned; the API allows 4.
void require_tma_scales(const std::string& what, std::initializer_list<const Operand*> weights) {
  for (const Operand* w : weights)
    SWAPFFN_REQUIRE(aligned(w->scales, 16), what + " needs the weight scales 16-byte aligned (TMA copies)");
}

// stream_k: a non-negative CTA count; when set, at most the device's SM count (a tile's first CTA
// waits for the CTAs of its other parts, so all must be resident, and an rs CTA takes a whole SM),
// split_k 1, a tile that has a stream-K kernel, and weight scales the tile can copy by TMA (16-byte
// aligned; the plain grid falls back to another tile instead, which stream-K has not).
void check_stream_k(const std::string& op, const TileConfig& c, bool tile_ok, const char* tiles,
                    std::initializer_list<const Operand*> weights) {
  SWAPFFN_REQUIRE(c.stream_k >= 0 && c.stream_k <= kMaxStreamKCtas,
                  op + ": stream_k=" + std::to_string(c.stream_k) + " must be in [0, " + std::to_string(kMaxStreamKCtas) + "]");
  if (c.stream_k == 0) return;
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  SWAPFFN_REQUIRE(c.stream_k <= sms, op + ": stream_k=" + std::to_string(c.stream_k) + " exceeds the device's " +
                                         std::to_string(sms) + " SMs (every CTA of a stream-K grid must be resident)");
  SWAPFFN_REQUIRE(c.split_k == 1, op + ": stream_k=" + std::to_string(c.stream_k) + " with split_k=" +
                                      std::to_string(c.split_k) + " (stream-K replaces split-K; use split_k=1)");
  SWAPFFN_REQUIRE(tile_ok, op + ": stream_k is built for tile " + tiles + " only, not " + to_string(c.tile));
  require_tma_scales(op + ": stream_k", weights);
}

// wide_n (TileConfig): -1, or a column-tile count on the grouped GEMM's 128x256rs grid.
void check_wide_n(const std::string& op, const TileConfig& c, bool grouped) {
  if (c.wide_n == -1) return;
  const std::string what = op + ": wide_n=" + std::to_string(c.wide_n);
  SWAPFFN_REQUIRE(c.wide_n >= 0, what + " must be -1 (every tile wide) or a count of wide column tiles >= 0");
  SWAPFFN_REQUIRE(grouped && c.tile == Tile::m128_n256_rs,
                  what + " is for the grouped GEMM's tile 128x256rs only, not " + to_string(c.tile));
}

// K per k-tile of a tile kernel (split-K counts these): 128 for the register-operand tiles' stages.
int64_t tile_k(Tile t) { return cu::is_rs_tile(t) ? 128 : 64; }

cu::SplitWorkspace gemv_ws(const GemvProblem& p, const GemvConfig& c) {
  return split_workspace("nvfp4 gemv", ceil_div(p.m, cu::kGemvRowsPerCta) * p.l, c.split_k, cu::kGemvRowsPerCta);
}
// The fp16 copy of A of the rs tiles goes after the counter header even without split-K: a
// workspace shared by several configs must never have one config's fp16 A where a split-K config
// keeps its counters. Rounded up to 256 bytes.
void add_a16(cu::SplitWorkspace& w, Tile t, int64_t m, int64_t k, int64_t l) {
  if (!cu::is_rs_tile(t)) return;
  w.counter_bytes = kMaxSplitTiles * sizeof(int);
  w.a16_bytes = (cu::predequant_a_bytes(m, k, l) + 255) / 256 * 256;
}

// The workspace of a tile GEMM (dual: two B operands) of m x n x k, l batches.
cu::SplitWorkspace tile_ws(const std::string& op, const TileConfig& c, bool dual, int64_t m, int64_t n, int64_t k,
                           int64_t l) {
  const int64_t tiles = ceil_div(m, tile_m(c.tile)) * ceil_div(n, tile_n(c.tile)) * l;
  const int64_t floats_per_cta = static_cast<int64_t>(cu::tile_threads(c.tile, dual)) * cu::tile_acc_per_thread(c.tile, dual);
  cu::SplitWorkspace w;
  if (c.stream_k > 0) w = stream_k_workspace(op, tiles, c.stream_k, floats_per_cta);
  else if (c.split_k > 1) w = split_workspace(op, tiles, c.split_k, floats_per_cta);
  add_a16(w, c.tile, m, k, l);
  return w;
}
cu::SplitWorkspace gemm_ws(const GemmProblem& p, const TileConfig& c) {
  return gemm_tile_ok(c.tile) ? tile_ws("nvfp4 gemm", c, false, p.m, p.n, p.k, p.l) : cu::SplitWorkspace{};
}
cu::SplitWorkspace dual_ws(const DualGemmProblem& p, const TileConfig& c) {
  return dual_tile_ok(c.tile) ? tile_ws("nvfp4 dual_gemm_swiglu", c, true, p.m, p.n, p.k, p.l) : cu::SplitWorkspace{};
}

// Bytes of group g's fp16 activations in the grouped workspace, rounded up to 256 (each group's
// part stays 256-byte aligned for its tensor map).
size_t group_a16_bytes(const GemmProblem& g) { return (cu::predequant_a_bytes(g.m, g.k, 1) + 255) / 256 * 256; }
// The rs tiles: every group's fp16 activations after the counter header (as add_a16 does).
cu::SplitWorkspace grouped_ws(const GroupedGemmProblem& p, const TileConfig& c) {
  cu::SplitWorkspace w;
  if (c.tile != Tile::m128_n128_rs && c.tile != Tile::m128_n256_rs) return w;
  w.counter_bytes = kMaxSplitTiles * sizeof(int);
  for (const GemmProblem& g : p.groups) w.a16_bytes += group_a16_bytes(g);
  return w;
}

}  // namespace

void validate(const GemvProblem& p) {
  const std::string op = "nvfp4 gemv (M=" + std::to_string(p.m) + " K=" + std::to_string(p.k) + " L=" + std::to_string(p.l) + ")";
  check_dim(op, "M", p.m);
  check_dim(op, "L", p.l);
  check_k(op, p.k, kGemvKMultiple);
  check_operand(op, "a", p.a, p.m);
  check_operand(op, "b", p.b, 1);
  check_output(op, p.c);
}

void validate(const GemmProblem& p) {
  const std::string op = "nvfp4 gemm (M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" +
                         std::to_string(p.k) + " L=" + std::to_string(p.l) + ")";
  check_dim(op, "M", p.m);
  check_dim(op, "N", p.n);
  check_dim(op, "L", p.l);
  check_k(op, p.k, kGemmKMultiple);
  check_operand(op, "a", p.a, p.m);
  check_operand(op, "b", p.b, p.n);
  check_output(op, p.c);
}

void validate(const DualGemmProblem& p) {
  const std::string op = "nvfp4 dual_gemm_swiglu (M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" +
                         std::to_string(p.k) + " L=" + std::to_string(p.l) + ")";
  check_dim(op, "M", p.m);
  check_dim(op, "N", p.n);
  check_dim(op, "L", p.l);
  check_k(op, p.k, kGemmKMultiple);
  check_operand(op, "a", p.a, p.m);
  check_operand(op, "b1", p.b1, p.n);
  check_operand(op, "b2", p.b2, p.n);
  check_output(op, p.c);
}

void validate(const GroupedGemmProblem& p) {
  const int g = static_cast<int>(p.groups.size());
  SWAPFFN_REQUIRE(g >= 1 && g <= kMaxGroups, "nvfp4 grouped_gemm: " + std::to_string(g) +
                                                 " groups, must be 1.." + std::to_string(kMaxGroups));
  for (int i = 0; i < g; ++i) {
    const GemmProblem& q = p.groups[i];
    SWAPFFN_REQUIRE(q.l == 1, "nvfp4 grouped_gemm: group " + std::to_string(i) + " has L=" + std::to_string(q.l) +
                                  ", groups must have L=1");
    try {
      validate(q);
    } catch (const Error& e) {
      SWAPFFN_FAIL("nvfp4 grouped_gemm: group " + std::to_string(i) + ": " + e.what());
    }
  }
}

size_t workspace_bytes(const GemvProblem& p, const GemvConfig& c) { return gemv_ws(p, c).total(); }
size_t workspace_bytes(const GemmProblem& p, const TileConfig& c) { return gemm_ws(p, c).total(); }
size_t workspace_bytes(const DualGemmProblem& p, const TileConfig& c) { return dual_ws(p, c).total(); }
size_t workspace_bytes(const GroupedGemmProblem& p, const TileConfig& c) { return grouped_ws(p, c).total(); }

bool gemv_tma_supported(const GemvProblem& p, std::string* why) {
  const char* reason = nullptr;
  if (p.k % 256 != 0) reason = "needs K % 256 == 0 (16-byte pitches of a's scale rows)";
  else if (!aligned(p.a.scales, 16)) reason = "needs a's scales 16-byte aligned";
  if (reason && why) *why = reason;
  return reason == nullptr;
}

void gemv(const GemvProblem& p, const GemvConfig& c, Workspace ws, Stream stream) {
  validate(p);
  const std::string op = "nvfp4 gemv";
  SWAPFFN_REQUIRE(c.warps == 4 || c.warps == 8, op + ": config warps=" + std::to_string(c.warps) + " (supported: 4, 8)");
  const bool tma = c.load == GemvLoad::tma;
  if (tma) {
    std::string why;
    SWAPFFN_REQUIRE(gemv_tma_supported(p, &why), op + ": load=tma " + why + "; use load=registers");
    SWAPFFN_REQUIRE(cu::gemv_tma_built(c.warps, c.stages, c.step_k),
                    op + ": load=tma is not built for " + describe(c) +
                        " (warps 8 with stages x step_k 2 x 1024, 2 x 2048 or 4 x 2048)");
    check_split(op, c.split_k, ceil_div(p.k, c.step_k));
    int device = 0, smem_max = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const size_t smem = cu::gemv_tma_smem_bytes(p.k, c.split_k, c.stages, c.step_k, p.a.layout != ScaleLayout::plain);
    SWAPFFN_REQUIRE(smem <= static_cast<size_t>(smem_max),
                    op + ": load=tma with " + describe(c) + " needs " + std::to_string(smem) +
                        " bytes of shared memory per CTA (the ring and b of K/split_k), the device allows " +
                        std::to_string(smem_max) + "; raise split_k or lower stages");
  } else {
    check_split(op, c.split_k, ceil_div(p.k, 128));
  }
  cu::GemvArgs a;
  a.a = cu::operand_args(p.a, p.m, p.k);
  a.b = cu::operand_args(p.b, 1, p.k);
  a.c = p.c;
  a.m = p.m;
  a.k = p.k;
  a.l = p.l;
  a.split_k = c.split_k;
  attach(op, gemv_ws(p, c), ws, a);
  if (tma) cu::launch_gemv_tma(a, c.warps, c.stages, c.step_k, stream);
  else cu::launch_gemv(a, c.warps, stream);
}

void gemm(const GemmProblem& p, const TileConfig& c, Workspace ws, Stream stream) {
  validate(p);
  const std::string op = "nvfp4 gemm";
  SWAPFFN_REQUIRE(gemm_tile_ok(c.tile), op + ": tile " + to_string(c.tile) + " is not built (" + kGemmTiles + ")");
  check_split(op, c.split_k, p.k / tile_k(c.tile));
  SWAPFFN_REQUIRE(c.stream_k == 0, op + ": stream_k=" + std::to_string(c.stream_k) + " (the GEMM supports 0)");
  check_wide_n(op, c, false);
  cu::GemmArgs a = gemm_args(p, c);
  a.b[0] = cu::operand_args(p.b, p.n, p.k);
  attach(op, gemm_ws(p, c), ws, a);
  cu::launch_gemm(a, c.tile, stream);
}

void dual_gemm_swiglu(const DualGemmProblem& p, const TileConfig& c, Workspace ws, Stream stream) {
  validate(p);
  const std::string op = "nvfp4 dual_gemm_swiglu";
  SWAPFFN_REQUIRE(dual_tile_ok(c.tile), op + ": tile " + to_string(c.tile) + " is not built (" + kDualTiles + ")");
  check_split(op, c.split_k, p.k / tile_k(c.tile));
  check_stream_k(op, c, c.tile == Tile::m128_n128_rs, "128x128rs", {&p.b1, &p.b2});
  check_wide_n(op, c, false);
  cu::GemmArgs a = gemm_args(p, c);
  a.b[0] = cu::operand_args(p.b1, p.n, p.k);
  a.b[1] = cu::operand_args(p.b2, p.n, p.k);
  attach(op, dual_ws(p, c), ws, a);
  cu::launch_dual_gemm_swiglu(a, c.tile, stream);
}

void grouped_gemm(const GroupedGemmProblem& p, const TileConfig& c, Workspace ws, Stream stream) {
  validate(p);
  const std::string op = "nvfp4 grouped_gemm";
  SWAPFFN_REQUIRE(grouped_tile_ok(c.tile), op + ": tile " + to_string(c.tile) + " is not built (" + kGroupedTiles + ")");
  SWAPFFN_REQUIRE(c.split_k == 1, op + ": split_k=" + std::to_string(c.split_k) + " (grouped GEMM supports 1)");
  SWAPFFN_REQUIRE(c.stream_k == 0, op + ": stream_k=" + std::to_string(c.stream_k) + " (grouped GEMM supports 0)");
  check_wide_n(op, c, true);
  // 128x128rs falls back to 128x128wg (the same tiling) where TMA cannot copy a group's scales;
  // 128x256rs has no tile of its own shape to fall back to.
  for (size_t i = 0; i < p.groups.size() && c.tile == Tile::m128_n256_rs; ++i)
    require_tma_scales(op + ": tile 128x256rs, group " + std::to_string(i) + ",", {&p.groups[i].b});
  // The grid's CTAs (cu::GroupArgs): 128x256rs puts every group's wide tiles first (all of them
  // for wide_n = -1), then the 128-wide tiles of the columns after them; the other tiles have one
  // width.
  const bool both_widths = c.tile == Tile::m128_n256_rs;
  cu::GroupedArgs a;
  a.groups = static_cast<int>(p.groups.size());
  a.wide_n = !both_widths ? 0 : c.wide_n < 0 ? std::numeric_limits<int>::max() : c.wide_n;
  int64_t tiles = 0;
  for (int i = 0; i < a.groups; ++i) {
    const GemmProblem& q = p.groups[i];
    cu::GroupArgs& g = a.g[i];
    g.a = cu::operand_args(q.a, q.m, q.k);
    g.b = cu::operand_args(q.b, q.n, q.k);
    g.c = q.c;
    g.m = static_cast<int>(q.m);
    g.n = static_cast<int>(q.n);
    g.k = static_cast<int>(q.k);
    g.tiles_m = static_cast<int>(ceil_div(q.m, tile_m(c.tile)));
    g.tile_begin = static_cast<int>(tiles);
    tiles += int64_t{g.tiles_m} * cu::group_wide_cols(g.n, a.wide_n);
  }
  a.wide_tiles = static_cast<int>(tiles);
  for (int i = 0; i < a.groups; ++i) {
    cu::GroupArgs& g = a.g[i];
    const int64_t narrow_cols = both_widths ? cu::group_narrow_cols(g.n, a.wide_n) : ceil_div(g.n, tile_n(c.tile));
    g.narrow_begin = static_cast<int>(tiles);
    if (!both_widths) g.tile_begin = g.narrow_begin;
    tiles += g.tiles_m * narrow_cols;
    SWAPFFN_REQUIRE(tiles < (int64_t{1} << 31), op + ": more than 2^31 output tiles");
  }
  a.total_tiles = static_cast<int>(tiles);
  cu::GemmArgs wa;  // the workspace's parts (only a16 is used here)
  attach(op, grouped_ws(p, c), ws, wa);
  size_t off = 0;
  for (int i = 0; wa.a16 != nullptr && i < a.groups; ++i) {
    a.g[i].a16 = wa.a16 + off;
    off += group_a16_bytes(p.groups[i]);
  }
  cu::launch_grouped_gemm(a, c.tile, stream);
}

}  // namespace swapffn::nvfp4

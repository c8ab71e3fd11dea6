// Kernel-configuration choice for the NVFP4 kernels: the one place that decides tiles and split-K
// from the problem and the SM count. The bench (`swapffn-nvfp4 bench`) grid-searches around these
// choices and docs/NVFP4.md records what won; callers may pass any other valid config.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <queue>
#include <utility>
#include <string>
#include <vector>

#include "nvfp4_launch.hpp"
#include "swapffn/error.hpp"
#include "swapffn/nvfp4/nvfp4.hpp"

namespace swapffn::nvfp4 {

const char* to_string(ScaleLayout layout) {
  return layout == ScaleLayout::plain ? "plain" : "blocked_128x4";
}

// The built tiles, each with why it survives (docs/NVFP4.md has the measurements; the deleted
// variants are in docs/PERFORMANCE.md's rejected options).
const char* to_string(Tile t) {
  switch (t) {
    case Tile::m64_n128: return "64x128";            // default GEMM M <= 64, grouped with mean m <= 48
    case Tile::m64_n64: return "64x64";              // default dual GEMM M <= 64
    case Tile::m128_n128_wgmma: return "128x128wg";  // fallback: GEMM / grouped rs tiles with 4-byte aligned weight scales
    case Tile::m128_n64_wgmma: return "128x64wg";    // fallback: dual rs tiles with 4-byte aligned weight scales
    case Tile::m128_n128_rs: return "128x128rs";     // default GEMM, dual (tiles fill half the SMs) and grouped
    case Tile::m128_n64_rs: return "128x64rs";       // default GEMM / dual where 128x128rs would leave SMs idle
    case Tile::m128_n256_rs: return "128x256rs";     // default grouped where the list-scheduling model says so
  }
  return "?";
}

int tile_m(Tile t) { return (t == Tile::m64_n128 || t == Tile::m64_n64) ? 64 : 128; }
int tile_n(Tile t) {
  switch (t) {
    case Tile::m128_n256_rs: return 256;
    case Tile::m64_n128:
    case Tile::m128_n128_wgmma:
    case Tile::m128_n128_rs: return 128;
    default: return 64;
  }
}

std::string describe(const GemvConfig& c) {
  return "warps=" + std::to_string(c.warps) + " split_k=" + std::to_string(c.split_k) +
         (c.load == GemvLoad::tma ? " load=tma stages=" + std::to_string(c.stages) + " step_k=" + std::to_string(c.step_k)
                                   : std::string());
}

std::string describe(const TileConfig& c) {
  return std::string("tile=") + to_string(c.tile) + " split_k=" + std::to_string(c.split_k) +
         (c.stream_k > 0 ? " stream_k=" + std::to_string(c.stream_k) : std::string()) +
         (c.wide_n >= 0 ? " wide_n=" + std::to_string(c.wide_n) : std::string());
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The configurations are sized to the machine; a count that is not a GPU's would divide by zero or
// silently pick a grid for nothing.
void require_sm_count(const char* who, int sm_count) {
  SWAPFFN_REQUIRE(sm_count > 0, std::string(who) + ": sm_count must be the device's multiprocessor count (> 0), got " +
                                    std::to_string(sm_count));
}

// Split-K that brings `tiles` CTAs (`per_sm` resident per SM) closest to whole waves without
// going below `min_ktiles` k-tiles per CTA. Rejected alternative: always filling one wave exactly,
// which for M = 128 problems splits K so finely that the fixed-order reduction dominates.
int pick_split(int64_t tiles, int64_t ktiles, int sm_count, int per_sm, int64_t min_ktiles) {
  const int64_t slots = static_cast<int64_t>(sm_count) * per_sm;
  int best = 1;
  double best_eff = 0.0;
  for (int s = 1; s <= 8; ++s) {
    if (s > 1 && ktiles / s < min_ktiles) break;
    const int64_t ctas = tiles * s;
    const double waves = static_cast<double>(ctas) / static_cast<double>(slots);
    const double eff = waves / std::ceil(waves);  // fraction of the slots the waves keep busy
    if (eff > best_eff + 0.05) {  // a further split must buy > 5% occupancy: it costs a reduction
      best = s;
      best_eff = eff;
    }
  }
  return best;
}

}  // namespace

// GEMV. Register path (any problem): 8 warps per 32-row CTA when K >= 4096, else 4 (8 won at
// K = 16384 and 7168, lost at 2048); split K only while the CTAs do not fill the SMs once.
// TMA ring where the problem allows it (8 consumer warps): 2 x 1024 k with few CTAs per SM,
// 2 x 2048 with several waves, 4 x 2048 only where a CTA has >= 4 steps (each won its issue shape,
// H100); split K only to fill the SMs once or to keep b's shared-memory copy within budget (a K so
// long that split 64 cannot takes the register path).
GemvConfig choose_gemv_config(const GemvProblem& p, int sm_count) {
  require_sm_count("choose_gemv_config", sm_count);
  GemvConfig c;
  const int64_t blocks = ceil_div(p.m, 32) * p.l;
  if (gemv_tma_supported(p)) {
    constexpr size_t kTmaSmemBudget = 100 * 1024;
    constexpr int64_t kMaxSplit = 64;
    const bool many_ctas = blocks >= 4 * static_cast<int64_t>(sm_count);
    const int step_k = many_ctas ? 2048 : 1024;
    const int64_t steps = ceil_div(p.k, step_k);
    const int stages = many_ctas && steps >= 4 ? 4 : 2;
    const bool blocked = p.a.layout != ScaleLayout::plain;
    const size_t budget =
        std::max(kTmaSmemBudget, cuda::nvfp4::gemv_tma_smem_bytes(0, 1, stages, step_k, blocked) + 16384);
    auto smem = [&](int64_t s) { return cuda::nvfp4::gemv_tma_smem_bytes(p.k, static_cast<int>(s), stages, step_k, blocked); };
    int64_t s = 1;
    while (blocks * s < sm_count && s * 2 <= std::min(steps, kMaxSplit)) s *= 2;
    while (s < std::min(steps, kMaxSplit) && smem(s) > budget) ++s;
    if (smem(s) <= budget) {
      c.load = GemvLoad::tma;
      c.warps = 8;
      c.step_k = step_k;
      c.stages = stages;
      c.split_k = static_cast<int>(s);
      return c;
    }
  }
  c.warps = p.k >= 4096 ? 8 : 4;
  const int64_t chunks = ceil_div(p.k, 128);
  int64_t s = 1;
  while (blocks * s < sm_count) s *= 2;
  s = std::min<int64_t>(s, std::max<int64_t>(1, chunks / (2 * c.warps)));
  c.split_k = static_cast<int>(std::min<int64_t>(s, 16));
  return c;
}

namespace {

// Split-K for the one-CTA-per-SM tiles: within one wave, the largest split that still fits in it
// (a partial second wave costs a whole CTA time); beyond, pick_split rounds up to whole waves.
// Capped at 4 so the fixed-order reduction stays small; >= `min_ktiles` 64-k tiles per CTA.
int wave_split(int64_t tiles, int64_t ktiles, int sm_count, int64_t min_ktiles = 16) {
  if (tiles >= sm_count) return std::min(4, pick_split(tiles, ktiles, sm_count, 1, min_ktiles));
  int s = 1;
  while (s < 4 && tiles * (s + 1) <= sm_count && ktiles / (s + 1) >= min_ktiles) ++s;
  return s;
}

}  // namespace

// GEMM. M <= 64: 64-row mma.sync tiles. Else the register-operand tiles (fastest on all three
// issue shapes, H100): `128x128rs` with its split keeping >= 1536 k per CTA, or `128x64rs` (twice
// the tiles) where `128x128rs` would fill at most half the SMs or need a split above 2
// (128x7168x2048: 17.8 vs 21.8 us; 128x4096x7168: 25.6 vs 28.1 us).
TileConfig choose_gemm_config(const GemmProblem& p, int sm_count) {
  require_sm_count("choose_gemm_config", sm_count);
  TileConfig c;
  if (p.m <= 64) {
    c.tile = Tile::m64_n128;
    c.split_k = std::min(4, pick_split(ceil_div(p.n, 128) * p.l, p.k / 64, sm_count, 2, 16));
    return c;
  }
  const int64_t tiles = ceil_div(p.m, 128) * ceil_div(p.n, 128) * p.l;
  c.split_k = wave_split(tiles, p.k / 64, sm_count, 24);
  c.tile = Tile::m128_n128_rs;
  if (2 * tiles * c.split_k <= sm_count || c.split_k > 2) {
    const int64_t narrow = ceil_div(p.m, 128) * ceil_div(p.n, 64) * p.l;
    c.tile = Tile::m128_n64_rs;
    c.split_k = wave_split(narrow, p.k / 64, sm_count, 24);
  }
  return c;
}

// Dual GEMM. M <= 64: `64x64`. Else `128x128rs` (128 x 128 of both products per CTA) where its
// tiles fill at least half the SMs (512x4096x7168: 101 vs 157 us for the best older tile), else
// `128x64rs` (256x4096x7168: 58.7 vs 82.2 us). Stream-K over the SM count where unsplit
// `128x128rs` tiles leave a fifth of the SMs idle (512x3072x7168: 87.2 us at 128 CTAs vs 91.6
// unsplit); not where the tiles nearly fill the SMs (512x4096x7168: 104.1 vs 94.6 us).
TileConfig choose_dual_config(const DualGemmProblem& p, int sm_count) {
  require_sm_count("choose_dual_config", sm_count);
  TileConfig c;
  const int64_t rs_tiles = ceil_div(p.m, 128) * ceil_div(p.n, 128) * p.l;
  if (p.m <= 64) {
    c.tile = Tile::m64_n64;
    c.split_k = 1;
    return c;
  }
  c.tile = 2 * rs_tiles > sm_count ? Tile::m128_n128_rs : Tile::m128_n64_rs;
  const int64_t tiles = ceil_div(p.m, 128) * ceil_div(p.n, tile_n(c.tile)) * p.l;
  c.split_k = wave_split(tiles, p.k / 64, sm_count, 24);
  if (c.tile == Tile::m128_n128_rs && c.split_k == 1 && 5 * tiles <= 4 * sm_count) {
    // The largest CTA count down to 90% of the SMs that gives every CTA the same whole number of
    // stages (their ranges then start at few distinct offsets into a tile, so more CTAs read the
    // same activation box in step: 512x3072x7168 at 128 CTAs, 42 stages each, 87.2 us against
    // 89.4 at 132); else the SM count.
    const int64_t iters = tiles * (p.k / 128);
    c.stream_k = sm_count;
    for (int ctas = sm_count; 10 * ctas >= 9 * sm_count; --ctas)
      if (iters % ctas == 0) {
        c.stream_k = ctas;
        break;
      }
  }
  return c;
}

// The grouped rs grid's time, in units of one narrow CTA of K = 1, by list scheduling: CTAs start
// in launch order (wide_n's wide tiles first, then the narrow ones) on the first SM that is free,
// one per SM; a CTA costs its group's K, a wide one kWideCost times as much (fits the H100's times
// of the competition's grouped shapes: a wide CTA measured 1.65-1.71 narrow ones).
namespace {
constexpr double kWideCost = 1.7;
double grouped_rs_time(const GroupedGemmProblem& p, int wide_n, int sm_count) {
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (int i = 0; i < sm_count; ++i) free_at.push(0.0);
  double end = 0.0;
  auto run = [&](int64_t ctas, double cost) {
    for (int64_t i = 0; i < ctas; ++i) {
      const double t = free_at.top() + cost;
      free_at.pop();
      free_at.push(t);
      end = std::max(end, t);
    }
  };
  for (const auto& g : p.groups)
    run(ceil_div(g.m, 128) * cuda::nvfp4::group_wide_cols(static_cast<int>(g.n), wide_n), kWideCost * static_cast<double>(g.k));
  for (const auto& g : p.groups)
    run(ceil_div(g.m, 128) * cuda::nvfp4::group_narrow_cols(static_cast<int>(g.n), wide_n), static_cast<double>(g.k));
  return end;
}
}  // namespace

// Grouped. Mean m <= 48: `64x128`. Else the rs grid (6-22% ahead of every other tile on the four
// issue shapes): 256 weight rows per CTA halve the activations' traffic but a two-slab CTA takes
// ~1.7x as long, so wide_n is what the model above finishes first (ties to more wide tiles):
// 4096x7168 x 8 groups 136 us with wide_n = 12 vs 160 all-narrow; 7168x2048 x 8 all wide 94 vs
// 111; the two-group shapes all narrow. Grids of more than 8 waves of wide tiles stay all wide.
// Weight scales TMA cannot copy keep `128x128rs`, which falls back to `128x128wg`.
namespace {
TileConfig search_grouped_config(const GroupedGemmProblem& p, int sm_count) {
  int64_t sum_m = 0, tiles256 = 0;
  int max_wide = 0;
  bool tma_scales = true;
  for (const auto& g : p.groups) {
    sum_m += g.m;
    tiles256 += ceil_div(g.m, 128) * ceil_div(g.n, 256);
    max_wide = std::max(max_wide, static_cast<int>(ceil_div(g.n, 256)));
    tma_scales &= reinterpret_cast<uintptr_t>(g.b.scales) % 16 == 0;
  }
  const int64_t groups = std::max<size_t>(p.groups.size(), 1);
  TileConfig c;
  c.split_k = 1;
  if (sum_m / groups <= 48) {
    c.tile = Tile::m64_n128;
    return c;
  }
  c.tile = Tile::m128_n128_rs;
  if (!tma_scales) return c;
  int best = max_wide;
  if (tiles256 <= 8 * int64_t{sm_count}) {
    double best_time = grouped_rs_time(p, max_wide, sm_count);
    for (int w = max_wide - 1; w >= 0; --w) {
      const double t = grouped_rs_time(p, w, sm_count);
      if (t < best_time * (1.0 - 1e-9)) {
        best_time = t;
        best = w;
      }
    }
  }
  if (best > 0) {
    c.tile = Tile::m128_n256_rs;
    c.wide_n = best == max_wide ? -1 : best;
  }
  return c;
}
}  // namespace

// The search simulates the grid once per wide_n: ~130 us of host time for 8 groups of N = 7168 (H100
// host), more than the kernel. Its inputs are the groups' shapes, the SM count and whether TMA can
// copy each group's scales, and a serving loop repeats its shapes: the choices are memoised.
TileConfig choose_grouped_config(const GroupedGemmProblem& p, int sm_count) {
  require_sm_count("choose_grouped_config", sm_count);
  std::vector<int64_t> key{sm_count};
  key.reserve(1 + 4 * p.groups.size());
  for (const auto& g : p.groups)
    key.insert(key.end(), {g.m, g.n, g.k, reinterpret_cast<uintptr_t>(g.b.scales) % 16 == 0});
  static std::mutex mutex;
  static std::map<std::vector<int64_t>, TileConfig> chosen;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = chosen.find(key); it != chosen.end()) return it->second;
  if (chosen.size() >= 4096) chosen.clear();  // bounded: a workload of ever-new shapes searches each
  return chosen[key] = search_grouped_config(p, sm_count);
}

// ---- search candidates: the chosen config first, then every built tile at a few splits ----

namespace {

// Appends c unless an equal config is already listed (the chosen one often repeats a candidate).
template <class Cfg>
void add_unique(std::vector<Cfg>& v, const Cfg& c) {
  for (const Cfg& x : v)
    if (describe(x) == describe(c)) return;
  v.push_back(c);
}

// Splits worth timing: 1 always, larger ones while a CTA keeps >= 512 k.
bool split_fits(int s, int64_t k) { return s == 1 || s <= k / 512; }

bool tma_scales(const Operand& o) { return reinterpret_cast<uintptr_t>(o.scales) % 16 == 0; }

}  // namespace

std::vector<GemvConfig> gemv_candidates(const GemvProblem& p, int sm_count) {
  std::vector<GemvConfig> v{choose_gemv_config(p, sm_count)};
  for (int w : {4, 8})
    for (int s : {1, 2, 4, 8})
      if (s <= p.k / 128) add_unique(v, GemvConfig{w, s});
  if (gemv_tma_supported(p))
    for (const auto& [stages, step_k] : {std::pair{2, 1024}, std::pair{2, 2048}, std::pair{4, 2048}})
      for (int s : {1, 2})
        if (s <= p.k / step_k) add_unique(v, GemvConfig{8, s, GemvLoad::tma, stages, step_k});
  return v;
}

std::vector<TileConfig> gemm_candidates(const GemmProblem& p, int sm_count) {
  std::vector<TileConfig> v{choose_gemm_config(p, sm_count)};
  for (Tile t : {Tile::m64_n128, Tile::m128_n128_wgmma, Tile::m128_n128_rs, Tile::m128_n64_rs})
    for (int s : {1, 2, 3, 4, 6})
      if (split_fits(s, p.k)) add_unique(v, TileConfig{t, s});
  return v;
}

std::vector<TileConfig> dual_candidates(const DualGemmProblem& p, int sm_count) {
  std::vector<TileConfig> v{choose_dual_config(p, sm_count)};
  for (Tile t : {Tile::m64_n64, Tile::m128_n64_wgmma, Tile::m128_n128_rs, Tile::m128_n64_rs})
    for (int s : {1, 2, 3, 4})
      if (split_fits(s, p.k)) add_unique(v, TileConfig{t, s});
  if (tma_scales(p.b1) && tma_scales(p.b2)) add_unique(v, TileConfig{Tile::m128_n128_rs, 1, sm_count});
  return v;
}

std::vector<TileConfig> grouped_candidates(const GroupedGemmProblem& p, int sm_count) {
  std::vector<TileConfig> v{choose_grouped_config(p, sm_count)};
  bool tma = true;
  int64_t n = 0;
  for (const GemmProblem& g : p.groups) {
    tma &= tma_scales(g.b);
    n = std::max(n, g.n);
  }
  for (Tile t : {Tile::m64_n128, Tile::m128_n128_wgmma, Tile::m128_n128_rs}) add_unique(v, TileConfig{t, 1});
  if (tma) {
    add_unique(v, TileConfig{Tile::m128_n256_rs, 1});
    // Mixed widths: a quarter, half and three quarters of the widest group's columns wide.
    for (int q = 1; q <= 3; ++q)
      add_unique(v, TileConfig{Tile::m128_n256_rs, 1, 0, static_cast<int>(ceil_div(n, 256) * q / 4)});
  }
  return v;
}

}  // namespace swapffn::nvfp4

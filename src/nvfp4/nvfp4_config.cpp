// Kernel-configuration choice for the NVFP4 kernels: the one place that decides tiles and split-K
// from the problem and the SM count. The bench (`swapffn nvfp4 bench`) grid-searches around these
// choices and docs/NVFP4.md records what won; callers may pass any other valid config.
#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <string>
#include <vector>

#include "nvfp4/nvfp4_launch.hpp"
#include "swapffn/error.hpp"
#include "swapffn/nvfp4/nvfp4.hpp"

namespace swapffn::nvfp4 {

const char* to_string(ScaleLayout layout) {
  return layout == ScaleLayout::plain ? "plain" : "blocked_128x4";
}

const char* to_string(Tile t) {
  switch (t) {
    case Tile::m128_n128: return "128x128";
    case Tile::m128_n64: return "128x64";
    case Tile::m64_n128: return "64x128";
    case Tile::m64_n64: return "64x64";
    case Tile::m128_n128_wgmma: return "128x128wg";
    case Tile::m128_n64_wgmma: return "128x64wg";
    case Tile::m128_n128_ws: return "128x128ws";
    case Tile::m128_n64_ws: return "128x64ws";
    case Tile::m128_n128_wsr: return "128x128wsr";
    case Tile::m128_n64_wsr: return "128x64wsr";
    case Tile::m128_n128_ws2: return "128x128ws2";
    case Tile::m128_n64_ws2: return "128x64ws2";
    case Tile::m128_n128_wst: return "128x128wst";
    case Tile::m128_n64_wst: return "128x64wst";
    case Tile::m128_n128_wsta: return "128x128wsta";
    case Tile::m128_n64_wsta: return "128x64wsta";
    case Tile::m128_n128_wstc: return "128x128wstc";
    case Tile::m128_n64_wstc: return "128x64wstc";
    case Tile::m128_n128_rs: return "128x128rs";
    case Tile::m128_n256_rs: return "128x256rs";
    case Tile::m128_n64_rs: return "128x64rs";
  }
  return "?";
}

int tile_m(Tile t) { return (t == Tile::m64_n128 || t == Tile::m64_n64) ? 64 : 128; }
int tile_n(Tile t) {
  if (t == Tile::m128_n256_rs) return 256;
  return (t == Tile::m128_n128 || t == Tile::m64_n128 || t == Tile::m128_n128_wgmma || t == Tile::m128_n128_ws ||
          t == Tile::m128_n128_wsr || t == Tile::m128_n128_ws2 || t == Tile::m128_n128_wst ||
          t == Tile::m128_n128_wsta || t == Tile::m128_n128_wstc || t == Tile::m128_n128_rs)
             ? 128
             : 64;
}

std::string describe(const GemvConfig& c) {
  return "warps=" + std::to_string(c.warps) + " split_k=" + std::to_string(c.split_k) +
         (c.decode == GemvDecode::int8 ? " decode=int8" : " decode=mma") +
         (c.load == GemvLoad::tma ? " load=tma stages=" + std::to_string(c.stages) + " step_k=" + std::to_string(c.step_k)
                                   : std::string());
}
const char* to_string(Probe p) {
  switch (p) {
    case Probe::none: return "none";
    case Probe::stages: return "stages";
    case Probe::activations: return "activations";
    case Probe::weights: return "weights";
    case Probe::bulk_activations: return "bulk_activations";
    case Probe::ring: return "ring";
    case Probe::prepass: return "prepass";
    case Probe::launch: return "launch";
    case Probe::weight_ring: return "weight_ring";
  }
  return "?";
}

std::string describe(const TileConfig& c) {
  return std::string("tile=") + to_string(c.tile) + " split_k=" + std::to_string(c.split_k) +
         (c.stream_k > 0 ? " stream_k=" + std::to_string(c.stream_k) : std::string()) +
         (c.probe != Probe::none ? std::string(" probe=") + to_string(c.probe) : std::string()) +
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

// GEMV (int8 decode): 8 warps per 32-row CTA when K >= 4096, else 4, at most 4 CTAs per SM (the
// register limit); split K only while the CTAs do not fill the SMs once, by the smallest power of
// two that does, keeping >= 2 chunks per warp. Measured on the shapes (H100, commit
// 6fa5e45, docs/NVFP4.md tenth step): split 1 was the fastest on all three (7168x16384: 36.6 us
// against 38.3-45.5 for splits 2-8; the MMA decode had wanted split 4 to fill a wave of 4 CTAs per
// SM), 8 warps beat 4 at K = 16384 and 7168 (36.6 vs 42.9, 62.0 vs 63.4 us) and lost at K = 2048
// (23.3 vs 22.3 us).
//
// load=tma where the problem allows it (docs/NVFP4.md, eleventh step): 8 consumer warps; split K
// only while the CTAs do not fill the SMs once, and further only while b's shared-memory copy
// would keep a CTA above 100 KB (two CTAs per SM) or, for the 147 KB ring, above the ring + 16 KB. Ring shape, measured on the shapes
// (H100, commits b3e5547 and d044d22; every variant within 1.1x of the best): with few CTAs per SM
// (7168x16384: 224 CTAs) 2 stages of 1024 k are best (32.6 us; 2 x 2048: 33.5, 4 x 2048: 34.0);
// with several waves of CTAs wider steps win (4096x7168x8, 1024 CTAs: 4 x 2048 58.3 us against
// 60.8 for 2 x 1024; 7168x2048x4, 896 CTAs, one step per CTA: 2 x 2048 19.2 against 20.2), but 4
// stages only where a CTA has that many steps (4 x 2048 at K = 2048 held 147 KB for one step and
// took 25.8 us). Split 2 was slower everywhere (the CTAs already fill the SMs). A K so long that
// even split 64 (the API's limit) leaves b's copy over that budget takes the register path.
GemvConfig choose_gemv_config(const GemvProblem& p, int sm_count) {
  require_sm_count("choose_gemv_config", sm_count);
  GemvConfig c;
  c.decode = GemvDecode::int8;
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

// Split-K for the warp-specialised tiles (one CTA per SM). Measured on the H100 (docs/NVFP4.md):
// while the tiles fit in one wave, the best split is the largest that still fits in one wave
// (a second, partial wave costs a whole extra CTA time: GEMM 128x7168x16384 split 2 148 us, split
// 3 199 us); beyond one wave, pick_split rounds up to whole waves (dual 512x3072x7168: split 2,
// 200 us against 234 us unsplit). Capped at 4 so the fixed-order reduction stays small. A split
// keeps at least `min_ktiles` 64-k tiles per CTA.
int ws_split(int64_t tiles, int64_t ktiles, int sm_count, int64_t min_ktiles = 16) {
  if (tiles >= sm_count) return std::min(4, pick_split(tiles, ktiles, sm_count, 1, min_ktiles));
  int s = 1;
  while (s < 4 && tiles * (s + 1) <= sm_count && ktiles / (s + 1) >= min_ktiles) ++s;
  return s;
}

}  // namespace

// GEMM: M is 128 in the shapes, so output tiles are few and 128x128 tiles keep the dequant
// cost per MMA lowest (each dequantized element feeds 128 columns). The warp-specialised tile with
// TMA loads into a raw ring (`128x128wst`: one 512-thread CTA per SM, dequant warpgroups feed wgmma
// warpgroups through an mbarrier ring) was fastest on all three shapes, 9-24% ahead of the
// register-load `128x128ws` (itself 1-4% ahead of the shared-producer wgmma tile), at the same
// split; `ws2` and `wsr` were slower. With A dequantized once by a pre-pass (`128x128wsta`, the
// GEMM launched as its programmatic dependent) it is 9-19% faster again on all three shapes at
// the same split. `128x128wstc` (the consumer warps convert half of B) was 0-4.5% faster than
// `wsta` on the three shapes in both runs of commits 4c54ecc and 118aa53 (91.9 vs 96.2, 38.7 vs
// 39.8, 28.0 vs 28.2 us), so it is the default. Rejected: 128x64 tiles (twice the A dequantization
// per output; slower at every split); `wsta` only from 64 k-tiles per CTA (before the programmatic launch, the pre-pass and
// the launch gap cancelled the gain on the short-K shapes).
// Seventh session: the register-operand tile `128x128rs` (B converted straight into wgmma's
// register fragment, operands swapped) beat `wstc` on all three shapes at their best splits
// (H100, commit 6986437: 75.9 vs 93.5, 35.2 vs 39.2, 23.6 vs 28.0 us), so it is the default when
// the scales allow TMA (else the launcher runs `128x128ws`). Its split keeps >= 1536 k per CTA:
// at K = 2048 split 2 took 25.8 us against 23.6 unsplit, while 128x4096x7168 wants split 4
// (1792 k per CTA: 35.2 us, split 3 37.0).
// Eighth session: `128x64rs` (64 weight rows, the two consumer warpgroups splitting K) where
// `128x128rs` at its split would fill at most half the SMs (H100, commit f5032cd: 128x7168x2048,
// 56 tiles unsplit: 17.8 against 21.8 us); above that `128x128rs` stays (128x4096x7168: 28.4 at
// split 4 against 27.5 for `128x64rs` at split 2, within 3.5%; 128x7168x16384: 67.4 at split 2
// against 83.5 for `128x64rs` unsplit on the same 112 SMs).
// Twelfth session: with the earlier stage release (docs/NVFP4.md, twenty-fifth step) `128x64rs`,
// whose warpgroups take alternate stages, gained most; it now also wins where `128x128rs` would
// need a split above 2 (H100, commit a051023, two runs: 128x4096x7168 `128x64rs` split 2 25.6-25.9
// us against 28.1-28.6 for `128x128rs` split 4), and ties at split 2 (128x7168x16384: 65.2 unsplit
// against 64.7), where `128x128rs` stays.
TileConfig choose_gemm_config(const GemmProblem& p, int sm_count) {
  require_sm_count("choose_gemm_config", sm_count);
  TileConfig c;
  if (p.m <= 64) {
    c.tile = Tile::m64_n128;
    c.split_k = std::min(4, pick_split(ceil_div(p.n, 128) * p.l, p.k / 64, sm_count, 2, 16));
    return c;
  }
  const int64_t tiles = ceil_div(p.m, 128) * ceil_div(p.n, 128) * p.l;
  c.split_k = ws_split(tiles, p.k / 64, sm_count, 24);
  c.tile = Tile::m128_n128_rs;
  if (2 * tiles * c.split_k <= sm_count || c.split_k > 2) {
    const int64_t narrow = ceil_div(p.m, 128) * ceil_div(p.n, 64) * p.l;
    c.tile = Tile::m128_n64_rs;
    c.split_k = ws_split(narrow, p.k / 64, sm_count, 24);
  }
  return c;
}

// Dual GEMM: 128 rows x 64 columns of each product (the A tile is shared, so a CTA does the MMA
// work of a 128x128 GEMM tile). The warp-specialised TMA tile `128x64wst` was fastest on all four
// shapes, 11-14% ahead of the register-load `128x64ws` at the same split; `128x64wsta` (A
// dequantized once, only B1/B2 per CTA) is 13-20% ahead of `wst` on all four.
// Seventh session: the register-operand tile `128x128rs` (each consumer warpgroup converts 64 rows
// of B1 and of B2 into wgmma's register operand; 128 x 128 of both products per CTA) wins where
// its tiles fill at least half the SMs without split-K (H100, commit 6f8249a: 512x4096x7168, 128
// tiles, 101.3 vs 157.0 us; 512x3072x7168, 96 tiles, 97.9 vs 147.0) and not below (256x4096x7168,
// 64 tiles: 80.9 at split 2 vs 80.5; 256x3072x4096, 48 tiles: 59.3 vs 50.8; its split CTAs run
// slower per k-tile than unsplit ones, docs/NVFP4.md).
// Eighth session: below that, `128x64rs` (64 rows of each product, one operand per consumer
// warpgroup) gives twice the tiles and beats everything else unsplit (H100, commit 8470354:
// 256x4096x7168, 128 tiles, 58.7 us against 82.2 for `128x128rs` split 2 and 82.4 for `wsta`;
// 256x3072x4096, 96 tiles, 36.9 against 58.6 and 51.2); at M = 512 its 192-256 tiles take two
// waves (106.2 / 108.8 against 97.5 / 97.6 for `128x128rs`). Its split follows the same rule.
// Thirteenth session: stream-K (`stream_k` = the SM count: every SM takes an equal share of all
// tiles' stages) where the unsplit `128x128rs` tiles leave at least a fifth of the SMs idle (H100,
// commit c704fd5: 512x3072x7168, 96 tiles, 89.4 us against 91.6-94.0 unsplit; 128 CTAs 87.2).
// Not where the tiles nearly fill the SMs: 512x4096x7168, 128 tiles, took 104.1 us at 132 CTAs
// against 94.6 unsplit (most tiles split in two for 3% less work per CTA). Rejected for the GEMM:
// 128x7168x16384 65.5 us at 132 CTAs against 65.2 for `128x128rs` split 2, 128x7168x2048 21.5
// against 16.7 for `128x64rs` (docs/NVFP4.md, twenty-seventh step).
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
  c.split_k = ws_split(tiles, p.k / 64, sm_count, 24);
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
// one per SM; a CTA costs its group's K, a wide one kWideCost times as much. The model fits the
// H100's times of the 8-group shapes with both uniform grids (docs/NVFP4.md, thirty-fifth
// step: a wide CTA measured 1.65-1.71 narrow ones; the two-group shapes, one short wave, 1.45-1.62).
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

// Grouped: 128x128 tiles even with m_i well below 128 (the padding rows cost MMA work, which is
// not the bottleneck). The register-operand tiles (one CTA per SM, every copy by TMA from the
// group's maps) are the default: the shared-producer wgmma tile converts both operands per CTA, and
// the one-CTA warp-specialised tiles measured 6-22% slower than `128x128rs` on the four shapes.
// 64-row mma.sync tiles only when the groups are tiny.
// The rs grids are bound by the activations' traffic to the SMs (every 128-row activation box is
// re-read by each weight tile of its group), which 256 weight rows per CTA halve, but a two-slab
// CTA takes ~1.7x as long, so fewer, longer CTAs lose where the last wave would be mostly empty
// (H100, sixteenth session: 7168x2048 with 8 groups 94.1-95.0 us with `128x256rs` against
// 110.1-111.4 with `128x128rs`; 4096x7168 171.8 against 159.6-160.3; the two-group shapes 55.0 /
// 30.1 against 34.0 / 20.8). So wide_n, the wide column tiles per group, is the one whose grid the
// list-scheduling model above finishes first; ties go to more wide tiles (less traffic). It replaced
// the sixteenth session's rule (`128x256rs` wherever its tiles fill the SMs twice), which picks the
// same uniform grids where those win. Grids of more than 8 waves of wide tiles stay all wide (their
// last wave is a small part of the time; the search would cost milliseconds). Weight scales TMA
// cannot copy keep `128x128rs`, which falls back to a tile of the same shape (the two-slab tile has
// none).
TileConfig choose_grouped_config(const GroupedGemmProblem& p, int sm_count) {
  require_sm_count("choose_grouped_config", sm_count);
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

}  // namespace swapffn::nvfp4

#include "cuda/fused/fused_config.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "cuda/kernels/sm90_bf16_gemm_residual_cutlass.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {

// Why these defaults (H200, D = 1024, F = 4096; numbers in docs/PERF.md):
// - up: bn 256 x 4 stages, no multicast. At B = 1, M = 512 gives 4 x 32 = 128 CTAs for 132 SMs, one
//   wave; each W13 tile serves 128 rows x 128 SwiGLU outputs. 14.4 us at M = 512 against 15.6 us for
//   cuBLAS's gate/up GEMM alone (which then still needs a SwiGLU pass; H100). bn 128 (two waves,
//   twice the A traffic) was slower at every B; multicast of W13 over 2 M tiles gained nothing (each
//   SM still ingests the same bytes; the per-SM L2->SM path, not L2 output, is the limit here).
//   Once the tiles take more than one wave the persistent form (_p) is the default: with the staged
//   epilogue it runs M = 8192 in 200 us against 212 (the next tile's loads overlap the epilogue),
//   -1.4..-2.5% per step at B = 4..64; at M = 512 (one wave) it is slower alone (15.4 vs 14.4 us).
//   Rejected: two CTAs per SM with bn 128 (_o2): 237 us at M = 8192, 15.8 at M = 512 (H100).
//   Rejected: 144-, 176- and 192-wide persistent tiles (cuBLAS's fastest gate/up tiles at large M):
//   2-5% slower than bn 256 at M = 8192 and 32768 (15% more operand bytes per MMA); bn 176 stays
//   selectable. From ~60 rows per SM the persistent walk also multicasts W13 to a pair of M tiles
//   (mc2_p): +3.8% alone at M = 8192, but -1..-2% per step at B >= 16 (from_tune_file says why).
//   Rejected: 256 x 192 tiles (bm256_bn192_st3_sk1_mc2_p, 22% fewer operand bytes per MMA): 8-13%
//   slower alone at M = 8192 and 32768, +4% per step at B = 16 and 64, level at 32 (H100,
//   twenty-seventh session); selectable.
// - down: cuBLASLt. Our split-K kernel (bn 64, 2-CTA cluster) runs M = 512 in 14.9 us against
//   12.3-13.9 for cuBLASLt's pinned split-K-free algorithm (H100, eleventh session), and our kernels
//   with cuBLAS's bits (sk1: bm64 at M = 512 14.3 us, bn 256 persistent at M = 8192 108-121 against
//   103-109) still lose inside the step (0.57 / 5.98 ms at B = 1 / 16 against 0.52 / 5.76);
//   bn 128 split 2 is 18.6 us (64 CTAs). Multicast of u over 2 N tiles made the 4-CTA clusters
//   slower (23.6 us).
//   Split 4 (down=sk4: 128 x 128 tiles while one wave of 4-CTA clusters covers the tiles, else
//   128 x 256; tenth session, docs/PERF.md) halves the operand bytes per SM at B = 1 but measured
//   24 us at M = 512 (only 30 four-CTA clusters resident per wave on an H100) and 241 us at 8192.
//   The sm90 variants stay selectable (kernel config down=<variant>|sk2|sk4) for tuning; whichever is
//   chosen keeps its split at every batch size (the split fixes the summation order: batch invariance;
//   only the tile width may follow the batch size).
//   CUTLASS's sm90 kernels (down=pp_64x64_c1x2|co_128x128_c2x1|co_128x256_c2x1; eighteenth session)
//   give cuBLAS's bits and take part in the PDL chain, but run M = 512 in 14.9 us against nvjet's
//   13.2-13.4 (step at B = 1 0.565 against 0.53-0.54 ms) and are level with cuBLAS at M = 8192
//   (107-110 us; step at B = 16 and 64 within +-2%). Selectable, not a default: switching between
//   them and cuBLAS by batch size would mix two numerics classes.
//   Rejected: split-K through a global workspace (extra [M, D] fp32 round trip and a second pass),
//   and atomics (order-dependent, not deterministic). Rejected (thirty-second session, branch
//   global-split): split 4 whose ranks meet in an L2 workspace inside one kernel (one wave at B = 1,
//   no cluster), with a serial form for larger batches: 11.9 us at M = 512, level with cuBLAS alone,
//   +7..+12% per step at B = 1..16 (docs/PERF.md).
// - router: the folded event router (folded_event_router.hpp: the router projection folded into
//   five vectors at load, so an event's head is five dot products per row and the exchange; no
//   router_w copy, no MMAs; docs/PERF.md, thirtieth session, for what it measured against the MMA
//   router). Selectable: the MMA event router ("event": B = 1 0.626 ms per step against 0.665 with
//   the cuBLAS chain on the H200, fourth session; each of its CTAs copies all of router_w, 128 KB,
//   into shared memory) and the cuBLAS chain ("cublas", also the fallback for d_model > 1024). The
//   router and the down GEMM's implementation set the floating-point summation order, so they
//   must be the same at every batch size (batch invariance); only tile shapes, stages and
//   multicast, which leave each output's summation order alone, may vary with B.
// - row groups: automatic, two from ~60 rows per SM (select_fused_config says why and what the
//   other batch sizes measured). Rejected as a B = 1 default: slower.
// - l2_weights: off. Rejected as a default (twenty-first session, H100): a persisting access-policy
//   window over W13 and W2 was slower at every batch size and hit fraction (B = 1 +1..+3%, B = 16
//   +2.5..+5%, B = 64 +2..+3%), and did not keep the weights: at B = 1 the dual GEMM still read
//   12.6-12.8 MB per launch from DRAM (13.8 without). The misses cost B = 1 little (in the step the
//   GEMMs take their warm-L2 times).
namespace {

// More groups than this only cut the rows finer than the GEMM tiles can use at any batch size.
constexpr int kMaxRowGroups = 8;

const std::string& parse_router(const std::string& val) {
  SWAPFFN_REQUIRE(val == "cublas" || val == "event" || val == "folded",
                  "kernel config router must be folded, event or cublas, got '" + val + "'");
  return val;
}

// The whole of `val` as a number of type T, or nothing (empty, trailing characters, out of range).
template <class T>
std::optional<T> whole_number(const std::string& val) {
  size_t used = 0;
  T v{};
  try {
    if constexpr (std::is_same_v<T, double>)
      v = std::stod(val, &used);
    else if constexpr (std::is_same_v<T, int>)
      v = std::stoi(val, &used);
    else
      v = std::stoll(val, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != val.size()) return std::nullopt;
  return v;
}

int parse_row_groups(const std::string& val) {
  if (val == "auto") return 0;
  const std::optional<int> v = whole_number<int>(val);
  SWAPFFN_REQUIRE(v && *v >= 1 && *v <= kMaxRowGroups,
                  "kernel config groups must be auto or a group count from 1 to " + std::to_string(kMaxRowGroups) +
                      ", got '" + val + "'");
  return *v;
}

double parse_l2_weights(const std::string& val) {
  const std::optional<double> v = whole_number<double>(val);
  SWAPFFN_REQUIRE(v && *v >= 0 && *v <= 1,
                  "kernel config l2_weights must be a fraction from 0 (no window) to 1, got '" + val + "'");
  return *v;
}

int64_t parse_row_chunk(const std::string& val) {
  const std::optional<int64_t> v = whole_number<int64_t>(val);
  SWAPFFN_REQUIRE(v && *v >= 0, "kernel config chunk must be a row count >= 0 (0: no chunks), got '" + val + "'");
  return *v;
}

// Our down GEMM with split-K `split`, its tile width chosen for `rows`: the narrow tile while one wave
// of its split clusters (as many as the GPU holds resident at once) covers the tiles, the wide one
// (half the operand bytes per output) beyond. Both sum every output in the same order.
GemmVariant down_for_split(int split, int64_t rows, int64_t d_model) {
  SWAPFFN_REQUIRE(split == 2 || split == 4, "kernel config down=sk<N> takes N = 2 or 4, got " + std::to_string(split));
  const GpuInfo gpu = query_gpu();
  const GemmVariant narrow = split == 2 ? GemmVariant{64, 6, 2, 1} : GemmVariant{128, 4, 4, 1};
  const GemmVariant wide = split == 2 ? GemmVariant{128, 4, 2, 1} : GemmVariant{256, 4, 4, 1};
  const int64_t clusters = (rows + 127) / 128 * (d_model / narrow.bn);
  return !gpu.present || clusters <= down_gemm_clusters_per_wave(narrow) ? narrow : wide;
}

void set_down(FusedKernelConfig& k, const std::string& val, int64_t rows, int64_t d_model) {
  k.down_cublas = val == "cublas";
  k.down_cutlass = is_cutlass_down_variant(val) ? val : "";
  if (k.down_cublas || !k.down_cutlass.empty()) return;
  if (val.size() > 2 && val.compare(0, 2, "sk") == 0 && val.find('_') == std::string::npos) {
    const std::optional<int> split = whole_number<int>(val.substr(2));
    SWAPFFN_REQUIRE(split.has_value(), "kernel config down=" + val + ": expected cublas, sk<N> or a variant name");
    k.down = down_for_split(*split, rows, d_model);
    return;
  }
  std::string names;
  for (const auto& v : down_gemm_variants()) names += (names.empty() ? "" : ", ") + v.name();
  for (const auto& v : cutlass_down_variants()) names += ", " + v;
  bool compiled = false;
  try {
    k.down = parse_gemm_variant(val);
    for (const auto& v : down_gemm_variants()) compiled = compiled || v == k.down;
  } catch (const Error&) {
    compiled = false;
  }
  SWAPFFN_REQUIRE(compiled, "kernel config down=" + val + ": no such down GEMM variant is compiled (cublas, sk2, sk4, " +
                                names + ")");
}

// A dual GEMM variant by name, refused unless it is compiled (an unknown one would otherwise only
// fail at its first launch, inside the step's graph capture).
GemmVariant parse_up(const std::string& val) {
  std::string names;
  bool compiled = false;
  for (const auto& v : dual_gemm_variants()) names += (names.empty() ? "" : ", ") + v.name();
  GemmVariant up;
  try {
    up = parse_gemm_variant(val);
    for (const auto& v : dual_gemm_variants()) compiled = compiled || v == up;
  } catch (const Error&) {
    compiled = false;
  }
  SWAPFFN_REQUIRE(compiled, "kernel config up=" + val + ": no such dual GEMM variant is compiled (" + names + ")");
  return up;
}

void apply_override(FusedKernelConfig& k, const std::string& spec, int64_t rows, int64_t d_model) {
  size_t pos = 0;
  while (pos < spec.size()) {
    const size_t end = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, end - pos);
    const size_t eq = item.find('=');
    SWAPFFN_REQUIRE(eq != std::string::npos, "kernel config item '" + item + "' is not key=value");
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    if (key == "up") {
      k.up = parse_up(val);
    } else if (key == "down") {
      set_down(k, val, rows, d_model);
    } else if (key == "router") {
      k.router = parse_router(val);
    } else if (key == "router_grid") {
      k.router_grid = parse_router_grid(val);
    } else if (key == "chunk") {
      k.row_chunk = parse_row_chunk(val);
    } else if (key == "groups") {
      k.row_groups = parse_row_groups(val);
    } else if (key == "pdl") {
      SWAPFFN_REQUIRE(val == "0" || val == "1", "kernel config pdl must be 0 or 1, got '" + val + "'");
      k.pdl = val == "1";
    } else if (key == "l2_weights") {
      k.l2_weights = parse_l2_weights(val);
    } else {
      SWAPFFN_FAIL("unknown kernel config key '" + key +
                   "' (known: up, down, router, router_grid, chunk, groups, pdl, l2_weights)");
    }
    pos = end + 1;
  }
}

// A field of a tuning-cache object: its value, `fallback` when absent, or an error naming the field
// when it is absent without a fallback or of the wrong JSON type (not nlohmann's bare type error).
template <class T>
T cache_field(const nlohmann::json& obj, const std::string& key, const std::optional<T>& fallback, const std::string& where) {
  if (!obj.is_object()) SWAPFFN_FAIL(where + " is not a JSON object");
  if (!obj.contains(key)) {
    SWAPFFN_REQUIRE(fallback.has_value(), where + " has no field '" + key + "'");
    return *fallback;
  }
  try {
    return obj.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    SWAPFFN_FAIL(where + ": field '" + key + "' has the wrong type (" + obj.at(key).dump() + ")");
  }
}

FusedKernelConfig from_tune_file(const Config& cfg, int64_t batch, const std::string& tune_file) {
  FusedKernelConfig k;
  k.router = cfg.d_model <= 1024 ? "folded" : "cublas";
  // The persistent dual GEMM once its tiles take more than one wave (B >= 2 on 132 SMs), with its
  // W13 tiles multicast to a pair of M tiles from ~60 rows per SM (B >= 16): -1.1 / -1.7 / -1.4% per
  // step at B = 16 / 32 / 64 on average in four runs, every run faster (H100, twentieth session),
  // though alone it is 4% slower at M = 8192 (in the step L2 also serves the router and the down
  // GEMM, and the multicast halves the dual GEMM's share). Below, not measured beyond level at B = 4.
  const GpuInfo gpu = query_gpu();
  const int64_t rows = batch * cfg.core_count;
  const int64_t up_tiles = (rows + 127) / 128 * ((2 * cfg.d_ff + k.up.bn - 1) / k.up.bn);
  k.up.persistent = gpu.present && up_tiles > gpu.sm_count;
  k.up.multicast = k.up.persistent && rows >= 60 * int64_t{gpu.sm_count} ? 2 : 1;
  if (tune_file.empty()) return k;
  std::ifstream in(tune_file);
  SWAPFFN_REQUIRE(in.good(), "cannot open tuning cache " + tune_file);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    SWAPFFN_FAIL("tuning cache " + tune_file + " is not valid JSON: " + e.what());
  }
  const std::string where = "tuning cache " + tune_file;
  if (cache_field<std::string>(j, "device", std::string(), where) != gpu.name ||
      cache_field<int64_t>(j, "d_model", int64_t{0}, where) != cfg.d_model ||
      cache_field<int64_t>(j, "d_ff", int64_t{0}, where) != cfg.d_ff)
    return k;  // tuned for another GPU or model shape: the defaults are the honest choice
  const auto entries = cache_field<nlohmann::json>(j, "entries", std::nullopt, where);
  SWAPFFN_REQUIRE(entries.is_array(), where + ": field 'entries' is not an array");
  // The entry for the largest tuned batch not above `batch` (tuned batches are sparse: 1, 4, 16, 64).
  int64_t best = -1;
  for (size_t i = 0; i < entries.size(); ++i) {
    const nlohmann::json& e = entries[i];
    const std::string at = where + ", entry " + std::to_string(i);
    const int64_t b = cache_field<int64_t>(e, "batch", std::nullopt, at);
    if (b > batch || b <= best) continue;
    best = b;
    const std::string up = cache_field<std::string>(e, "up", std::nullopt, at);
    const std::string down = cache_field<std::string>(e, "down", std::nullopt, at);
    const std::string router = cache_field<std::string>(e, "router", k.router, at);
    const std::string grid = cache_field<std::string>(e, "router_grid", std::string("auto"), at);
    const int64_t chunk = cache_field<int64_t>(e, "chunk", int64_t{0}, at);
    // Absent: automatic (a cache written before row groups); present: a count.
    const std::string groups = e.contains("groups") ? std::to_string(cache_field<int>(e, "groups", std::nullopt, at)) : "auto";
    try {
      k.up = parse_up(up);
      set_down(k, down, batch * cfg.core_count, cfg.d_model);
      k.router = parse_router(router);
      k.router_grid = parse_router_grid(grid);
      k.row_chunk = parse_row_chunk(std::to_string(chunk));
      k.row_groups = parse_row_groups(groups);
    } catch (const Error& err) {
      SWAPFFN_FAIL(at + ": " + err.what());
    }
  }
  return k;
}

}  // namespace

FusedKernelConfig select_fused_config(const Config& cfg, int64_t batch, const std::string& tune_file,
                                      const std::string& kernel_config) {
  std::string file = tune_file;
  if (const char* env = std::getenv("SWAPFFN_TUNE_FILE"); file.empty() && env) file = env;
  FusedKernelConfig k = from_tune_file(cfg, batch, file);
  apply_override(k, kernel_config, batch * cfg.core_count, cfg.d_model);
  // What fixes the summation order must not change with the batch size (batch invariance).
  FusedKernelConfig one = from_tune_file(cfg, 1, file);
  apply_override(one, kernel_config, cfg.core_count, cfg.d_model);
  const auto numerics = [](const FusedKernelConfig& c) {
    return c.router + "/" + down_numerics(c.down_cublas ? "cublas" : c.down_cutlass.empty() ? c.down.name() : c.down_cutlass);
  };
  SWAPFFN_REQUIRE(numerics(k) == numerics(one),
                  "fused: router and down-GEMM implementation must be the same at every batch size (batch "
                  "invariance); batch " + std::to_string(batch) + " would use " + numerics(k) + ", batch 1 " +
                      numerics(one) + " (tuning cache '" + file + "')");
  SWAPFFN_REQUIRE(k.down_cublas || !k.down_cutlass.empty() || down_variant_fits(k.down, cfg.d_model, cfg.d_ff),
                  "fused: down GEMM " + k.down.name() + " needs d_ff a multiple of " + std::to_string(64 * k.down.split_k) +
                      " and d_model a multiple of " + std::to_string(k.down.bn * k.down.multicast) + " (d_ff = " +
                      std::to_string(cfg.d_ff) + ", d_model = " + std::to_string(cfg.d_model) + ")");
  if (k.row_groups == 0) {
    // Two row groups from ~60 rows per SM (B >= 16 at the defaults on 132 SMs): one group's
    // router and RMSNorms then run under the other group's GEMMs. Nineteenth session, against one
    // group in the same runs: B = 64 -3..-5% (H100), -0.4..-1.9% (H200); B = 32 -1..-3% (H100),
    // -0.4..-1.7% (H200). B = 16 with the folded router (thirtieth session): -4.5 / -4.7% on the
    // H100, -0.2% on the H200 (with the MMA router it had been -1.9% and +1%, so B = 16 had kept
    // one group). Slower below: B = 8 +5%, B = 4 +13%, B = 1 +26% (the groups' one-wave GEMMs run
    // side by side on half the SMs each, so nothing is hidden, and cuBLAS's kernels on half the
    // rows lose in that arrangement; with CUTLASS's down GEMM, level). `tune` can pick per device.
    const GpuInfo gpu = query_gpu();
    k.row_groups = k.router != "cublas" && gpu.present && batch * cfg.core_count >= 60 * int64_t{gpu.sm_count} ? 2 : 1;
  }
  SWAPFFN_REQUIRE(k.row_groups == 1 || k.router != "cublas",
                  "fused: groups=" + std::to_string(k.row_groups) + " needs router=folded or event (the cublas "
                  "router's GEMM runs over all rows at once)");
  SWAPFFN_REQUIRE(k.router_grid == RouterGrid::automatic || k.router == "event",
                  "fused: router_grid=" + to_string(k.router_grid) + " needs router=event (the " + k.router +
                      " router has no CTA grid to choose)");
  return k;
}

std::vector<std::pair<int64_t, int64_t>> row_group_ranges(int64_t rows, int groups) {
  SWAPFFN_REQUIRE(rows >= 0 && groups >= 1, "row groups: " + std::to_string(rows) + " rows in " +
                                                std::to_string(groups) + " groups");
  const int64_t blocks = (rows + 63) / 64, per = (blocks + groups - 1) / groups * 64;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t r0 = 0; r0 < rows; r0 += per) out.emplace_back(r0, std::min(per, rows - r0));
  return out;
}

std::string down_numerics(const std::string& down) {
  if (down == "cublas") return down;
  if (is_cutlass_down_variant(down)) return "sk1";
  if (down.size() > 2 && down.compare(0, 2, "sk") == 0 && down.find('_') == std::string::npos) return down;
  return "sk" + std::to_string(parse_gemm_variant(down).split_k);
}

LeftOut parse_leave_out(const std::string& list) {
  LeftOut out;
  size_t pos = 0;
  while (pos < list.size()) {
    const size_t end = std::min(list.find('+', pos), list.size());
    const std::string kind = list.substr(pos, end - pos);
    const std::pair<const char*, bool LeftOut::*> kinds[] = {{"film", &LeftOut::film},       {"router", &LeftOut::router},
                                                             {"dual", &LeftOut::dual},       {"down", &LeftOut::down},
                                                             {"rmsnorm", &LeftOut::rmsnorm}, {"collapse", &LeftOut::collapse}};
    bool known = false;
    for (const auto& [name, flag] : kinds)
      if (kind == name) {
        out.*flag = true;
        known = true;
      }
    SWAPFFN_REQUIRE(known, "leave_out: unknown kind of kernel '" + kind +
                               "' (known: film, router, dual, down, rmsnorm, collapse; joined by '+')");
    pos = end + 1;
  }
  return out;
}

GemmVariant parse_gemm_variant(const std::string& name) {
  GemmVariant v;
  std::string base = name;
  const auto strip = [&](const std::string& suffix) {
    if (base.size() <= suffix.size() || base.compare(base.size() - suffix.size(), suffix.size(), suffix) != 0)
      return false;
    base.resize(base.size() - suffix.size());
    return true;
  };
  if (strip("_o2")) v.ctas_per_sm = 2;
  if (strip("_p")) v.persistent = true;
  // Tile rows other than the default 128 are named (the kernels' other row counts).
  for (const int bm : {64, 256}) {
    const std::string prefix = "bm" + std::to_string(bm) + "_";
    if (base.compare(0, prefix.size(), prefix) == 0) {
      v.bm = bm;
      base.erase(0, prefix.size());
    }
  }
  char tail = 0;
  if (std::sscanf(base.c_str(), "bn%d_st%d_sk%d_mc%d%c", &v.bn, &v.stages, &v.split_k, &v.multicast, &tail) != 4)
    SWAPFFN_FAIL("bad GEMM variant name '" + name +
                 "' (expected [bm64_|bm256_]bn<N>_st<S>_sk<K>_mc<C>, optionally _p or _o2)");
  return v;
}

void check_fused_supports(const Config& cfg) {
  const auto need = [](bool ok, const std::string& what) {
    SWAPFFN_REQUIRE(ok, "backend 'fused' cannot run this config: " + what + " (use backend 'unfused')");
  };
  need(cfg.d_model % 128 == 0, "d_model = " + std::to_string(cfg.d_model) + " is not a multiple of 128");
  // d_ff: the down GEMM's K in whole 64-k steps (the dual GEMM only needs whole 8-row W1/W3 pairs).
  need(cfg.d_ff % 64 == 0, "d_ff = " + std::to_string(cfg.d_ff) + " is not a multiple of 64");
  need(cfg.d_router % 8 == 0, "d_router = " + std::to_string(cfg.d_router) + " is not a multiple of 8");
  need(cfg.d_model <= 16384 && cfg.d_ff <= 65536, "d_model/d_ff too large for 32-bit row offsets");
}

}  // namespace swapffn::cuda

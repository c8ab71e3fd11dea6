// The fused backend's kernel-configuration choice (src/cuda/fused/fused_config.cpp): variant names,
// overrides, the tuning cache, and the batch-invariance rule that options changing the summation
// order (router, down-GEMM implementation and split) are the same at every batch size. Host logic
// of the CUDA build: these tests need no GPU and run in CI.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/fused/fused_config.hpp"
#include "cuda/kernels/sm90_bf16_dual_gemm_swiglu.hpp"
#include "swapffn/device.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/error.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::cuda {
namespace {

std::string write_cache(const std::string& name, const std::string& entries, const std::string& device) {
  const auto path = std::filesystem::temp_directory_path() / ("swapffn_tune_" + name + ".json");
  std::ofstream(path) << R"({"device": ")" << device << R"(", "d_model": 1024, "d_ff": 4096, "entries": [)" << entries
                      << "]}";
  return path.string();
}

std::string this_device() { return query_gpu().name; }  // "" without a GPU: still a consistent key

TEST(FusedConfig, VariantNamesRoundTripAndBadNamesAreRefused) {
  for (const auto& v : {GemmVariant{256, 4, 1, 1}, GemmVariant{64, 6, 2, 2}, GemmVariant{256, 4, 1, 1, true},
                      GemmVariant{128, 3, 1, 1, false, 2}, GemmVariant{64, 12, 1, 2, false, 1, 64},
                      GemmVariant{192, 3, 1, 2, true, 1, 256}})
    EXPECT_EQ(parse_gemm_variant(v.name()), v) << v.name();
  EXPECT_TRUE(parse_gemm_variant("bn256_st4_sk1_mc1_p").persistent);
  EXPECT_EQ(parse_gemm_variant("bn128_st3_sk1_mc1_o2").ctas_per_sm, 2);
  EXPECT_EQ(parse_gemm_variant("bm64_bn64_st12_sk1_mc2").bm, 64);
  EXPECT_EQ(parse_gemm_variant("bm256_bn192_st3_sk1_mc1_p").bm, 256);
  for (const char* bad : {"bn256_st4_sk1", "bn256_st4_sk1_mc1x", "bn256_st4_sk1_mc1_q", "bn256_st4_sk1_mc1_p_p", "_p", "bn128_st3_sk1_mc1_o3", "_o2", "bm64_", "bm256_", "bm32_bn64_st4_sk1_mc1",
                          "cublas", ""})
    EXPECT_THROW(parse_gemm_variant(bad), Error) << bad;
}

TEST(FusedConfig, DefaultsAndOverrides) {
  const Config cfg = Config::preset("default");
  const FusedKernelConfig d = select_fused_config(cfg, 1, "", "");
  EXPECT_EQ(d.router, "folded");
  EXPECT_TRUE(d.down_cublas);
  // The dual GEMM goes persistent once its 128 x 256 tiles take more than one wave of SMs.
  const GpuInfo gpu = query_gpu();
  EXPECT_EQ(d.up.persistent, gpu.present && 4 * 32 > gpu.sm_count);  // B = 1: 512 rows, 2F = 8192
  EXPECT_EQ(select_fused_config(cfg, 16, "", "").up.persistent, gpu.present && 64 * 32 > gpu.sm_count);
  // ... and multicasts its W13 tiles to pairs of M tiles from ~60 rows per SM (B = 16 on 132 SMs).
  for (const int64_t b : {1, 4, 16, 64}) {
    const FusedKernelConfig k = select_fused_config(cfg, b, "", "");
    EXPECT_EQ(k.up.multicast, k.up.persistent && b * 512 >= 60 * gpu.sm_count ? 2 : 1) << "B = " << b;
  }
  EXPECT_FALSE(select_fused_config(cfg, 16, "", "up=bn256_st4_sk1_mc1").up.persistent);
  const FusedKernelConfig o = select_fused_config(cfg, 4, "", "up=bn128_st6_sk1_mc2,down=bn64_st6_sk2_mc1,router=cublas");
  EXPECT_EQ(o.up, (GemmVariant{128, 6, 1, 2}));
  EXPECT_FALSE(o.down_cublas);
  EXPECT_EQ(o.down, (GemmVariant{64, 6, 2, 1}));
  EXPECT_EQ(o.router, "cublas");
  EXPECT_EQ(o.row_chunk, 0);
  EXPECT_EQ(select_fused_config(cfg, 16, "", "chunk=2048").row_chunk, 2048);
  // Row groups: automatic by rows per SM (two from ~60 rows per SM: B = 16, not B = 8, on 132
  // SMs), never with the cuBLAS router unless asked for (then refused, below).
  EXPECT_EQ(d.row_groups, 1);
  EXPECT_EQ(select_fused_config(cfg, 8, "", "").row_groups, gpu.present && 8 * 512 >= 60 * gpu.sm_count ? 2 : 1);
  EXPECT_EQ(select_fused_config(cfg, 16, "", "").row_groups, gpu.present && 16 * 512 >= 60 * gpu.sm_count ? 2 : 1);
  EXPECT_EQ(select_fused_config(cfg, 32, "", "").row_groups, gpu.present && 32 * 512 >= 60 * gpu.sm_count ? 2 : 1);
  EXPECT_EQ(select_fused_config(cfg, 64, "", "router=cublas").row_groups, 1);
  EXPECT_EQ(select_fused_config(cfg, 1, "", "groups=2").row_groups, 2);
  EXPECT_EQ(select_fused_config(cfg, 64, "", "groups=1").row_groups, 1);
  EXPECT_EQ(select_fused_config(cfg, 1, "", "groups=auto").row_groups, 1);
  EXPECT_TRUE(d.pdl);
  EXPECT_FALSE(select_fused_config(cfg, 16, "", "pdl=0").pdl);
  EXPECT_EQ(d.l2_weights, 0);
  EXPECT_EQ(select_fused_config(cfg, 16, "", "l2_weights=1").l2_weights, 1);
  EXPECT_EQ(select_fused_config(cfg, 16, "", "l2_weights=0.5").l2_weights, 0.5);
  // down=sk4: split 4 at every batch size (the summation order), the tile width by the batch size:
  // 128 x 128 while one wave of 4-CTA clusters covers the tiles (B = 1: 4 x 8 clusters; an H100
  // holds 30 at once, so it takes 128 x 256 there), 128 x 256 beyond.
  const GemmVariant sk4_b1 = select_fused_config(cfg, 1, "", "down=sk4").down;
  EXPECT_EQ(sk4_b1.split_k, 4);
  EXPECT_EQ(sk4_b1.bn, !gpu.present || 4 * 8 <= down_gemm_clusters_per_wave(GemmVariant{128, 4, 4, 1}) ? 128 : 256);
  const FusedKernelConfig sk4_b16 = select_fused_config(cfg, 16, "", "down=sk4");
  EXPECT_FALSE(sk4_b16.down_cublas);
  EXPECT_EQ(sk4_b16.down, (gpu.present ? GemmVariant{256, 4, 4, 1} : GemmVariant{128, 4, 4, 1}));
  EXPECT_EQ(select_fused_config(cfg, 16, "", "down=sk2").down.split_k, 2);
  // CUTLASS's kernels by variant name; they do not split K, so they share the sk1 class with our
  // non-split tiles and may differ between batch sizes.
  const FusedKernelConfig ct = select_fused_config(cfg, 1, "", "down=pp_64x64_c1x2");
  EXPECT_FALSE(ct.down_cublas);
  EXPECT_EQ(ct.down_cutlass, "pp_64x64_c1x2");
  EXPECT_TRUE(select_fused_config(cfg, 1, "", "down=pp_64x64_c1x2,down=cublas").down_cutlass.empty());
  EXPECT_EQ(down_numerics("pp_64x64_c1x2"), "sk1");
  EXPECT_EQ(down_numerics("bm64_bn64_st12_sk1_mc1"), "sk1");
  EXPECT_EQ(down_numerics("bn64_st6_sk2_mc1"), "sk2");
  EXPECT_EQ(down_numerics("sk4"), "sk4");
  EXPECT_EQ(down_numerics("cublas"), "cublas");
  // The folded router takes any R (the MMA event router only R <= 64)...
  Config wide = cfg;
  wide.d_router = 128;
  EXPECT_EQ(select_fused_config(wide, 1, "", "").router, "folded");
  EXPECT_EQ(select_fused_config(cfg, 1, "", "router=event").router, "event");
  // ... but not a row too long to be held in registers (d_model > 1024): the cuBLAS chain.
  Config deep = cfg;
  deep.d_model = 2048;
  EXPECT_EQ(select_fused_config(deep, 1, "", "").router, "cublas");
}

// Whole 64-row blocks, at most the count asked for, none empty, covering every row once in order.
TEST(FusedConfig, RowGroupsAreWholeBlocksCoveringEveryRowOnce) {
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(row_group_ranges(512, 1), (Ranges{{0, 512}}));
  EXPECT_EQ(row_group_ranges(512, 2), (Ranges{{0, 256}, {256, 256}}));
  EXPECT_EQ(row_group_ranges(512, 3), (Ranges{{0, 192}, {192, 192}, {384, 128}}));
  EXPECT_EQ(row_group_ranges(120, 2), (Ranges{{0, 64}, {64, 56}}));
  EXPECT_EQ(row_group_ranges(120, 8), (Ranges{{0, 64}, {64, 56}}));  // 2 blocks: 2 groups
  EXPECT_EQ(row_group_ranges(40, 4), (Ranges{{0, 40}}));
  for (int64_t rows : {1, 63, 64, 65, 640, 4607})
    for (int g = 1; g <= 8; ++g) {
      const Ranges r = row_group_ranges(rows, g);
      ASSERT_FALSE(r.empty());
      EXPECT_LE(r.size(), size_t(g));
      int64_t next = 0;
      for (const auto& [r0, n] : r) {
        EXPECT_EQ(r0, next) << rows << " rows, " << g << " groups";
        EXPECT_GT(n, 0);
        EXPECT_EQ(r0 % 64, 0);
        next = r0 + n;
      }
      EXPECT_EQ(next, rows);
    }
  EXPECT_THROW(row_group_ranges(512, 0), Error);
}

// The kinds of kernels the timing diagnostics can leave out of the step (EngineOptions::leave_out),
// and the refusal of an unknown kind or of leaving kernels out of another backend (no GPU needed).
TEST(FusedConfig, LeftOutKindsParseAndBadOnesAreRefused) {
  EXPECT_FALSE(parse_leave_out("").any());
  const LeftOut lo = parse_leave_out("router+rmsnorm+collapse");
  EXPECT_TRUE(lo.router && lo.rmsnorm && lo.collapse);
  EXPECT_FALSE(lo.film || lo.dual || lo.down);
  EXPECT_TRUE(parse_leave_out("film").film && parse_leave_out("dual").dual && parse_leave_out("down").down);
  for (const auto& [list, needle] : std::vector<std::pair<std::string, std::string>>{
           {"routers", "'routers'"}, {"router,rmsnorm", "'router,rmsnorm'"}, {"router++down", "kind of kernel ''"}}) {
    try {
      parse_leave_out(list);
      ADD_FAILURE() << list << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  EngineOptions o;
  o.leave_out = "router";
  try {
    make_engine("reference", Weights::random(Config::preset("tiny"), 1), o);
    ADD_FAILURE() << "the reference accepted leave_out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("applies to the fused backend only, not 'reference'"), std::string::npos)
        << e.what();
  }
}

TEST(FusedConfig, BadOverridesAreRefusedNamingTheKey) {
  const Config cfg = Config::preset("default");
  for (const auto& [spec, needle] : std::vector<std::pair<std::string, std::string>>{
           {"speed=max", "speed"}, {"router=magic", "magic"}, {"up", "key=value"}, {"down=bn64_st6_sk1_mc1", "compiled"}, {"down=pp_64x64_c3x1", "pp_64x64_c1x2"},
           {"up=bn144_st6_sk1_mc1_p", "bn176_st5_sk1_mc1_p"}, {"up=bn256", "up=bn256: no such dual GEMM variant"},
           {"down=sk3", "N = 2 or 4"}, {"down=sk4x", "sk<N>"},
           {"chunk=-1", "chunk"}, {"chunk=12x", "chunk"}, {"chunk=", "chunk"}, {"router_grid=24", "'24'"},
           {"pdl=yes", "pdl"}, {"l2_weights=2", "l2_weights must be a fraction"}, {"l2_weights=0.5x", "'0.5x'"}, {"groups=0", "groups"}, {"groups=9", "groups"}, {"groups=2x", "groups"},
           {"router=cublas,router_grid=16", "needs router=event"}, {"router_grid=16", "the folded router has no CTA grid"},
           {"router=cublas,groups=2", "needs router=folded or event"}, {"router=mma", "must be folded, event or cublas"}}) {
    try {
      select_fused_config(cfg, 1, "", spec);
      ADD_FAILURE() << spec << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(FusedConfig, TuningCacheIsReadPerBatchAndMustKeepNumericsFixed) {
  const Config cfg = Config::preset("default");
  const std::string good = write_cache(
      "good",
      R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "down": "cublas", "router": "event"},
         {"batch": 16, "up": "bn128_st6_sk1_mc2", "down": "cublas", "router": "event", "groups": 3})",
      this_device());
  EXPECT_EQ(select_fused_config(cfg, 4, good, "").up, (GemmVariant{256, 4, 1, 1}));   // largest tuned B <= 4
  EXPECT_EQ(select_fused_config(cfg, 4, good, "").row_groups, 1);                     // no "groups": automatic
  EXPECT_EQ(select_fused_config(cfg, 64, good, "").up, (GemmVariant{128, 6, 1, 2}));  // from the B = 16 entry
  EXPECT_EQ(select_fused_config(cfg, 64, good, "").row_groups, 3);
  const std::string many = write_cache(
      "many", R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "down": "cublas", "router": "event", "groups": 9})",
      this_device());
  try {
    select_fused_config(cfg, 1, many, "");
    ADD_FAILURE() << "a cache entry with 9 row groups was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("groups"), std::string::npos) << e.what();
  }

  const std::string mixed = write_cache(
      "mixed",
      R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "down": "cublas", "router": "event"},
         {"batch": 16, "up": "bn256_st4_sk1_mc1", "down": "cublas", "router": "cublas"})",
      this_device());
  EXPECT_NO_THROW(select_fused_config(cfg, 4, mixed, ""));
  try {
    select_fused_config(cfg, 16, mixed, "");
    ADD_FAILURE() << "a cache switching the router with the batch size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch invariance"), std::string::npos) << e.what();
  }

  // Tile widths may differ per batch size, the split may not.
  const std::string widths = write_cache(
      "widths",
      R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "down": "bn128_st4_sk4_mc1", "router": "event"},
         {"batch": 16, "up": "bn256_st4_sk1_mc1", "down": "bn256_st4_sk4_mc1", "router": "event"})",
      this_device());
  EXPECT_EQ(select_fused_config(cfg, 16, widths, "").down, (GemmVariant{256, 4, 4, 1}));
  const std::string splits = write_cache(
      "splits",
      R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "down": "bn128_st4_sk4_mc1", "router": "event"},
         {"batch": 16, "up": "bn256_st4_sk1_mc1", "down": "bn128_st4_sk2_mc1", "router": "event"})",
      this_device());
  try {
    select_fused_config(cfg, 16, splits, "");
    ADD_FAILURE() << "a cache switching the down GEMM's split with the batch size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch invariance"), std::string::npos) << e.what();
  }

  const std::string other = write_cache(
      "other", R"({"batch": 1, "up": "bn128_st6_sk1_mc2", "down": "cublas", "router": "event"})", "Another GPU");
  EXPECT_EQ(select_fused_config(cfg, 1, other, "").up, select_fused_config(cfg, 1, "", "").up)
      << "another GPU's cache must not apply";

  // Malformed entries: each refused with an error naming the entry and the field or value.
  for (const auto& [name, entry, needle] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"groups_type", R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "down": "cublas", "groups": "two"})", "field 'groups'"},
           {"groups_zero", R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "down": "cublas", "groups": 0})", "groups"},
           {"router", R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "down": "cublas", "router": "magic"})", "'magic'"},
           {"chunk", R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "down": "cublas", "chunk": -5})", "chunk"},
           {"no_down", R"({"batch": 1, "up": "bn256_st4_sk1_mc1"})", "no field 'down'"},
           {"batch_type", R"({"batch": "one", "up": "bn256_st4_sk1_mc1", "down": "cublas"})", "field 'batch'"},
           {"not_object", R"(7)", "is not a JSON object"}}) {
    const std::string path = write_cache("bad_" + name, entry, this_device());
    try {
      select_fused_config(cfg, 1, path, "");
      ADD_FAILURE() << name << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("entry 0"), std::string::npos) << name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << name << ": " << e.what();
    }
    std::remove(path.c_str());
  }
  const auto no_entries = std::filesystem::temp_directory_path() / "swapffn_tune_no_entries.json";
  std::ofstream(no_entries) << R"({"device": ")" << this_device() << R"(", "d_model": 1024, "d_ff": 4096})";
  try {
    select_fused_config(cfg, 1, no_entries.string(), "");
    ADD_FAILURE() << "a cache without entries was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no field 'entries'"), std::string::npos) << e.what();
  }
  std::remove(no_entries.string().c_str());

  EXPECT_THROW(select_fused_config(cfg, 1, "/nonexistent/swapffn-tune.json", ""), Error);
  const auto broken = std::filesystem::temp_directory_path() / "swapffn_tune_broken.json";
  std::ofstream(broken) << "{not json";
  EXPECT_THROW(select_fused_config(cfg, 1, broken.string(), ""), Error);
  for (const auto& p : {good, many, mixed, widths, splits, other, broken.string()}) std::remove(p.c_str());
}

}  // namespace
}  // namespace swapffn::cuda

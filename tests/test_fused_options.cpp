// The fused backend's kernel choices as the boundary parses them (swapffn/fused_options.hpp): names,
// refusals naming the bad item, the tuning cache per device and model shape, and the registry's
// refusal of choices for another backend. No GPU needed.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "swapffn/backends.hpp"
#include "swapffn/error.hpp"
#include "swapffn/fused_options.hpp"

namespace swapffn {
namespace {

std::string write_cache(const std::string& name, const std::string& entries, const std::string& device = "GPU X") {
  const auto path = std::filesystem::temp_directory_path() / ("swapffn_tune_" + name + ".json");
  std::ofstream(path) << R"({"device": ")" << device << R"(", "d_model": 1024, "d_ff": 4096, "entries": [)" << entries
                      << "]}";
  return path.string();
}

template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error with: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// At batch B: the tuned entry of the largest tuned batch not above B, each pinned part over it.
TEST(FusedOptions, ChoiceAtABatchIsThePinnedPartsOverTheTunedEntry) {
  FusedOptions o;
  o.tuned = {{16, parse_fused_choice("up=bn256_st4_sk1_mc1_p,groups=2")}, {4, parse_fused_choice("groups=3")}};
  EXPECT_FALSE(o.at(1).any());  // below every tuned batch: the defaults
  EXPECT_EQ(o.at(4).describe(), "groups=3");
  EXPECT_EQ(o.at(15).describe(), "groups=3");
  EXPECT_EQ(o.at(64).describe(), "up=bn256_st4_sk1_mc1_p,groups=2");
  o.pinned = parse_fused_choice("router=cublas,groups=1");
  EXPECT_EQ(o.at(1).describe(), "router=cublas,groups=1");
  EXPECT_EQ(o.at(64).describe(), "up=bn256_st4_sk1_mc1_p,router=cublas,groups=1");
  EXPECT_EQ(parse_fused_choice(o.at(64).describe()), o.at(64));  // text the Python engine's kernels= takes
}

TEST(FusedOptions, ChoicesParseAndRoundTrip) {
  EXPECT_FALSE(parse_fused_choice("").any());
  const FusedChoice c = parse_fused_choice("up=bn256_st4_sk1_mc2_p,router=cublas,groups=3");
  EXPECT_EQ(c.up, DualGemmTile::bn256_persistent_mc2);
  EXPECT_EQ(c.router, EventHead::cublas);
  EXPECT_EQ(c.row_groups, 3);
  EXPECT_EQ(parse_fused_choice(c.describe()), c);
  for (const DualGemmTile t : kDualGemmTiles) EXPECT_EQ(parse_fused_choice(std::string("up=") + to_string(t)).up, t);
  EXPECT_EQ(parse_fused_choice("router=folded").router, EventHead::folded);
  const FusedChoice f = parse_fused_choice("groups=2,fp8up=sm90");
  EXPECT_EQ(f.fp8_up, Fp8UpGemm::sm90);
  EXPECT_TRUE(f.any());
  EXPECT_EQ(parse_fused_choice(f.describe()), f);
  EXPECT_EQ(parse_fused_choice("fp8up=cublas").fp8_up, Fp8UpGemm::cublas);
  const FusedChoice rows = parse_fused_choice("scales=rows,fp8up=cublas");
  EXPECT_EQ(rows.fp8_scales, fp8::Scaling::rows);
  EXPECT_EQ(parse_fused_choice(rows.describe()), rows);
  EXPECT_EQ(parse_fused_choice("scales=blocks").fp8_scales, fp8::Scaling::blocks);
  FusedOptions o;
  o.pinned = f;
  o.tuned = {TunedChoice{1, parse_fused_choice("up=bn256_st4_sk1_mc1,router=folded,groups=1")}};
  const FusedChoice at = o.at(16);  // the pinned choices over the tuned entry's
  EXPECT_EQ(at.fp8_up, Fp8UpGemm::sm90);
  EXPECT_EQ(at.row_groups, 2);
  EXPECT_EQ(at.up, DualGemmTile::bn256);
}

TEST(FusedOptions, BadChoicesAreRefusedNamingTheItem) {
  for (const auto& [spec, needle] : std::vector<std::pair<std::string, std::string>>{
           {"speed=max", "unknown kernel choice 'speed'"}, {"up", "'up' is not key=value"},
           {"up=bn128_st6_sk1_mc2", "no such dual GEMM tile (known: bn256_st4_sk1_mc1"},
           {"router=event", "router=event: must be folded or cublas"}, {"groups=0", "groups=0"},
           {"groups=9", "from 1 to 8"}, {"groups=2x", "groups=2x"}, {"groups=", "groups="},
           {"down=cublas", "unknown kernel choice 'down'"}, {"fp8up=fast", "fp8up=fast: must be cublas or sm90"},
           {"scales=tensor", "scales=tensor: unknown fp8 scaling 'tensor' (known: blocks, rows)"}})
    expect_error([&] { parse_fused_choice(spec); }, needle);
}

TEST(FusedOptions, TuningCacheIsReadForItsDeviceAndShape) {
  const std::string good = write_cache("good", R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "router": "folded", "groups": 1},
      {"batch": 16, "up": "bn256_st4_sk1_mc2_p", "router": "folded", "groups": 2, "ms_per_step": 5.1})");
  const std::vector<TunedChoice> t = load_tuning(good, "GPU X", 1024, 4096);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].batch, 16);
  EXPECT_EQ(t[1].choice.up, DualGemmTile::bn256_persistent_mc2);
  EXPECT_EQ(t[1].choice.row_groups, 2);
  EXPECT_TRUE(load_tuning(good, "Another GPU", 1024, 4096).empty()) << "another GPU's cache must not apply";
  EXPECT_TRUE(load_tuning(good, "GPU X", 128, 4096).empty()) << "another model shape's cache must not apply";

  for (const auto& [name, entry, needle] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"groups_type", R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "router": "folded", "groups": "two"})", "field 'groups'"},
           {"groups_zero", R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "router": "folded", "groups": 0})", "groups"},
           {"router", R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "router": "magic", "groups": 1})", "magic"},
           {"up", R"({"batch": 1, "up": "bn176_st5_sk1_mc1_p", "router": "folded", "groups": 1})", "bn176"},
           {"no_router", R"({"batch": 1, "up": "bn256_st4_sk1_mc1", "groups": 1})", "no field 'router'"},
           {"batch_type", R"({"batch": "one", "up": "bn256_st4_sk1_mc1", "router": "folded", "groups": 1})", "field 'batch'"},
           {"batch_zero", R"({"batch": 0, "up": "bn256_st4_sk1_mc1", "router": "folded", "groups": 1})", "batch must be >= 1"},
           {"not_object", R"(7)", "is not a JSON object"}}) {
    const std::string path = write_cache("bad_" + name, entry);
    expect_error([&] { load_tuning(path, "GPU X", 1024, 4096); }, "entry 0");
    expect_error([&] { load_tuning(path, "GPU X", 1024, 4096); }, needle);
    std::remove(path.c_str());
  }
  const auto no_entries = std::filesystem::temp_directory_path() / "swapffn_tune_no_entries.json";
  std::ofstream(no_entries) << R"({"device": "GPU X", "d_model": 1024, "d_ff": 4096})";
  expect_error([&] { load_tuning(no_entries.string(), "GPU X", 1024, 4096); }, "no field 'entries'");
  expect_error([&] { load_tuning("/nonexistent/swapffn-tune.json", "GPU X", 1024, 4096); }, "tuning cache /nonexistent/swapffn-tune.json: cannot open");
  const auto broken = std::filesystem::temp_directory_path() / "swapffn_tune_broken.json";
  std::ofstream(broken) << "{not json";
  expect_error([&] { load_tuning(broken.string(), "GPU X", 1024, 4096); }, "is not valid JSON");
  for (const auto& p : {good, no_entries.string(), broken.string()}) std::remove(p.c_str());
}

TEST(FusedOptions, OtherBackendsRefuseKernelChoices) {
  EngineOptions o;
  o.fused.pinned = parse_fused_choice("groups=2");
  expect_error([&] { make_engine("reference", Weights::random(Config::preset("tiny"), 1), o); },
               "kernel choices (groups=2) apply to the fused backends only, not 'reference'");
}

}  // namespace
}  // namespace swapffn

// Config (SPEC section 1): defaults, validation naming the field, JSON round trip and refusal of
// malformed JSON, presets, set("key=value") and the cost model (SPEC section 6).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "io_test_util.hpp"
#include "swapffn/config.hpp"
#include "swapffn/limits.hpp"

namespace swapffn {
namespace {

using testing::expect_error;

// A config with every field off its default, so a round trip that drops a field shows.
Config unusual() {
  Config c;
  c.d_model = 96;
  c.d_ff = 200;
  c.core_count = 7;
  c.n_events = 0;
  c.k_ffn = 5;
  c.d_router = 3;
  c.collapse_k = 2;
  c.collapse_r = 11;
  c.core_embed_dim = 13;
  c.norm_eps = 3.25e-5;
  c.ffn_residual = false;
  c.collapse_silu = false;
  return c;
}

TEST(Config, DefaultsAreTheSpecs) {
  const Config c;
  EXPECT_EQ(c.d_model, 1024);
  EXPECT_EQ(c.d_ff, 4096);
  EXPECT_EQ(c.core_count, 512);
  EXPECT_EQ(c.n_banks, 4);
  EXPECT_EQ(c.n_events, 8);
  EXPECT_EQ(c.k_ffn, 2);
  EXPECT_EQ(c.d_router, 64);
  EXPECT_EQ(c.collapse_k, 8);
  EXPECT_EQ(c.collapse_r, 224);
  EXPECT_EQ(c.core_embed_dim, 32);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_TRUE(c.ffn_residual);
  EXPECT_TRUE(c.collapse_silu);
  EXPECT_NO_THROW(c.validate());
}

TEST(Config, JsonRoundTrip) {
  for (const Config& c : {Config{}, Config::preset("tiny"), unusual()}) {
    EXPECT_EQ(Config::from_json(c.to_json()), c);
    EXPECT_EQ(Config::from_json_string(c.to_json_string()), c);
  }
  // norm_eps survives bit for bit.
  Config c = unusual();
  c.norm_eps = 1e-3 / 3.0;
  EXPECT_EQ(Config::from_json_string(c.to_json_string()).norm_eps, c.norm_eps);
}

TEST(Config, EveryInvalidFieldIsNamedWithItsValue) {
  struct Case {
    const char* field;
    void (*mutate)(Config&);
    const char* value;
  };
  const Case cases[] = {
      {"d_model", [](Config& c) { c.d_model = 0; }, "0"},
      {"d_ff", [](Config& c) { c.d_ff = -3; }, "-3"},
      {"core_count", [](Config& c) { c.core_count = 0; }, "0"},
      {"n_banks", [](Config& c) { c.n_banks = 3; }, "3"},
      {"n_banks", [](Config& c) { c.n_banks = 5; }, "5"},
      {"n_events", [](Config& c) { c.n_events = -1; }, "-1"},
      {"k_ffn", [](Config& c) { c.k_ffn = -2; }, "-2"},
      {"d_router", [](Config& c) { c.d_router = 0; }, "0"},
      {"collapse_k", [](Config& c) { c.collapse_k = -7; }, "-7"},
      {"collapse_r", [](Config& c) { c.collapse_r = 0; }, "0"},
      {"core_embed_dim", [](Config& c) { c.core_embed_dim = 0; }, "0"},
      {"d_model", [](Config& c) { c.d_model = int64_t{1} << 40; }, "1099511627776"},
      {"norm_eps", [](Config& c) { c.norm_eps = 0; }, "0"},
      {"norm_eps", [](Config& c) { c.norm_eps = -1e-6; }, "-9.99"},
      {"norm_eps", [](Config& c) { c.norm_eps = std::numeric_limits<double>::quiet_NaN(); }, "nan"},
      {"norm_eps", [](Config& c) { c.norm_eps = std::numeric_limits<double>::infinity(); }, "inf"},
      {"norm_eps", [](Config& c) { c.norm_eps = 1e308; }, "e+308"},
      {"norm_eps", [](Config& c) { c.norm_eps = 1e-320; }, "e-321"},
      {"norm_eps", [](Config& c) { c.norm_eps = 0.0125; }, "0.0125"},
      {"norm_eps", [](Config& c) { c.norm_eps = 9e-13; }, "e-13"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.field);
    Config c = Config::preset("tiny");
    k.mutate(c);
    expect_error([&] { c.validate(); }, {k.field, k.value, "invalid"});
    // The same config arriving as JSON is refused naming the same field.
    expect_error([&] { Config::from_json(c.to_json()); }, {k.field});
  }
}

TEST(Config, ZeroEventsAndZeroFfnStepsAreValid) {
  Config c = Config::preset("tiny");
  c.n_events = 0;
  c.k_ffn = 0;
  EXPECT_NO_THROW(c.validate());
}

TEST(Config, NormEpsRangeEndsAreValid) {
  Config c = Config::preset("tiny");
  for (double eps : {1e-12, 1e-2}) {
    c.norm_eps = eps;
    EXPECT_NO_THROW(c.validate()) << eps;
  }
}

// Every field within its own bound, the product past a budget: refused naming the cost and fields.
TEST(Config, CostBudgetRefusesAbsurdProducts) {
  constexpr int64_t kBig = int64_t{1} << 20;
  struct Case {
    const char* name;
    void (*mutate)(Config&);
    std::vector<std::string_view> what;
  };
  const Case cases[] = {
      {"n_events", [](Config& c) { c.n_events = kBig; }, {"FLOPs per token", "n_events 1048576"}},
      {"k_ffn", [](Config& c) { c.k_ffn = kBig; }, {"FLOPs per token", "k_ffn 1048576"}},
      {"core_count", [](Config& c) { c.core_count = kBig; }, {"state bytes per sequence", "core_count 1048576"}},
      {"weights",
       [](Config& c) {
         c.core_count = 1;
         c.d_model = c.d_ff = int64_t{1} << 16;
       },
       {"weight bytes", "d_model 65536", "d_ff 65536"}},
      {"decisions",
       [](Config& c) {
         c.core_count = 2;
         c.d_model = c.d_ff = c.d_router = 1;
         c.n_events = kBig;
       },
       {"decisions per token", "n_events 1048576", "core_count 2"}},
      {"tables", [](Config& c) { c.core_embed_dim = kBig; }, {"per-core tables", "core_embed_dim 1048576"}},
      {"overflow",
       [](Config& c) {
         c.core_count = 1;
         c.d_model = 2;
         c.d_ff = c.n_events = c.k_ffn = kBig;  // 12 * 2^60 FLOPs
       },
       {"FLOPs per token", "at least 2^63"}},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    Config c;
    k.mutate(c);
    try {
      c.validate();
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("too costly"), std::string::npos) << e.what();
      for (auto w : k.what) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << ": " << e.what();
    }
    expect_error([&] { Config::from_json(c.to_json()); }, {"too costly"});
  }
}

TEST(Config, CostBudgetLeavesRoomAboveTheDefault) {
  static_assert(kMaxBatch >= 1024, "the GPU engines are tuned up to B = 1024");
  Config wide;
  wide.d_model = 4096;
  wide.d_ff = 16384;
  Config deep;
  deep.n_events = 32;
  deep.k_ffn = 4;
  Config many;
  many.core_count = 8192;
  for (const Config& c : {wide, deep, many}) EXPECT_NO_THROW(c.validate());
}

TEST(Config, FromJsonRefusesMissingWrongTypedAndUnknownFields) {
  const nlohmann::json good = Config::preset("tiny").to_json();
  for (const auto& [key, value] : good.items()) {
    SCOPED_TRACE(key);
    nlohmann::json j = good;
    j.erase(key);
    expect_error([&] { Config::from_json(j); }, {"missing", key});
  }
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = good;
    j[key] = std::move(v);
    return j;
  };
  expect_error([&] { Config::from_json(with("d_model", "128")); }, {"d_model", "wrong JSON type"});
  expect_error([&] { Config::from_json(with("d_ff", 384.5)); }, {"d_ff", "integer"});
  expect_error([&] { Config::from_json(with("ffn_residual", 1)); }, {"ffn_residual", "true or false"});
  expect_error([&] { Config::from_json(with("norm_eps", "1e-6")); }, {"norm_eps", "number"});
  expect_error([&] { Config::from_json(with("d_modle", 128)); }, {"unknown key", "d_modle"});
  expect_error([&] { Config::from_json(nlohmann::json::array({1, 2})); }, {"object"});
  expect_error([&] { Config::from_json_string("{\"d_model\": 12"); }, {"not valid JSON"});
  // nlohmann keeps the last of two equal keys: a config naming one twice is refused instead.
  std::string twice = Config::preset("tiny").to_json_string();
  twice.insert(1, "\"k_ffn\":7,");
  expect_error([&] { Config::from_json_string(twice); }, {"'k_ffn'", "twice"});
  // An integer-valued norm_eps is a number like any other, and 1 is out of its range.
  expect_error([&] { Config::from_json(with("norm_eps", 1)); }, {"norm_eps = 1 ", "invalid", "[1e-12, 1e-2]"});
}

TEST(Config, Presets) {
  EXPECT_EQ(Config::preset("default"), Config{});
  const Config t = Config::preset("tiny");
  EXPECT_EQ(t.d_model, 128);
  EXPECT_EQ(t.d_ff, 384);
  EXPECT_EQ(t.core_count, 40);
  EXPECT_EQ(t.n_events, 3);
  EXPECT_EQ(t.k_ffn, 2);
  EXPECT_EQ(t.d_router, 16);
  EXPECT_EQ(t.collapse_k, 5);
  EXPECT_EQ(t.collapse_r, 24);
  EXPECT_EQ(t.core_embed_dim, 8);
  EXPECT_EQ(t.norm_eps, Config{}.norm_eps);
  EXPECT_EQ(t.ffn_residual, Config{}.ffn_residual);
  EXPECT_EQ(t.collapse_silu, Config{}.collapse_silu);
  // Every dimension distinct so a transposed index shows; D and F fit 128-wide GPU tiles.
  const std::set<int64_t> dims = {t.d_model, t.d_ff, t.core_count, t.n_banks, t.n_events,
                                  t.d_router, t.collapse_k, t.collapse_r, t.core_embed_dim};
  EXPECT_EQ(dims.size(), 9u);
  EXPECT_EQ(t.d_model % 128, 0);
  EXPECT_EQ(t.d_ff % 128, 0);
  for (const auto& name : Config::preset_names()) EXPECT_NO_THROW(Config::preset(name).validate());
  EXPECT_EQ(Config::preset_names(), (std::vector<std::string>{"default", "tiny"}));
  expect_error([] { Config::preset("huge"); }, {"unknown config preset", "huge"});
}

TEST(Config, SetParsesEveryKindOfField) {
  Config c;
  c.set("d_model=256");
  c.set("n_events=0");
  c.set("norm_eps=2.5e-5");
  c.set("ffn_residual=false");
  c.set("collapse_silu=0");
  EXPECT_EQ(c.d_model, 256);
  EXPECT_EQ(c.n_events, 0);
  EXPECT_EQ(c.norm_eps, 2.5e-5);
  EXPECT_FALSE(c.ffn_residual);
  EXPECT_FALSE(c.collapse_silu);
  c.set("collapse_silu=true");
  EXPECT_TRUE(c.collapse_silu);
  // set() does not validate; validate() names what set() let through.
  c.set("d_ff=-5");
  EXPECT_EQ(c.d_ff, -5);
  expect_error([&] { c.validate(); }, {"d_ff"});
}

TEST(Config, SetErrorsNameTheKey) {
  Config c;
  const Config before = c;
  expect_error([&] { c.set("d_modl=3"); }, {"unknown config key", "d_modl"});
  expect_error([&] { c.set("d_model=12x"); }, {"d_model", "12x", "integer"});
  expect_error([&] { c.set("d_model="); }, {"d_model", "integer"});
  expect_error([&] { c.set("d_model=99999999999999999999"); }, {"d_model", "integer"});
  expect_error([&] { c.set("norm_eps=small"); }, {"norm_eps", "number"});
  expect_error([&] { c.set("ffn_residual=yes"); }, {"ffn_residual", "bool"});
  expect_error([&] { c.set("d_model"); }, {"key=value"});
  EXPECT_EQ(c, before);  // a refused setting changes nothing
}

TEST(Config, CostModelMatchesSpecSection6) {
  const Config c;
  // E * k * 3 * 2 * C * D * F with the defaults: 206.2 GFLOP.
  EXPECT_DOUBLE_EQ(c.ffn_flops_per_token(), 8.0 * 2 * 3 * 2 * 512 * 1024 * 4096);
  EXPECT_NEAR(c.ffn_flops_per_token() / 1e9, 206.2, 0.05);
  const double router = 8.0 * 2 * 512 * 1024 * 64;
  const double collapse = 2.0 * 512 * 8 * 1024 + 2.0 * 8 * 224 * 1024 + 2.0 * 1024 * 224;
  EXPECT_DOUBLE_EQ(c.flops_per_token(), c.ffn_flops_per_token() + router + collapse);
  EXPECT_NEAR(router / 1e9, 0.54, 0.005);
  EXPECT_NEAR(c.flops_per_token() / 1e9, 206.7, 0.05);
  // Scales with the sizes of the tiny config too.
  const Config t = Config::preset("tiny");
  EXPECT_DOUBLE_EQ(t.ffn_flops_per_token(), 3.0 * 2 * 6 * 40 * 128 * 384);
}

}  // namespace
}  // namespace swapffn

// Weights (SPEC section 2): the model file round trip, F32 rounding on load, refusal of missing /
// extra / mis-shaped / mis-typed tensors and invalid configs, deterministic random initialisation,
// and the per-core tables against a direct computation.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "io_test_util.hpp"
#include "swapffn/safetensors.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {
namespace {

namespace st = safetensors;
using testing::expect_error;
using testing::TempDir;

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<bf16> Weights::*member;
};

// SPEC section 2, written out independently of the library's own table.
std::vector<Spec> spec_tensors(const Config& c) {
  const int64_t D = c.d_model, F = c.d_ff, C = c.core_count, R = c.d_router;
  const int64_t K = c.collapse_k, Rc = c.collapse_r, Ce = c.core_embed_dim;
  return {
      {"core_embed.weight", {C, Ce}, &Weights::core_embed},
      {"core_scale_proj.weight", {D, Ce}, &Weights::core_scale_w},
      {"core_scale_proj.bias", {D}, &Weights::core_scale_b},
      {"core_shift_proj.weight", {D, Ce}, &Weights::core_shift_w},
      {"core_shift_proj.bias", {D}, &Weights::core_shift_b},
      {"core_alpha_proj.weight", {K, Ce}, &Weights::core_alpha_w},
      {"core_alpha_proj.bias", {K}, &Weights::core_alpha_b},
      {"router_norm", {D}, &Weights::router_norm},
      {"router_w", {R, D}, &Weights::router_w},
      {"router_swap_w", {R}, &Weights::router_swap_w},
      {"router_swap_b", {1}, &Weights::router_swap_b},
      {"bank_w", {R, 4}, &Weights::bank_w},
      {"bank_b", {4}, &Weights::bank_b},
      {"norm.weight", {D}, &Weights::norm_w},
      {"w1.weight", {F, D}, &Weights::w1},
      {"w3.weight", {F, D}, &Weights::w3},
      {"w2.weight", {D, F}, &Weights::w2},
      {"collapse_basis", {K, Rc, D}, &Weights::collapse_basis},
      {"collapse_decoder", {D, Rc}, &Weights::collapse_decoder},
  };
}

// Writes w by hand (not through Weights::save) so a test can change one tensor or the metadata.
// edit(name, shape, dtype, bytes) may alter any of them; returning false drops the tensor.
using Edit = std::function<bool(const std::string&, std::vector<int64_t>&, st::DType&,
                                std::vector<std::byte>&)>;
void write_model(const std::string& path, const Weights& w, const Edit& edit = {},
                 const std::string& config_json = "") {
  st::Writer wr;
  wr.set_metadata("swapffn.config", config_json.empty() ? w.cfg.to_json_string() : config_json);
  for (const auto& s : spec_tensors(w.cfg)) {
    const auto& v = w.*s.member;
    std::vector<std::byte> bytes(v.size() * 2);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    std::vector<int64_t> shape = s.shape;
    st::DType dtype = st::DType::BF16;
    if (edit && !edit(s.name, shape, dtype, bytes)) continue;
    wr.add(s.name, dtype, shape, bytes.data(), bytes.size());
  }
  wr.write(path);
}

void expect_equal_weights(const Weights& a, const Weights& b) {
  EXPECT_EQ(a.cfg, b.cfg);
  for (const auto& s : spec_tensors(a.cfg)) EXPECT_EQ(a.*s.member, b.*s.member) << s.name;
}

TEST(WeightsIo, SaveLoadRoundTripIsBitwise) {
  TempDir dir;
  for (const char* preset : {"tiny"}) {
    Config cfg = Config::preset(preset);
    cfg.ffn_residual = false;  // a non-default flag must survive too
    cfg.norm_eps = 3e-5;
    const Weights w = Weights::random(cfg, 1234);
    const std::string path = dir.file("m.safetensors");
    w.save(path);
    const Weights back = Weights::load(path);
    expect_equal_weights(w, back);
    // The file holds exactly the SPEC tensors in BF16 and the config under swapffn.config.
    st::Reader r(path);
    EXPECT_EQ(r.tensors().size(), spec_tensors(cfg).size());
    for (const auto& s : spec_tensors(cfg)) {
      EXPECT_EQ(r.at(s.name).dtype, st::DType::BF16) << s.name;
      EXPECT_EQ(r.at(s.name).shape, s.shape) << s.name;
    }
    EXPECT_EQ(Config::from_json_string(r.metadata_at("swapffn.config")), cfg);
  }
}

TEST(WeightsIo, F32TensorsAreRoundedToBf16OnLoad) {
  TempDir dir;
  const Weights w = Weights::random(Config::preset("tiny"), 5);
  std::mt19937_64 rng(77);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::map<std::string, std::vector<float>> written;
  const std::string path = dir.file("f32.safetensors");
  write_model(path, w, [&](const std::string& name, std::vector<int64_t>&, st::DType& dt,
                           std::vector<std::byte>& bytes) {
    std::vector<float> f(bytes.size() / 2);
    for (auto& v : f) v = nd(rng);  // fresh values, almost none on the bf16 grid
    written[name] = f;
    dt = st::DType::F32;
    bytes.resize(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    return true;
  });
  const Weights back = Weights::load(path);
  int64_t off_grid = 0;
  for (const auto& s : spec_tensors(back.cfg)) {
    const auto& f = written.at(s.name);
    const auto& got = back.*s.member;
    ASSERT_EQ(got.size(), f.size());
    for (size_t i = 0; i < f.size(); ++i) {
      ASSERT_EQ(got[i], float_to_bf16(f[i])) << s.name << "[" << i << "]";
      off_grid += round_bf16(f[i]) != f[i];
    }
  }
  EXPECT_GT(off_grid, 1000);  // the test would notice a loader that truncated instead of rounding
}

class BadModel : public ::testing::Test {
 protected:
  void expect_refused(const Edit& edit, std::initializer_list<std::string_view> what,
                      const std::string& config_json = "") {
    const std::string path = dir.file("bad.safetensors");
    write_model(path, w, edit, config_json);
    expect_error([&] { Weights::load(path); }, what);
  }
  TempDir dir;
  Weights w = Weights::random(Config::preset("tiny"), 9);
};

TEST_F(BadModel, UnchangedFileLoads) {
  const std::string path = dir.file("ok.safetensors");
  write_model(path, w);
  expect_equal_weights(Weights::load(path), w);
}

TEST_F(BadModel, MissingTensor) {
  expect_refused([](const std::string& n, auto&, auto&, auto&) { return n != "bank_w"; },
                 {"missing tensor", "'bank_w'"});
}

TEST_F(BadModel, ExtraTensor) {
  const std::string path = dir.file("extra.safetensors");
  st::Writer wr;
  wr.set_metadata("swapffn.config", w.cfg.to_json_string());
  for (const auto& s : spec_tensors(w.cfg)) wr.add_bf16(s.name, s.shape, w.*s.member);
  wr.add_bf16("lm_head.weight", {2}, {float_to_bf16(1.0f), float_to_bf16(2.0f)});
  wr.write(path);
  expect_error([&] { Weights::load(path); }, {"extra tensor", "'lm_head.weight'"});
}

TEST_F(BadModel, WrongShape) {
  // Same byte count, transposed: only the shape check can catch it.
  expect_refused(
      [](const std::string& n, std::vector<int64_t>& shape, auto&, auto&) {
        if (n == "w2.weight") std::swap(shape[0], shape[1]);
        return true;
      },
      {"'w2.weight'", "wrong shape [384, 128]", "expected [128, 384]"});
}

TEST_F(BadModel, WrongDtype) {
  for (st::DType dt : {st::DType::F16, st::DType::U8, st::DType::F64}) {
    SCOPED_TRACE(st::dtype_name(dt));
    expect_refused(
        [dt](const std::string& n, auto&, st::DType& d, std::vector<std::byte>& bytes) {
          if (n == "router_w") {
            d = dt;
            bytes.resize(bytes.size() / 2 * st::dtype_size(dt), std::byte{0x3c});
          }
          return true;
        },
        {"'router_w'", "wrong dtype", st::dtype_name(dt)});
  }
}

TEST_F(BadModel, InvalidConfigValueInMetadata) {
  nlohmann::json j = w.cfg.to_json();
  j["n_banks"] = 8;
  expect_refused({}, {"invalid swapffn.config", "n_banks", "8"}, j.dump());
  j = w.cfg.to_json();
  j["norm_eps"] = -1.0;
  expect_refused({}, {"norm_eps"}, j.dump());
  j = w.cfg.to_json();
  j.erase("collapse_r");
  expect_refused({}, {"missing field collapse_r"}, j.dump());
  expect_refused({}, {"swapffn.config", "not valid JSON"}, "{not json");
}

// A normal-size file whose config asks for an absurd amount of work or memory is refused at load,
// naming the cost and the field, before anything sized by the config is allocated.
TEST_F(BadModel, ConfigPastTheCostBudget) {
  for (const char* field : {"n_events", "k_ffn"}) {
    nlohmann::json j = w.cfg.to_json();
    j[field] = int64_t{1} << 20;
    expect_refused({}, {"too costly", "FLOPs per token", std::string(field) + " 1048576"}, j.dump());
  }
  // core_count 2^20 with a matching core_embed: a 16 MB file whose state would take 1 GiB a sequence.
  nlohmann::json j = w.cfg.to_json();
  j["core_count"] = int64_t{1} << 20;
  expect_refused(
      [](const std::string& n, std::vector<int64_t>& shape, auto&, std::vector<std::byte>& bytes) {
        if (n == "core_embed.weight") {
          shape[0] = int64_t{1} << 20;
          bytes.assign(static_cast<size_t>(shape[0] * shape[1] * 2), std::byte{0x3c});
        }
        return true;
      },
      {"too costly", "state bytes per sequence", "core_count 1048576"}, j.dump());
}

TEST_F(BadModel, ConfigThatDoesNotMatchTheTensors) {
  nlohmann::json j = w.cfg.to_json();
  j["d_router"] = 17;
  expect_refused({}, {"'router_w'", "wrong shape [16, 128]", "expected [17, 128]"}, j.dump());
}

TEST_F(BadModel, MissingConfig) {
  const std::string path = dir.file("noconf.safetensors");
  st::Writer wr;
  for (const auto& s : spec_tensors(w.cfg)) wr.add_bf16(s.name, s.shape, w.*s.member);
  wr.write(path);
  expect_error([&] { Weights::load(path); }, {"swapffn.config"});
}

TEST_F(BadModel, NonFiniteParameter) {
  expect_refused(
      [](const std::string& n, auto&, auto&, std::vector<std::byte>& bytes) {
        if (n == "norm.weight") {
          const uint16_t nan = 0x7FC0;
          std::memcpy(bytes.data() + 2 * 17, &nan, 2);
        }
        return true;
      },
      {"'norm.weight'", "non-finite", "index 17"});
}

TEST(WeightsRandom, DeterministicForASeedDifferentForAnother) {
  const Config cfg = Config::preset("tiny");
  const Weights a = Weights::random(cfg, 42), b = Weights::random(cfg, 42);
  const Weights c = Weights::random(cfg, 43);
  expect_equal_weights(a, b);
  for (const auto& s : spec_tensors(cfg)) EXPECT_NE(a.*s.member, c.*s.member) << s.name;
  EXPECT_NO_THROW(a.validate());
  // Known bits pin the generator and the distribution: a change to either must be deliberate.
  EXPECT_EQ(a.w1[0].bits, 0x3d85);
  EXPECT_EQ(a.w2[5].bits, 0x3d03);
  EXPECT_EQ(a.collapse_basis[7].bits, 0x3c96);
  EXPECT_EQ(a.router_swap_b[0].bits, 0x3db8);
  EXPECT_EQ(a.bank_b, (std::vector<bf16>{{0x3dea}, {0x3ccd}, {0xbc7e}, {0xbec1}}));
}

TEST(WeightsRandom, TensorsHaveTheDocumentedScale) {
  // docs/MODEL.md: w1 ~ N(0, 1/D), w2 ~ N(0, 0.25/F), norm gains 1 + N(0, 0.01).
  Config cfg = Config::preset("tiny");
  const Weights w = Weights::random(cfg, 3);
  auto moments = [](const std::vector<bf16>& v) {
    double s = 0, s2 = 0;
    for (bf16 b : v) {
      const double x = bf16_to_float(b);
      s += x;
      s2 += x * x;
    }
    const double m = s / double(v.size());
    return std::pair{m, std::sqrt(s2 / double(v.size()) - m * m)};
  };
  const double D = double(cfg.d_model), F = double(cfg.d_ff);
  auto [m1, s1] = moments(w.w1);
  EXPECT_NEAR(m1, 0.0, 0.01 / std::sqrt(D) * 10);
  EXPECT_NEAR(s1 * std::sqrt(D), 1.0, 0.02);
  auto [m2, s2] = moments(w.w2);
  EXPECT_NEAR(s2 * std::sqrt(F), 0.5, 0.01);
  auto [mn, sn] = moments(w.norm_w);
  EXPECT_NEAR(mn, 1.0, 0.03);
  EXPECT_NEAR(sn, 0.1, 0.03);
  // With z = 0 the bank choice is argmax(bank_b): no ties; s = router_swap_b > 0 swaps again.
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) EXPECT_NE(w.bank_b[i], w.bank_b[j]);
  EXPECT_GT(bf16_to_float(w.router_swap_b[0]), 0.0f);
}

TEST(WeightsRandom, BankBiasHasNoTiesForManySeeds) {
  for (uint64_t seed = 0; seed < 100; ++seed) {
    const Weights w = Weights::random(Config::preset("tiny"), seed);
    for (int i = 0; i < 4; ++i)
      for (int j = i + 1; j < 4; ++j) ASSERT_NE(w.bank_b[i], w.bank_b[j]) << "seed " << seed;
  }
}

TEST(Weights, ValidateNamesTheTensorOfWrongSize) {
  Weights w = Weights::random(Config::preset("tiny"), 1);
  w.collapse_decoder.pop_back();
  expect_error([&] { w.validate(); }, {"collapse_decoder", std::to_string(128 * 24)});
  TempDir dir;
  expect_error([&] { w.save(dir.file("x.safetensors")); }, {"collapse_decoder"});
  EXPECT_TRUE(dir.entries().empty());
}

TEST(CoreTables, MatchADirectComputation) {
  const Weights w = Weights::random(Config::preset("tiny"), 21);
  const CoreTables t = CoreTables::compute(w);
  const Config& c = w.cfg;
  const int64_t C = c.core_count, D = c.d_model, K = c.collapse_k, Ce = c.core_embed_dim;
  ASSERT_EQ(t.scale.size(), size_t(C * D));
  ASSERT_EQ(t.shift.size(), size_t(C * D));
  ASSERT_EQ(t.alpha.size(), size_t(C * K));
  auto f = [](bf16 v) { return double(bf16_to_float(v)); };
  for (int64_t ci = 0; ci < C; ++ci) {
    for (int64_t d = 0; d < D; ++d) {
      double sc = f(w.core_scale_b[d]), sh = f(w.core_shift_b[d]);
      for (int64_t e = 0; e < Ce; ++e) {
        sc += f(w.core_embed[ci * Ce + e]) * f(w.core_scale_w[d * Ce + e]);
        sh += f(w.core_embed[ci * Ce + e]) * f(w.core_shift_w[d * Ce + e]);
      }
      ASSERT_NEAR(t.scale[ci * D + d], 1.0 + sc, 1e-6 * (1 + std::fabs(sc))) << ci << "," << d;
      ASSERT_NEAR(t.shift[ci * D + d], sh, 1e-6 * (1 + std::fabs(sh))) << ci << "," << d;
    }
    std::vector<double> logit(K);
    double total = 0, alpha_sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      logit[k] = f(w.core_alpha_b[k]);
      for (int64_t e = 0; e < Ce; ++e)
        logit[k] += f(w.core_embed[ci * Ce + e]) * f(w.core_alpha_w[k * Ce + e]);
      total += std::exp(logit[k]);
    }
    for (int64_t k = 0; k < K; ++k) {
      ASSERT_NEAR(t.alpha[ci * K + k], std::exp(logit[k]) / total, 1e-6) << ci << "," << k;
      alpha_sum += t.alpha[ci * K + k];
    }
    EXPECT_NEAR(alpha_sum, 1.0, 1e-6);
  }
  // The tables are not trivial: the scale differs from 1 and cores differ from each other.
  EXPECT_NE(t.scale[0], 1.0f);
  EXPECT_NE(t.shift[0], t.shift[D]);
}

// The fingerprint that state files record: the same for the same parameters (a save and load
// included), different when any bit of any tensor or any config field differs.
TEST(WeightsFingerprint, ChangesWithAnyParameterBitAndTheConfig) {
  TempDir dir;
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  const Config cfg = Config::preset("tiny");
  const Weights w = Weights::random(cfg, seed);
  const uint64_t fp = w.fingerprint();
  EXPECT_EQ(Weights::random(cfg, seed).fingerprint(), fp);
  w.save(dir.file("m.safetensors"));
  EXPECT_EQ(Weights::load(dir.file("m.safetensors")).fingerprint(), fp);
  for (const Spec& t : spec_tensors(cfg)) {
    Weights v = w;
    std::vector<bf16>& tensor = v.*t.member;
    tensor[rng() % tensor.size()].bits ^= static_cast<uint16_t>(1u << (rng() % 16));
    EXPECT_NE(v.fingerprint(), fp) << t.name << ", seed " << seed;
  }
  Weights v = w;
  v.cfg.norm_eps *= 2;
  EXPECT_NE(v.fingerprint(), fp);
}

}  // namespace
}  // namespace swapffn

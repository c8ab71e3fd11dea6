// fp8 models (docs/FORMATS.md, "fp8 models"): quantising a model, the file's round trip, each bad
// file refused naming the tensor, the fingerprint, and which backends take such a model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine_test_options.hpp"
#include "io_test_util.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/check.hpp"
#include "swapffn/random.hpp"
#include "swapffn/safetensors.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {
namespace {

namespace st = safetensors;
using testing::expect_error;
using testing::TempDir;

// Partial blocks on both edges: D = 200 and F = 300 are not multiples of 128.
Config odd_config() {
  Config c = Config::preset("tiny");
  c.d_model = 200;
  c.d_ff = 300;
  return c;
}

void expect_same_fp8(const fp8::ScaledWeight& a, const fp8::ScaledWeight& b, const char* what) {
  EXPECT_EQ(a.rows, b.rows) << what;
  EXPECT_EQ(a.cols, b.cols) << what;
  EXPECT_EQ(a.data, b.data) << what;
  ASSERT_EQ(a.scale.size(), b.scale.size()) << what;
  EXPECT_EQ(std::memcmp(a.scale.data(), b.scale.data(), a.scale.size() * 4), 0) << what;
}

// The recipe's error for one value: half an e4m3 step (2^-4 relative in the normal range, 2^-10 of
// the scale among subnormals), then the rounding of the product to bf16 (2^-9 relative).
double recipe_bound(double original, double scale) {
  return (std::max(std::fabs(original) * 0x1p-4, scale * 0x1p-10)) * (1 + 0x1p-8) + std::fabs(original) * 0x1p-8;
}

TEST(Fp8Model, QuantizedWeightsAreTheRecipeAndWithinItsError) {
  for (const Config& cfg : {Config::preset("tiny"), odd_config()}) {
    SCOPED_TRACE(cfg.to_json_string());
    const Weights w = Weights::random(cfg, std::random_device{}());
    const Weights q = w.quantized_fp8(fp8::Scaling::blocks);
    ASSERT_TRUE(q.fp8_ffn.has_value());
    const fp8::FfnWeights want = fp8::quantize_ffn(fp8::Scaling::blocks, w.w1, w.w3, w.w2, cfg.d_model, cfg.d_ff);
    expect_same_fp8(q.fp8_ffn->w1, want.w1, "w1");
    expect_same_fp8(q.fp8_ffn->w3, want.w3, "w3");
    expect_same_fp8(q.fp8_ffn->w2, want.w2, "w2");
    EXPECT_EQ(q.fp8_ffn->w1.scale.size(), size_t(fp8::blocks(cfg.d_ff) * fp8::blocks(cfg.d_model)));
    // Everything but the FFN is the model's own; the FFN holds its dequantised values.
    EXPECT_EQ(q.router_w, w.router_w);
    EXPECT_EQ(q.collapse_basis, w.collapse_basis);
    struct Pair {
      const std::vector<bf16>& got;
      const std::vector<bf16>& original;
      const fp8::ScaledWeight& fp8;
    };
    for (const Pair& p : {Pair{q.w1, w.w1, q.fp8_ffn->w1}, Pair{q.w3, w.w3, q.fp8_ffn->w3},
                          Pair{q.w2, w.w2, q.fp8_ffn->w2}}) {
      double num = 0, den = 0;
      for (int64_t r = 0; r < p.fp8.rows; ++r)
        for (int64_t c = 0; c < p.fp8.cols; ++c) {
          const size_t i = size_t(r * p.fp8.cols + c);
          const double got = bf16_to_float(p.got[i]), orig = bf16_to_float(p.original[i]);
          ASSERT_EQ(p.got[i], float_to_bf16(p.fp8.dequant(r, c))) << r << "," << c;
          const double scale = p.fp8.scale[size_t((r / 128) * fp8::blocks(p.fp8.cols) + c / 128)];
          ASSERT_LE(std::fabs(got - orig), recipe_bound(orig, scale)) << r << "," << c;
          num += (got - orig) * (got - orig);
          den += orig * orig;
        }
      // e4m3 keeps 3 mantissa bits: a few percent, never nothing (a loader that kept bf16 would).
      EXPECT_GT(std::sqrt(num / den), 0.005);
      EXPECT_LT(std::sqrt(num / den), 0.05);
    }
  }
}

TEST(Fp8Model, SaveLoadRoundTripIsBitwise) {
  TempDir dir;
  for (const Config& cfg : {Config::preset("tiny"), odd_config()}) {
    const Weights q = Weights::random(cfg, 17).quantized_fp8(fp8::Scaling::blocks);
    const std::string path = dir.file("q.safetensors");
    q.save(path);
    const Weights back = Weights::load(path);
    ASSERT_TRUE(back.fp8_ffn.has_value());
    expect_same_fp8(back.fp8_ffn->w1, q.fp8_ffn->w1, "w1");
    expect_same_fp8(back.fp8_ffn->w3, q.fp8_ffn->w3, "w3");
    expect_same_fp8(back.fp8_ffn->w2, q.fp8_ffn->w2, "w2");
    EXPECT_EQ(back.w1, q.w1);
    EXPECT_EQ(back.w3, q.w3);
    EXPECT_EQ(back.w2, q.w2);
    EXPECT_EQ(back.router_w, q.router_w);
    EXPECT_EQ(back.fingerprint(), q.fingerprint());
    // The file: e4m3 FFN of the bf16 shapes, F32 scales per 128x128 block, the recipe, the rest BF16.
    st::Reader r(path);
    const int64_t D = cfg.d_model, F = cfg.d_ff;
    EXPECT_EQ(r.at("w1.weight").dtype, st::DType::F8_E4M3);
    EXPECT_EQ(r.at("w1.weight").shape, (std::vector<int64_t>{F, D}));
    EXPECT_EQ(r.at("w2.weight").shape, (std::vector<int64_t>{D, F}));
    EXPECT_EQ(r.at("w3.weight_scale").dtype, st::DType::F32);
    EXPECT_EQ(r.at("w3.weight_scale").shape, (std::vector<int64_t>{fp8::blocks(F), fp8::blocks(D)}));
    EXPECT_EQ(r.at("w2.weight_scale").shape, (std::vector<int64_t>{fp8::blocks(D), fp8::blocks(F)}));
    EXPECT_EQ(r.at("router_w").dtype, st::DType::BF16);
    EXPECT_EQ(r.tensors().size(), 22u);  // the 19 of SPEC section 2 and three scales
    EXPECT_EQ(nlohmann::json::parse(r.metadata_at("swapffn.quantization")),
              nlohmann::json::parse(R"({"format":"fp8_e4m3","scaling":"blocks","weight_block":[128,128],)"
                                    R"("activation_block":[1,128],"scale":"amax/448 fp32"})"));
    EXPECT_EQ(r.to_e4m3("w1.weight"), q.fp8_ffn->w1.data);
    // A bf16 model's file has no fp8 tensor and no recipe.
    Weights::random(cfg, 17).save(dir.file("b.safetensors"));
    EXPECT_FALSE(Weights::load(dir.file("b.safetensors")).fp8_ffn.has_value());
    EXPECT_TRUE(st::Reader(dir.file("b.safetensors")).metadata().count("swapffn.quantization") == 0);
  }
}

TEST(Fp8Model, QuantizingAnFp8ModelIsRefused) {
  const Weights q = Weights::random(Config::preset("tiny"), 1).quantized_fp8(fp8::Scaling::blocks);
  expect_error([&] { q.quantized_fp8(fp8::Scaling::blocks); }, {"already in fp8"});
}

TEST(Fp8Model, FingerprintTellsItFromTheBf16OriginalAndFromItsDequantisedValues) {
  const Weights w = Weights::random(Config::preset("tiny"), 4);
  const Weights q = w.quantized_fp8(fp8::Scaling::blocks);
  EXPECT_NE(q.fingerprint(), w.fingerprint());
  EXPECT_NE(q.fingerprint(), q.as_bf16().fingerprint());  // the same bf16 values, but not fp8
  EXPECT_EQ(w.fingerprint(), w.as_bf16().fingerprint());   // a bf16 model's is as before
  for (int which = 0; which < 2; ++which) {  // every fp8 byte and scale counts
    Weights v = q;
    if (which == 0) v.fp8_ffn->w3.data[123] ^= 1;
    else v.fp8_ffn->w2.scale[1] *= 2;
    EXPECT_NE(v.fingerprint(), q.fingerprint()) << which;
  }
}

TEST(Fp8Model, ValidateKeepsTheFp8AndBf16FormsTogether) {
  const Weights q = Weights::random(Config::preset("tiny"), 5).quantized_fp8(fp8::Scaling::blocks);
  EXPECT_NO_THROW(q.validate());
  Weights v = q;
  v.w3[9].bits ^= 1;
  expect_error([&] { v.validate(); }, {"w3.weight", "not the fp8 weight dequantised"});
  v = q;
  v.fp8_ffn->w1.data[0] = 0x7F;  // NaN
  expect_error([&] { v.validate(); }, {"w1.weight", "fp8 value 0 is NaN"});
  // set_fp8_ffn refuses a weight of the wrong shape and leaves the model as it was.
  Weights u = Weights::random(Config::preset("tiny"), 5);
  const Weights before = u;
  fp8::FfnWeights bad = *q.fp8_ffn;
  std::swap(bad.w2.rows, bad.w2.cols);
  expect_error([&] { u.set_fp8_ffn(bad); }, {"w2.weight", "[384, 128]", "expected [128, 384]"});
  EXPECT_FALSE(u.fp8_ffn.has_value());
  EXPECT_EQ(u.w1, before.w1);
  bad = *q.fp8_ffn;
  bad.w1.scale[2] = 0.0f;
  expect_error([&] { u.set_fp8_ffn(bad); }, {"w1.weight", ": scale 2 is not"});
  EXPECT_EQ(u.w1, before.w1);
}

// ---------------------------------------------------------------------------------------------
// Bad files, written by hand so a test can change one tensor or the metadata.

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  st::DType dtype;
  std::vector<std::byte> bytes;
};

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A file's tensors and metadata as they are.
struct File {
  std::vector<Tensor> tensors;
  std::map<std::string, std::string> metadata;
};
File read_file(const std::string& path) {
  st::Reader r(path);
  File f{{}, r.metadata()};
  for (const auto& t : r.tensors()) {
    std::vector<std::byte> b(size_t(t.end - t.begin));
    std::memcpy(b.data(), r.data(t), b.size());
    f.tensors.push_back({t.name, t.shape, t.dtype, b});
  }
  return f;
}

class BadFp8Model : public ::testing::Test {
 protected:
  void SetUp() override {
    q.save(dir.file("good.safetensors"));
    good = read_file(dir.file("good.safetensors"));
    w.save(dir.file("bf16.safetensors"));
    bf16 = read_file(dir.file("bf16.safetensors"));
  }
  // The fp8 file's tensors, to edit.
  std::vector<Tensor> tensors() const { return good.tensors; }
  void expect_refused(const std::vector<Tensor>& ts, std::initializer_list<std::string_view> what,
                      const std::map<std::string, std::string>* meta = nullptr) {
    st::Writer wr;
    for (const auto& [k, v] : meta ? *meta : good.metadata) wr.set_metadata(k, v);
    for (const Tensor& t : ts) wr.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
    const std::string path = dir.file("bad.safetensors");
    wr.write(path);
    const std::string before = testing::read_bytes(path);
    expect_error([&] { Weights::load(path); }, what);
    EXPECT_EQ(testing::read_bytes(path), before);
  }
  static Tensor& find(std::vector<Tensor>& ts, const std::string& name) {
    for (Tensor& t : ts)
      if (t.name == name) return t;
    ADD_FAILURE() << "no tensor " << name;
    return ts.front();
  }
  static std::vector<Tensor> without(std::vector<Tensor> ts, const std::string& name) {
    std::erase_if(ts, [&](const Tensor& t) { return t.name == name; });
    return ts;
  }
  static void set_scale(std::vector<Tensor>& ts, const std::string& name, size_t i, float v) {
    std::memcpy(find(ts, name).bytes.data() + 4 * i, &v, 4);
  }

  TempDir dir;
  Weights w = Weights::random(Config::preset("tiny"), 9);
  Weights q = w.quantized_fp8(fp8::Scaling::blocks);
  File good, bf16;
};

TEST_F(BadFp8Model, TheUnchangedFileLoads) {
  st::Writer wr;
  for (const auto& [k, v] : good.metadata) wr.set_metadata(k, v);
  for (const Tensor& t : tensors()) wr.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  wr.write(dir.file("ok.safetensors"));
  EXPECT_EQ(Weights::load(dir.file("ok.safetensors")).fingerprint(), q.fingerprint());
}

TEST_F(BadFp8Model, Fp8DataWithoutItsScales) {
  expect_refused(without(tensors(), "w1.weight_scale"), {"'w1.weight'", "F8_E4M3", "'w1.weight_scale'", "missing"});
}

TEST_F(BadFp8Model, ScalesWithoutFp8Data) {
  // A bf16 model with one scale tensor added.
  std::vector<Tensor> ts = bf16.tensors, fp8 = tensors();
  ts.push_back(find(fp8, "w3.weight_scale"));
  expect_refused(ts, {"'w3.weight_scale'", "holds fp8 scales", "'w3.weight' is BF16"}, &bf16.metadata);
}

TEST_F(BadFp8Model, ScalesOfTheWrongBlockShape) {
  auto ts = tensors();
  std::swap(find(ts, "w2.weight_scale").shape[0], find(ts, "w2.weight_scale").shape[1]);  // [1, 3] -> [3, 1]
  expect_refused(ts, {"'w2.weight_scale'", "wrong shape [3, 1]", "expected [1, 3]", "128x128"});
  ts = tensors();
  Tensor& s = find(ts, "w1.weight_scale");  // [3, 1]: per 64 rows would be [6, 2]
  s.shape = {6, 2};
  s.bytes.resize(48);
  expect_refused(ts, {"'w1.weight_scale'", "wrong shape [6, 2]", "expected [3, 1]"});
}

TEST_F(BadFp8Model, ScalesOfTheWrongDtype) {
  auto ts = tensors();
  Tensor& s = find(ts, "w1.weight_scale");
  s.dtype = st::DType::BF16;
  s.bytes.resize(s.bytes.size() / 2);
  expect_refused(ts, {"'w1.weight_scale'", "wrong dtype BF16", "F32"});
}

TEST_F(BadFp8Model, ScalesThatAreNotFinitePositiveNumbers) {
  for (float bad : {std::nanf(""), INFINITY, -INFINITY, 0.0f, -0.0f, -0.5f}) {
    SCOPED_TRACE(bad);
    auto ts = tensors();
    set_scale(ts, "w3.weight_scale", 1, bad);
    expect_refused(ts, {"'w3.weight_scale'", "not a finite positive number", "index 1"});
  }
}

TEST_F(BadFp8Model, NanCodes) {
  for (uint8_t nan : {uint8_t{0x7F}, uint8_t{0xFF}}) {
    auto ts = tensors();
    find(ts, "w2.weight").bytes[77] = std::byte{nan};
    expect_refused(ts, {"'w2.weight'", "fp8 value 77 is NaN"});
  }
}

TEST_F(BadFp8Model, Fp8OnAnotherTensor) {
  for (const char* name : {"router_w", "collapse_decoder"}) {
    auto ts = tensors();
    Tensor& t = find(ts, name);
    t.dtype = st::DType::F8_E4M3;
    t.bytes.resize(t.bytes.size() / 2, std::byte{0x38});
    expect_refused(ts, {std::string("'") + name + "'", "F8_E4M3", "only w1.weight, w3.weight and w2.weight"});
  }
}

TEST_F(BadFp8Model, AMixOfFp8AndBf16Weights) {
  auto ts = without(tensors(), "w3.weight_scale");
  Tensor& t = find(ts, "w3.weight");
  t.dtype = st::DType::BF16;
  t.bytes = bytes_of(q.w3);
  expect_refused(ts, {"'w3.weight' is BF16", "'w1.weight' is F8_E4M3", "all of"});
}

TEST_F(BadFp8Model, Fp8WeightOfTheWrongShape) {
  auto ts = tensors();
  std::swap(find(ts, "w2.weight").shape[0], find(ts, "w2.weight").shape[1]);
  expect_refused(ts, {"'w2.weight'", "wrong shape [384, 128]", "expected [128, 384]"});
}

TEST_F(BadFp8Model, MissingOrForeignRecipe) {
  auto meta = good.metadata;
  meta.erase("swapffn.quantization");
  expect_refused(tensors(), {"swapffn.quantization", "F8_E4M3"}, &meta);
  meta["swapffn.quantization"] = R"({"format":"fp8_e4m3","weight_block":[64,64],"activation_block":[1,128],)"
                                 R"("scale":"amax/448 fp32"})";
  expect_refused(tensors(), {"swapffn.quantization", "not the recipe", "[64,64]"}, &meta);
  meta["swapffn.quantization"] = "{not json";
  expect_refused(tensors(), {"swapffn.quantization", "not the recipe"}, &meta);
  // A bf16 model that names a recipe.
  meta = bf16.metadata;
  meta["swapffn.quantization"] = good.metadata.at("swapffn.quantization");
  expect_refused(bf16.tensors, {"swapffn.quantization", "not F8_E4M3"}, &meta);
}

TEST_F(BadFp8Model, FilesWrittenBeforeTheRowsScalingStillLoad) {
  // The blocks recipe as files named it before "scaling" existed.
  auto meta = good.metadata;
  meta["swapffn.quantization"] =
      R"({"format":"fp8_e4m3","weight_block":[128,128],"activation_block":[1,128],"scale":"amax/448 fp32"})";
  st::Writer wr;
  for (const auto& [k, v] : meta) wr.set_metadata(k, v);
  for (const Tensor& t : tensors()) wr.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  wr.write(dir.file("old.safetensors"));
  const Weights back = Weights::load(dir.file("old.safetensors"));
  EXPECT_EQ(back.fp8_ffn->scaling(), fp8::Scaling::blocks);
  EXPECT_EQ(back.fingerprint(), q.fingerprint());
}

TEST_F(BadFp8Model, UnknownOrMismatchedScaling) {
  auto meta = good.metadata;
  meta["swapffn.quantization"] = R"({"format":"fp8_e4m3","scaling":"tensor","scale":"amax/448 fp32"})";
  expect_refused(tensors(), {"swapffn.quantization", "unknown fp8 scaling 'tensor'", "known: blocks, rows"}, &meta);
  meta["swapffn.quantization"] = R"({"format":"fp8_e4m3","scaling":3})";
  expect_refused(tensors(), {"swapffn.quantization", "names no \"scaling\""}, &meta);
  // The rows recipe named over block-shaped scales: refused at the first weight's scales.
  const Weights r = w.quantized_fp8(fp8::Scaling::rows);
  r.save(dir.file("rows.safetensors"));
  meta["swapffn.quantization"] = read_file(dir.file("rows.safetensors")).metadata.at("swapffn.quantization");
  expect_refused(tensors(), {"'w1.weight_scale'", "wrong shape [3, 1]", "expected [384, 1]", "scaling 'rows'",
                             "per output channel"},
                 &meta);
  // A rows recipe with a field of the blocks one.
  meta["swapffn.quantization"] = R"({"format":"fp8_e4m3","scaling":"rows","weight_block":[128,128]})";
  expect_refused(tensors(), {"swapffn.quantization", "not the recipe swapffn runs for scaling 'rows'"}, &meta);
}

// The rows scaling's file: [rows, 1] scales, its recipe, a bitwise round trip; each bad scale refused.
TEST_F(BadFp8Model, RowsScaledFiles) {
  const Weights r = w.quantized_fp8(fp8::Scaling::rows);
  EXPECT_EQ(r.fp8_ffn->scaling(), fp8::Scaling::rows);
  const std::string path = dir.file("rows.safetensors");
  r.save(path);
  const Weights back = Weights::load(path);
  ASSERT_TRUE(back.fp8_ffn.has_value());
  EXPECT_EQ(back.fp8_ffn->scaling(), fp8::Scaling::rows);
  expect_same_fp8(back.fp8_ffn->w2, r.fp8_ffn->w2, "w2");
  EXPECT_EQ(back.w1, r.w1);
  EXPECT_EQ(back.fingerprint(), r.fingerprint());
  EXPECT_NE(r.fingerprint(), q.fingerprint());
  const File f = read_file(path);
  const int64_t D = w.cfg.d_model, F = w.cfg.d_ff;
  st::Reader rd(path);
  EXPECT_EQ(rd.at("w1.weight_scale").shape, (std::vector<int64_t>{F, 1}));
  EXPECT_EQ(rd.at("w2.weight_scale").shape, (std::vector<int64_t>{D, 1}));
  EXPECT_EQ(nlohmann::json::parse(rd.metadata_at("swapffn.quantization"))["scaling"], "rows");
  const auto refused = [&](const std::vector<Tensor>& ts, std::initializer_list<std::string_view> what) {
    st::Writer wr;
    for (const auto& [k, v] : f.metadata) wr.set_metadata(k, v);
    for (const Tensor& t : ts) wr.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
    wr.write(dir.file("bad-rows.safetensors"));
    expect_error([&] { Weights::load(dir.file("bad-rows.safetensors")); }, what);
  };
  for (float bad : {std::nanf(""), INFINITY, 0.0f, -0.5f}) {
    SCOPED_TRACE(bad);
    auto ts = f.tensors;
    set_scale(ts, "w2.weight_scale", 5, bad);
    refused(ts, {"'w2.weight_scale'", "not a finite positive number", "index 5"});
  }
  // Rows-scaled data with block-shaped scales, and per-channel scales of the wrong length.
  auto ts = f.tensors;
  find(ts, "w3.weight_scale") = find(good.tensors, "w3.weight_scale");
  refused(ts, {"'w3.weight_scale'", "wrong shape [3, 1]", "expected [384, 1]", "per output channel"});
  ts = f.tensors;
  Tensor& s = find(ts, "w1.weight_scale");
  s.shape = {F};
  refused(ts, {"'w1.weight_scale'", "wrong shape [384]", "expected [384, 1]"});
  // A file mixing scalings cannot be written: set_fp8_ffn refuses weights of two scalings.
  fp8::FfnWeights mixed = *r.fp8_ffn;
  mixed.w2 = q.fp8_ffn->w2;
  Weights u = w;
  expect_error([&] { u.set_fp8_ffn(mixed); }, {"w2.weight", "scaling 'blocks'", "w1.weight's is 'rows'"});
  EXPECT_FALSE(u.fp8_ffn.has_value());
}

// ---------------------------------------------------------------------------------------------
// Backends

TEST(Fp8Model, BackendsWithoutFp8SupportRefuseItNamingTheRemedy) {
  const Weights q = Weights::random(Config::preset("tiny"), 6).quantized_fp8(fp8::Scaling::blocks);
  EXPECT_TRUE(backend_facts("reference").takes_fp8_models);
  EXPECT_FALSE(backend_facts("fused").takes_fp8_models);
  EXPECT_FALSE(backend_facts("unfused").takes_fp8_models);
  // In every build, before anything about CUDA or a GPU.
  for (const char* b : {"fused", "unfused"})
    expect_error([&] { make_engine(b, q); },
                 {"stores its FFN in fp8", "backend '" + std::string(b) + "' runs bf16 models", "fused-fp8"});
  expect_error([&] { make_engine("nope", q); }, {"unknown backend 'nope'"});
}

TEST(Fp8Model, TheReferenceRunsTheDequantisedWeightsAndPassesItsCheck) {
  const Weights q = Weights::random(Config::preset("tiny"), 7).quantized_fp8(fp8::Scaling::blocks);
  auto eng = make_engine("reference", q, testing::threads(2));
  const CheckReport r = check_backend(q, *eng, 2, 2, 11, Tolerance::fp32(), 2);
  EXPECT_TRUE(r.passed()) << r.summary();
  EXPECT_EQ(r.delta_rel_l2, 0.0);
  // Bitwise what the same values as a bf16 model give.
  auto bf = make_engine("reference", q.as_bf16(), testing::threads(2));
  const std::vector<float> x = decode_inputs(3, 2, 2, q.cfg.d_model);
  std::vector<float> d1(x.size(), NAN), d2(x.size(), NAN);
  State s1 = State::init(q.cfg, 2), s2 = State::init(q.cfg, 2);
  eng->decode(x.data(), d1.data(), 2, s1);
  bf->decode(x.data(), d2.data(), 2, s2);
  EXPECT_EQ(d1, d2);
  EXPECT_EQ(s1, s2);
  // ... and not what the bf16 original gives (the weights did change).
  auto orig = make_engine("reference", Weights::random(Config::preset("tiny"), 7), testing::threads(2));
  State s3 = State::init(q.cfg, 2);
  std::vector<float> d3(x.size(), NAN);
  orig->decode(x.data(), d3.data(), 2, s3);
  EXPECT_NE(d1, d3);
}

}  // namespace
}  // namespace swapffn

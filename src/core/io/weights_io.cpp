// Weights::load / Weights::save: the model file of SPEC section 2, with the FFN in bf16 or, in an
// fp8 model, in e4m3 with the scales of its scaling (docs/FORMATS.md, "fp8 models").
#include <cmath>
#include <set>

#include "core/io/strict_json.hpp"
#include "core/printable.hpp"
#include "core/weight_tensors.hpp"
#include "swapffn/error.hpp"
#include "swapffn/safetensors.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {

namespace st = safetensors;

namespace {

// The metadata key naming an fp8 model's recipe, and the recipe of each scaling (swapffn/fp8.hpp).
// A `blocks` file may also name its recipe without "scaling" (files written before `rows` existed).
constexpr const char* kQuantizationKey = "swapffn.quantization";
constexpr const char* kLegacyBlocksRecipe =
    R"({"format":"fp8_e4m3","weight_block":[128,128],"activation_block":[1,128],"scale":"amax/448 fp32"})";
const char* recipe_of(fp8::Scaling s) {
  return s == fp8::Scaling::rows
             ? R"({"format":"fp8_e4m3","scaling":"rows","weight_scale":"per output channel",)"
               R"("activation_scale":"per row","scale":"amax/448 fp32"})"
             : R"({"format":"fp8_e4m3","scaling":"blocks","weight_block":[128,128],"activation_block":[1,128],)"
               R"("scale":"amax/448 fp32"})";
}
constexpr const char* kFp8Weights = "w1.weight, w3.weight and w2.weight";

bool is_fp8_weight(std::string_view n) { return n == "w1.weight" || n == "w3.weight" || n == "w2.weight"; }

// Whether the file stores the FFN in fp8: all three weights in F8_E4M3, or none of them.
bool ffn_is_fp8(const st::Reader& r, const std::string& f) {
  const st::TensorInfo *fp8 = nullptr, *other = nullptr;
  for (const char* n : {"w1.weight", "w3.weight", "w2.weight"})
    if (const st::TensorInfo* t = r.find(n)) {
      if (t->dtype == st::DType::F8_E4M3) {
        if (!fp8) fp8 = t;
      } else if (!other) {
        other = t;
      }
    }
  SWAPFFN_REQUIRE(!fp8 || !other, f + "tensor '" + other->name + "' is " + st::dtype_name(other->dtype) + " but '" +
                                      fp8->name + "' is F8_E4M3: an fp8 model stores all of " + kFp8Weights +
                                      " in F8_E4M3");
  return fp8 != nullptr;
}

// The scaling the file's recipe names (fp8 FFN), after checking that a bf16 FFN names none.
fp8::Scaling read_recipe(const st::Reader& r, bool fp8, const std::string& f) {
  auto it = r.metadata().find(kQuantizationKey);
  if (!fp8) {
    SWAPFFN_REQUIRE(it == r.metadata().end(), f + "__metadata__ '" + kQuantizationKey + "' names a quantisation but " +
                                                  kFp8Weights + " are not F8_E4M3");
    return fp8::Scaling::blocks;
  }
  SWAPFFN_REQUIRE(it != r.metadata().end(), f + "the FFN is F8_E4M3 but __metadata__ has no '" + kQuantizationKey +
                                                "' (the recipe of its scales)");
  const StrictJson got = parse_strict_json(it->second, {4, 16, 16});
  const std::string bad = f + "__metadata__ '" + kQuantizationKey + "' is " + in_quotes(it->second);
  SWAPFFN_REQUIRE(got.error.empty() && got.value.is_object(),
                  bad + ", not the recipe of a scaling (not a JSON object)");
  if (got.value == nlohmann::json::parse(kLegacyBlocksRecipe)) return fp8::Scaling::blocks;
  const auto name = got.value.find("scaling");
  SWAPFFN_REQUIRE(name != got.value.end() && name->is_string(),
                  bad + ", not the recipe of a scaling (it names no \"scaling\": blocks or rows)");
  fp8::Scaling s{};
  try {
    s = fp8::parse_scaling(name->get<std::string>());
  } catch (const Error& e) {
    SWAPFFN_FAIL(bad + ": " + e.what());
  }
  SWAPFFN_REQUIRE(got.value == nlohmann::json::parse(recipe_of(s)),
                  bad + ", not the recipe swapffn runs for scaling '" + fp8::scaling_name(s) + "': " + recipe_of(s));
  return s;
}

// Reads an fp8 weight and its scales, naming the tensor at fault.
fp8::ScaledWeight read_fp8_weight(const st::Reader& r, fp8::Scaling scaling, const std::string& name, int64_t rows,
                                  int64_t cols, const std::string& f) {
  const st::TensorInfo& data = r.at(name);
  SWAPFFN_REQUIRE(data.shape == (std::vector<int64_t>{rows, cols}),
                  f + "tensor '" + name + "' has wrong shape " + st::shape_string(data.shape) + ", expected " +
                      st::shape_string({rows, cols}) + " for the config");
  const std::string sname = scale_tensor_name(name);
  const st::TensorInfo* scale = r.find(sname);
  SWAPFFN_REQUIRE(scale != nullptr, f + "tensor '" + name + "' is F8_E4M3 but its scales '" + sname +
                                        "' are missing");
  SWAPFFN_REQUIRE(scale->dtype == st::DType::F32, f + "tensor '" + sname + "' has wrong dtype " +
                                                      st::dtype_name(scale->dtype) + " (scales are F32)");
  const std::vector<int64_t> shape = fp8::weight_scale_shape(scaling, rows, cols);
  SWAPFFN_REQUIRE(scale->shape == shape,
                  f + "tensor '" + sname + "' has wrong shape " + st::shape_string(scale->shape) + ", expected " +
                      st::shape_string(shape) + " for scaling '" + fp8::scaling_name(scaling) +
                      (scaling == fp8::Scaling::rows ? "' (one scale per output channel of '"
                                                     : "' (one scale per 128x128 block of '") +
                      name + "')");
  fp8::ScaledWeight q;
  q.scaling = scaling;
  q.rows = rows;
  q.cols = cols;
  q.data = r.to_e4m3(name);
  q.scale = r.to_float(sname);
  for (size_t i = 0; i < q.scale.size(); ++i)
    SWAPFFN_REQUIRE(std::isfinite(q.scale[i]) && q.scale[i] > 0.0f,
                    f + "tensor '" + sname + "' has a scale that is not a finite positive number at index " +
                        std::to_string(i));
  try {
    q.validate(("tensor '" + name + "'").c_str());
  } catch (const Error& e) {
    SWAPFFN_FAIL(f + e.what());
  }
  return q;
}

}  // namespace

Weights Weights::load(const std::string& path) {
  st::Reader r(path);
  const std::string f = "model " + path + ": ";
  auto meta = r.metadata().find("swapffn.config");
  SWAPFFN_REQUIRE(meta != r.metadata().end(),
                  f + "__metadata__ has no 'swapffn.config' (not a swapffn model?)");
  Weights w;
  try {
    w.cfg = Config::from_json_string(meta->second);
  } catch (const Error& e) {
    SWAPFFN_FAIL(f + "invalid swapffn.config: " + e.what());
  }
  const bool fp8 = ffn_is_fp8(r, f);
  const fp8::Scaling scaling = read_recipe(r, fp8, f);

  std::set<std::string> expected;
  for_each_weight_tensor(w, [&](std::string_view name, const std::vector<int64_t>& shape,
                                std::vector<bf16>& t) {
    const std::string n(name);
    expected.insert(n);
    const st::TensorInfo* info = r.find(n);
    SWAPFFN_REQUIRE(info != nullptr, f + "missing tensor '" + n + "'");
    if (fp8 && is_fp8_weight(n)) return;  // read below, with its scales
    SWAPFFN_REQUIRE(info->dtype != st::DType::F8_E4M3, f + "tensor '" + n + "' is F8_E4M3, but only " +
                                                           kFp8Weights + " may be stored in fp8");
    SWAPFFN_REQUIRE(info->dtype == st::DType::BF16 || info->dtype == st::DType::F32,
                    f + "tensor '" + n + "' has wrong dtype " + st::dtype_name(info->dtype) +
                        " (accepted: BF16, F32)");
    SWAPFFN_REQUIRE(info->shape == shape, f + "tensor '" + n + "' has wrong shape " +
                                              st::shape_string(info->shape) + ", expected " +
                                              st::shape_string(shape) + " for the config");
    t = r.to_bf16(n);  // F32 rounds to nearest even bf16
    for (size_t i = 0; i < t.size(); ++i)
      SWAPFFN_REQUIRE(std::isfinite(bf16_to_float(t[i])),
                      f + "tensor '" + n + "' has a non-finite value at index " + std::to_string(i));
  });
  if (fp8) {
    fp8::FfnWeights q;
    for_each_fp8_weight(w, q, [&](std::string_view name, fp8::ScaledWeight& qw, auto&, int64_t rows,
                                  int64_t cols) {
      qw = read_fp8_weight(r, scaling, std::string(name), rows, cols, f);
      expected.insert(scale_tensor_name(name));
    });
    w.set_fp8_ffn(std::move(q));
  }
  for (const auto& t : r.tensors()) {
    if (expected.count(t.name)) continue;
    for (const char* n : {"w1.weight", "w3.weight", "w2.weight"})
      SWAPFFN_REQUIRE(t.name != scale_tensor_name(n), f + "tensor '" + t.name + "' holds fp8 scales, but '" + n +
                                                          "' is " + st::dtype_name(r.at(n).dtype) +
                                                          ", not F8_E4M3");
    SWAPFFN_FAIL(f + "extra tensor " + in_quotes(t.name) + " (not in SPEC)");
  }
  w.validate();
  return w;
}

void Weights::save(const std::string& path) const {
  validate();
  st::Writer wr;
  wr.set_metadata("swapffn.config", cfg.to_json_string());
  wr.set_metadata("format", "pt");
  if (fp8_ffn) wr.set_metadata(kQuantizationKey, recipe_of(fp8_ffn->scaling()));
  for_each_weight_tensor(*this, [&](std::string_view name, const std::vector<int64_t>& shape,
                                    const std::vector<bf16>& t) {
    if (fp8_ffn && is_fp8_weight(name)) return;  // written below
    wr.add_bf16(std::string(name), shape, t);
  });
  if (fp8_ffn)
    for_each_fp8_weight(*this, *fp8_ffn, [&](std::string_view name, const fp8::ScaledWeight& q, auto&,
                                             int64_t rows, int64_t cols) {
      wr.add_e4m3(std::string(name), {rows, cols}, q.data);
      wr.add_f32(scale_tensor_name(name), fp8::weight_scale_shape(q.scaling, rows, cols), q.scale);
    });
  wr.write(path);
}

}  // namespace swapffn

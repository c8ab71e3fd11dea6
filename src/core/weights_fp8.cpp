// The fp8 form of a model's FFN (docs/FORMATS.md, "fp8 models"): storing it, checking that the
// bf16 members hold its dequantised values, and quantising a bf16 model.
#include <array>
#include <string>

#include "core/weight_tensors.hpp"
#include "swapffn/error.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {
namespace {

// Every e4m3 code as a float: dequantising a whole weight needs no per-value ldexp.
const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int i = 0; i < 256; ++i) v[size_t(i)] = fp8::e4m3_to_float(static_cast<uint8_t>(i));
    return v;
  }();
  return t;
}

void validate_shape(std::string_view name, const fp8::ScaledWeight& q, fp8::Scaling scaling, int64_t rows,
                    int64_t cols) {
  const std::string n(name);
  SWAPFFN_REQUIRE(q.scaling == scaling, n + ": fp8 weight in scaling '" + fp8::scaling_name(q.scaling) +
                                            "', but w1.weight's is '" + fp8::scaling_name(scaling) +
                                            "' (an FFN has one scaling)");
  SWAPFFN_REQUIRE(q.rows == rows && q.cols == cols,
                  n + ": fp8 weight is [" + std::to_string(q.rows) + ", " + std::to_string(q.cols) + "], expected [" +
                      std::to_string(rows) + ", " + std::to_string(cols) + "] for the config");
  q.validate(n.c_str());
}

// Calls f(i, bf16(float(e4m3) * scale)) for every value i of q in order: the values the bf16 paths
// and the reference run for an fp8 weight. Stops early when f returns false.
template <class F>
void for_each_dequantised(const fp8::ScaledWeight& q, F&& f) {
  const auto& table = e4m3_table();
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) {
      const size_t i = size_t(r * q.cols + c);
      if (!f(i, float_to_bf16(table[q.data[i]] * q.scale_at(r, c)))) return;
    }
}

std::vector<bf16> dequantize(const fp8::ScaledWeight& q) {
  std::vector<bf16> out(q.data.size());
  for_each_dequantised(q, [&](size_t i, bf16 v) {
    out[i] = v;
    return true;
  });
  return out;
}

}  // namespace

void Weights::set_fp8_ffn(fp8::FfnWeights q) {
  std::vector<std::vector<bf16>> values;  // all computed before anything changes
  for_each_fp8_weight(*this, q, [&](std::string_view name, const fp8::ScaledWeight& qw, auto&, int64_t rows,
                                    int64_t cols) {
    validate_shape(name, qw, q.scaling(), rows, cols);
    values.push_back(dequantize(qw));
  });
  size_t i = 0;
  for_each_fp8_weight(*this, q, [&](std::string_view, const fp8::ScaledWeight&, std::vector<bf16>& w, int64_t,
                                    int64_t) { w = std::move(values[i++]); });
  fp8_ffn = std::move(q);
}

Weights Weights::quantized_fp8(fp8::Scaling scaling) const {
  SWAPFFN_REQUIRE(!fp8_ffn, "quantize: the model's FFN is already in fp8");
  validate();
  Weights out = *this;
  out.set_fp8_ffn(fp8::quantize_ffn(scaling, w1, w3, w2, cfg.d_model, cfg.d_ff));
  return out;
}

Weights Weights::as_bf16() const {
  Weights out = *this;
  out.fp8_ffn.reset();
  return out;
}

void validate_fp8_ffn(const Weights& w) {
  if (!w.fp8_ffn) return;
  const fp8::Scaling scaling = w.fp8_ffn->scaling();
  for_each_fp8_weight(w, *w.fp8_ffn, [&](std::string_view name, const fp8::ScaledWeight& q,
                                         const std::vector<bf16>& bf, int64_t rows, int64_t cols) {
    validate_shape(name, q, scaling, rows, cols);
    // Compared in place: validate() runs at every engine construction, and a copy of each weight
    // would be 2 bytes per parameter allocated and written for nothing.
    bool same = bf.size() == q.data.size();
    if (same) for_each_dequantised(q, [&](size_t i, bf16 v) { return same = bf[i] == v; });
    SWAPFFN_REQUIRE(same, std::string(name) + ": the bf16 weight is not the fp8 weight dequantised "
                                              "(Weights::set_fp8_ffn keeps them together)");
  });
}

}  // namespace swapffn

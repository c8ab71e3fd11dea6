// Weights::load / Weights::save: the model file of SPEC section 2.
#include <cmath>
#include <set>

#include "core/printable.hpp"
#include "core/weight_tensors.hpp"
#include "swapffn/error.hpp"
#include "swapffn/safetensors.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {

namespace st = safetensors;

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

  std::set<std::string> expected;
  for_each_weight_tensor(w, [&](std::string_view name, const std::vector<int64_t>& shape,
                                std::vector<bf16>& t) {
    const std::string n(name);
    expected.insert(n);
    const st::TensorInfo* info = r.find(n);
    SWAPFFN_REQUIRE(info != nullptr, f + "missing tensor '" + n + "'");
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
  for (const auto& t : r.tensors())
    SWAPFFN_REQUIRE(expected.count(t.name), f + "extra tensor " + in_quotes(t.name) + " (not in SPEC)");
  w.validate();
  return w;
}

void Weights::save(const std::string& path) const {
  validate();
  st::Writer wr;
  wr.set_metadata("swapffn.config", cfg.to_json_string());
  wr.set_metadata("format", "pt");
  for_each_weight_tensor(*this, [&](std::string_view name, const std::vector<int64_t>& shape,
                                    const std::vector<bf16>& t) {
    wr.add_bf16(std::string(name), shape, t);
  });
  wr.write(path);
}

}  // namespace swapffn

// Weights::fingerprint: the identity of a model, which state files record (docs/FORMATS.md, "State").
#include <string>

#include "core/weight_tensors.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {

namespace {

// FNV-1a 64: simple enough to recompute anywhere from the documented byte stream.
uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

}  // namespace

uint64_t Weights::fingerprint() const {
  const std::string json = cfg.to_json_string();
  uint64_t h = fnv1a(json.data(), json.size(), 0xCBF29CE484222325ull);
  for_each_weight_tensor(*this, [&](std::string_view name, const std::vector<int64_t>&, const std::vector<bf16>& t) {
    h = fnv1a(name.data(), name.size(), h);
    h = fnv1a("", 1, h);  // the name's terminating 0 byte
    h = fnv1a(t.data(), t.size() * sizeof(bf16), h);
  });
  // An fp8 model differs from a bf16 one with the same (dequantised) values: it runs another path.
  if (fp8_ffn)
    for_each_fp8_weight(*this, *fp8_ffn, [&](std::string_view name, const fp8::ScaledWeight& q, auto&, int64_t,
                                             int64_t) {
      h = fnv1a(name.data(), name.size(), h);
      h = fnv1a("", 1, h);
      h = fnv1a(q.data.data(), q.data.size(), h);
      const std::string scale = scale_tensor_name(name);
      h = fnv1a(scale.data(), scale.size(), h);
      h = fnv1a("", 1, h);
      h = fnv1a(q.scale.data(), q.scale.size() * sizeof(float), h);
    });
  return h;
}

}  // namespace swapffn

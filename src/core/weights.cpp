// Weights: validation, deterministic random initialisation (distribution in docs/MODEL.md) and the
// per-core tables derived from the parameters (SPEC section 2).
#include "swapffn/weights.hpp"

#include <algorithm>
#include <cmath>

#include "core/weight_tensors.hpp"
#include "swapffn/error.hpp"
#include "swapffn/random.hpp"

namespace swapffn {
namespace {

// FNV-1a of a tensor name: the key of that tensor's random stream.
uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

// mean + sd * N(0, 1), rounded to bf16.
void fill_normal(std::vector<bf16>& t, Rng& rng, double mean, double sd) {
  for (auto& v : t) v = float_to_bf16(static_cast<float>(mean + sd * rng.normal()));
}

}  // namespace

Weights Weights::random(const Config& cfg, uint64_t seed) {
  cfg.validate();
  Weights w;
  w.cfg = cfg;
  const double D = static_cast<double>(cfg.d_model), F = static_cast<double>(cfg.d_ff);
  const double R = static_cast<double>(cfg.d_router), K = static_cast<double>(cfg.collapse_k);
  const double Rc = static_cast<double>(cfg.collapse_r);
  const double Ce = static_cast<double>(cfg.core_embed_dim);
  for_each_weight_tensor(w, [&](std::string_view name, const std::vector<int64_t>& shape,
                                std::vector<bf16>& t) {
    t.assign(static_cast<size_t>(shape_numel(shape)), bf16{});
    // One stream per tensor, keyed by its name, so no tensor's values depend on another's size.
    Rng rng(mix_seed(seed, fnv1a(name)));
    if (name == "core_embed.weight") {
      fill_normal(t, rng, 0.0, 1.0);
    } else if (name == "core_scale_proj.weight") {
      fill_normal(t, rng, 0.0, 0.5 / std::sqrt(Ce));
    } else if (name == "core_shift_proj.weight") {
      // Large on purpose: the per-core shift is what makes cores' swap decisions differ for one
      // token; with a small one every core would open or close its gate together.
      fill_normal(t, rng, 0.0, 2.0 / std::sqrt(Ce));
    } else if (name == "core_alpha_proj.weight") {
      fill_normal(t, rng, 0.0, 1.0 / std::sqrt(Ce));
    } else if (name == "core_scale_proj.bias" || name == "core_shift_proj.bias" ||
               name == "core_alpha_proj.bias") {
      fill_normal(t, rng, 0.0, 0.1);
    } else if (name == "router_norm" || name == "norm.weight") {
      fill_normal(t, rng, 1.0, 0.1);
    } else if (name == "router_w" || name == "w1.weight" || name == "w3.weight") {
      fill_normal(t, rng, 0.0, 1.0 / std::sqrt(D));
    } else if (name == "router_swap_w" || name == "bank_w") {
      fill_normal(t, rng, 0.0, 1.0 / std::sqrt(R));
    } else if (name == "router_swap_b") {
      // Small and positive: a core that swapped in an all-zero bank (z = 0, s = router_swap_b)
      // swaps again instead of keeping a zero vector for the rest of the token.
      t[0] = float_to_bf16(static_cast<float>(0.05 + 0.05 * std::fabs(rng.normal())));
    } else if (name == "bank_b") {
      // Distinct values: with z = 0 the bank choice is argmax(bank_b) and must not be a tie.
      do fill_normal(t, rng, 0.0, 0.25);
      while (t[0] == t[1] || t[0] == t[2] || t[0] == t[3] || t[1] == t[2] || t[1] == t[3] ||
             t[2] == t[3]);
    } else if (name == "w2.weight") {
      fill_normal(t, rng, 0.0, 0.5 / std::sqrt(F));
    } else if (name == "collapse_basis") {
      fill_normal(t, rng, 0.0, 1.0 / std::sqrt(K * D));
    } else if (name == "collapse_decoder") {
      fill_normal(t, rng, 0.0, 1.0 / std::sqrt(Rc));
    } else {
      SWAPFFN_FAIL("no initialisation rule for tensor " + std::string(name));
    }
  });
  return w;
}

void Weights::validate() const {
  cfg.validate();
  for_each_weight_tensor(*this, [](std::string_view name, const std::vector<int64_t>& shape,
                                   const std::vector<bf16>& t) {
    const auto want = static_cast<size_t>(shape_numel(shape));
    SWAPFFN_REQUIRE(t.size() == want, "weight tensor " + std::string(name) + " holds " +
                                          std::to_string(t.size()) + " values, expected " +
                                          std::to_string(want) + " for the config");
  });
  validate_fp8_ffn(*this);
}

CoreTables CoreTables::compute(const Weights& w) {
  w.validate();
  const int64_t C = w.cfg.core_count, D = w.cfg.d_model, K = w.cfg.collapse_k;
  const int64_t Ce = w.cfg.core_embed_dim;
  auto at = [](const std::vector<bf16>& t, int64_t i) {
    return static_cast<double>(bf16_to_float(t[static_cast<size_t>(i)]));
  };
  // Linear(core_embed[c]) row o of weight [out, Ce] + bias[o], summed in fp64.
  auto linear = [&](const std::vector<bf16>& wt, const std::vector<bf16>& bias, int64_t c,
                    int64_t o) {
    double acc = at(bias, o);
    for (int64_t e = 0; e < Ce; ++e) acc += at(w.core_embed, c * Ce + e) * at(wt, o * Ce + e);
    return acc;
  };
  CoreTables t;
  t.scale.resize(static_cast<size_t>(C * D));
  t.shift.resize(static_cast<size_t>(C * D));
  t.alpha.resize(static_cast<size_t>(C * K));
  std::vector<double> logits(static_cast<size_t>(K));
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t d = 0; d < D; ++d) {
      t.scale[static_cast<size_t>(c * D + d)] =
          static_cast<float>(1.0 + linear(w.core_scale_w, w.core_scale_b, c, d));
      t.shift[static_cast<size_t>(c * D + d)] =
          static_cast<float>(linear(w.core_shift_w, w.core_shift_b, c, d));
    }
    for (int64_t k = 0; k < K; ++k)
      logits[static_cast<size_t>(k)] = linear(w.core_alpha_w, w.core_alpha_b, c, k);
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (auto& l : logits) sum += (l = std::exp(l - mx));
    for (int64_t k = 0; k < K; ++k)
      t.alpha[static_cast<size_t>(c * K + k)] = static_cast<float>(logits[static_cast<size_t>(k)] / sum);
  }
  return t;
}

}  // namespace swapffn

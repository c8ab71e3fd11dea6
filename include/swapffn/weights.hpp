// Weights: the parameters of SPEC section 2 in bf16 on the host, their safetensors form,
// deterministic random initialisation, and the per-core FiLM/alpha tables derived from them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "swapffn/bf16.hpp"
#include "swapffn/config.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn {

struct Weights {
  Config cfg;
  // Each member holds the tensor named in the comment, row-major, in bf16 (SPEC section 2).
  std::vector<bf16> core_embed;        // core_embed.weight      [C, Ce]
  std::vector<bf16> core_scale_w;      // core_scale_proj.weight [D, Ce]
  std::vector<bf16> core_scale_b;      // core_scale_proj.bias   [D]
  std::vector<bf16> core_shift_w;      // core_shift_proj.weight [D, Ce]
  std::vector<bf16> core_shift_b;      // core_shift_proj.bias   [D]
  std::vector<bf16> core_alpha_w;      // core_alpha_proj.weight [K, Ce]
  std::vector<bf16> core_alpha_b;      // core_alpha_proj.bias   [K]
  std::vector<bf16> router_norm;       // router_norm            [D]
  std::vector<bf16> router_w;          // router_w               [R, D]
  std::vector<bf16> router_swap_w;     // router_swap_w          [R]
  std::vector<bf16> router_swap_b;     // router_swap_b          [1]
  std::vector<bf16> bank_w;            // bank_w                 [R, 4]
  std::vector<bf16> bank_b;            // bank_b                 [4]
  std::vector<bf16> norm_w;            // norm.weight            [D]
  std::vector<bf16> w1;                // w1.weight              [F, D]
  std::vector<bf16> w3;                // w3.weight              [F, D]
  std::vector<bf16> w2;                // w2.weight              [D, F]
  std::vector<bf16> collapse_basis;    // collapse_basis         [K, Rc, D]
  std::vector<bf16> collapse_decoder;  // collapse_decoder       [D, Rc]
  // Set when the model's FFN is stored in e4m3 (docs/FORMATS.md, "fp8 models"); w1, w3 and w2 then
  // hold its dequantised values rounded to bf16, which the bf16 paths and the reference use.
  std::optional<fp8::FfnWeights> fp8_ffn;

  // Deterministic random parameters for cfg (validated first). Distribution: see docs/MODEL.md.
  static Weights random(const Config& cfg, uint64_t seed);

  // Reads a safetensors file (SPEC section 2); refuses missing/extra/mis-shaped tensors, bad dtypes
  // and invalid configs with an error naming the tensor or field. F32 tensors are rounded to bf16.
  static Weights load(const std::string& path);
  void save(const std::string& path) const;

  // Throws naming the tensor whose size does not match cfg; with fp8_ffn, also naming the weight
  // whose e4m3 form is invalid (fp8::ScaledWeight::validate), mis-shaped, or not what its bf16
  // member holds dequantised.
  void validate() const;

  // Stores the FFN in e4m3: fp8_ffn = q, and w1, w3, w2 its dequantised values rounded to bf16
  // (float(e4m3) * scale in fp32, then to nearest even). Throws naming the weight that is invalid
  // or mis-shaped for cfg, leaving this model unchanged.
  void set_fp8_ffn(fp8::FfnWeights q);
  // This model with its FFN quantised in `scaling` by the recipe of swapffn/fp8.hpp
  // (`swapffn quantize`); throws when the FFN is already in fp8.
  Weights quantized_fp8(fp8::Scaling scaling) const;
  // This model as a bf16 one: a copy without fp8_ffn, so an fp8 model's FFN keeps its dequantised
  // values (what a bf16 backend can run).
  Weights as_bf16() const;

  // The model's identity, which state files record: FNV-1a 64 over the config JSON, every
  // tensor's name and bf16 bytes and, for an fp8 model, the e4m3 bytes and scales of its FFN
  // (docs/FORMATS.md, "State"). It reads every parameter (about 70 ms for the default model), so
  // compute it once per Weights.
  uint64_t fingerprint() const;
};

// Tables that depend on parameters only, computed once at load in fp32 (SPEC section 2).
struct CoreTables {
  std::vector<float> scale;  // [C, D] = 1 + core_scale_proj(core_embed)
  std::vector<float> shift;  // [C, D] = core_shift_proj(core_embed)
  std::vector<float> alpha;  // [C, K] = softmax_k(core_alpha_proj(core_embed))
  static CoreTables compute(const Weights& w);  // validates w first (the engines rely on it)
};

}  // namespace swapffn

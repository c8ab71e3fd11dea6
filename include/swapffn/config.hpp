// Config: the hyper-parameters of SPEC section 1, their validation and JSON form.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace swapffn {

struct Config {
  int64_t d_model = 1024;       // D
  int64_t d_ff = 4096;          // F
  int64_t core_count = 512;     // C
  int64_t n_banks = 4;          // exactly 4: lanes are 2 bits packed in one byte
  int64_t n_events = 8;         // E
  int64_t k_ffn = 2;            // FFN steps per event
  int64_t d_router = 64;        // R
  int64_t collapse_k = 8;       // K
  int64_t collapse_r = 224;     // Rc
  int64_t core_embed_dim = 32;  // Ce
  double norm_eps = 1e-6;
  bool ffn_residual = true;
  bool collapse_silu = true;

  // Throws swapffn::Error naming the first invalid field and its value, or the cost (state bytes per
  // sequence, weight bytes, FLOPs per token, ...) past its budget and the fields it comes from.
  void validate() const;

  nlohmann::json to_json() const;
  // Every field must be present with the right JSON type; unknown keys are refused.
  static Config from_json(const nlohmann::json& j);
  std::string to_json_string() const;
  static Config from_json_string(std::string_view text);

  // "default" (SPEC sizes) or "tiny" (every dimension distinct, CPU-fast). Throws on unknown names.
  static Config preset(std::string_view name);
  static std::vector<std::string> preset_names();

  // Sets one field from text ("d_model=256"); throws naming the key on an unknown key or bad value.
  // Does not validate the whole config (call validate() after the last set()).
  void set(std::string_view key_equals_value);

  // FLOPs of one decode step per sequence (SPEC section 6): FFN, router and collapse terms.
  double flops_per_token() const;
  double ffn_flops_per_token() const;

  bool operator==(const Config&) const = default;
};

}  // namespace swapffn

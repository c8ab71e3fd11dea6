// The parameter tensors of SPEC section 2 in one place: name, shape and the Weights member holding
// them, in SPEC order. Validation, random initialisation and file I/O all walk this list, so a
// tensor cannot be known to one of them and forgotten by another.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "swapffn/weights.hpp"

namespace swapffn {

// Calls f(name, shape, tensor) for every tensor; W is Weights or const Weights.
template <class W, class F>
void for_each_weight_tensor(W& w, F&& f) {
  const Config& c = w.cfg;
  const int64_t D = c.d_model, F_ = c.d_ff, C = c.core_count, R = c.d_router;
  const int64_t K = c.collapse_k, Rc = c.collapse_r, Ce = c.core_embed_dim;
  using S = std::vector<int64_t>;
  f(std::string_view("core_embed.weight"), S{C, Ce}, w.core_embed);
  f(std::string_view("core_scale_proj.weight"), S{D, Ce}, w.core_scale_w);
  f(std::string_view("core_scale_proj.bias"), S{D}, w.core_scale_b);
  f(std::string_view("core_shift_proj.weight"), S{D, Ce}, w.core_shift_w);
  f(std::string_view("core_shift_proj.bias"), S{D}, w.core_shift_b);
  f(std::string_view("core_alpha_proj.weight"), S{K, Ce}, w.core_alpha_w);
  f(std::string_view("core_alpha_proj.bias"), S{K}, w.core_alpha_b);
  f(std::string_view("router_norm"), S{D}, w.router_norm);
  f(std::string_view("router_w"), S{R, D}, w.router_w);
  f(std::string_view("router_swap_w"), S{R}, w.router_swap_w);
  f(std::string_view("router_swap_b"), S{1}, w.router_swap_b);
  f(std::string_view("bank_w"), S{R, 4}, w.bank_w);
  f(std::string_view("bank_b"), S{4}, w.bank_b);
  f(std::string_view("norm.weight"), S{D}, w.norm_w);
  f(std::string_view("w1.weight"), S{F_, D}, w.w1);
  f(std::string_view("w3.weight"), S{F_, D}, w.w3);
  f(std::string_view("w2.weight"), S{D, F_}, w.w2);
  f(std::string_view("collapse_basis"), S{K, Rc, D}, w.collapse_basis);
  f(std::string_view("collapse_decoder"), S{D, Rc}, w.collapse_decoder);
}

// Calls f(name, q, bf16_member, rows, cols) for the FFN weights an fp8 model stores in e4m3 (q is
// the weight in `ffn`, an fp8::FfnWeights); W is Weights or const Weights, Q likewise.
template <class W, class Q, class F>
void for_each_fp8_weight(W& w, Q& ffn, F&& f) {
  const int64_t D = w.cfg.d_model, F_ = w.cfg.d_ff;
  f(std::string_view("w1.weight"), ffn.w1, w.w1, F_, D);
  f(std::string_view("w3.weight"), ffn.w3, w.w3, F_, D);
  f(std::string_view("w2.weight"), ffn.w2, w.w2, D, F_);
}

// The name of an fp8 weight's block scales (docs/FORMATS.md, "fp8 models").
inline std::string scale_tensor_name(std::string_view weight) { return std::string(weight) + "_scale"; }

// Throws unless w.fp8_ffn, when set, is valid, shaped for w.cfg and what w1, w3, w2 hold dequantised.
void validate_fp8_ffn(const Weights& w);

inline int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace swapffn

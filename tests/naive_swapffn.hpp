// A second, deliberately naive implementation of SPEC section 4 for the tests: plain loops in
// double straight from the spec's pseudo-code, its own core tables, no tiling, no threads. It
// shares no code with src/reference; the tests compare the two. Writing h into RAM rounds it to
// fp32 and then bf16, as the spec's fp32 h would be.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "swapffn/engine.hpp"
#include "swapffn/state.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::testing {

struct NaiveStep {
  std::vector<double> delta;           // [B, D]
  State state;                         // after the step
  Trace own;                           // own decisions [E, B, C]
  std::vector<double> s_abs, gap;      // |s| and top-1 minus top-2 logit gap, [E, B, C]
  std::vector<double> h_rms;           // rms of each core's h after every event, [E, B, C]
};

class NaiveSwapFfn {
 public:
  explicit NaiveSwapFfn(const Weights& w) : cfg(w.cfg) {
    auto f = [](const std::vector<bf16>& v) {
      std::vector<double> o(v.size());
      for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_float(v[i]);
      return o;
    };
    embed = f(w.core_embed), scale_w = f(w.core_scale_w), scale_b = f(w.core_scale_b);
    shift_w = f(w.core_shift_w), shift_b = f(w.core_shift_b);
    alpha_w = f(w.core_alpha_w), alpha_b = f(w.core_alpha_b);
    router_norm = f(w.router_norm), router_w = f(w.router_w), swap_w = f(w.router_swap_w);
    swap_b = f(w.router_swap_b)[0];
    bank_w = f(w.bank_w), bank_b = f(w.bank_b), norm_w = f(w.norm_w);
    w1 = f(w.w1), w3 = f(w.w3), w2 = f(w.w2), basis = f(w.collapse_basis), decoder = f(w.collapse_decoder);
  }

  // One decode step from `in` (follow: apply these decisions instead of the own ones).
  NaiveStep step(const std::vector<float>& x, const State& in, const Trace* follow = nullptr) const {
    const int64_t D = cfg.d_model, F = cfg.d_ff, C = cfg.core_count, E = cfg.n_events;
    const int64_t R = cfg.d_router, K = cfg.collapse_k, Rc = cfg.collapse_r, Ce = cfg.core_embed_dim;
    const int64_t B = in.batch;
    NaiveStep out;
    out.state = in;
    out.delta.assign(B * D, 0.0);
    out.own.resize(E, B, C);
    out.s_abs.assign(E * B * C, 0.0);
    out.gap.assign(E * B * C, 0.0);
    out.h_rms.assign(E * B * C, 0.0);

    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> pooled(K * D, 0.0);
      for (int64_t c = 0; c < C; ++c) {
        std::vector<double> h(D);
        for (int64_t d = 0; d < D; ++d) {
          double sc = 1.0 + scale_b[d], sh = shift_b[d];
          for (int64_t e = 0; e < Ce; ++e) {
            sc += embed[c * Ce + e] * scale_w[d * Ce + e];
            sh += embed[c * Ce + e] * shift_w[d * Ce + e];
          }
          h[d] = static_cast<double>(x[b * D + d]) * sc + sh;
        }
        for (int64_t ev = 0; ev < E; ++ev) {
          const int64_t t = (ev * B + b) * C + c;
          std::vector<double> n = rms(h, router_norm);
          std::vector<double> z(R, 0.0);
          for (int64_t r = 0; r < R; ++r)
            for (int64_t d = 0; d < D; ++d) z[r] += n[d] * router_w[r * D + d];
          double s = swap_b;
          for (int64_t r = 0; r < R; ++r) s += z[r] * swap_w[r];
          double l[4];
          for (int k = 0; k < 4; ++k) {
            l[k] = bank_b[k];
            for (int64_t r = 0; r < R; ++r) l[k] += z[r] * bank_w[r * 4 + k];
          }
          int j = 0;
          for (int k = 1; k < 4; ++k)
            if (l[k] > l[j]) j = k;
          double second = -INFINITY;
          for (int k = 0; k < 4; ++k)
            if (k != j) second = std::max(second, l[k]);
          out.own.gate[t] = s > 0 ? 1 : 0;
          out.own.slot[t] = static_cast<uint8_t>(j);
          out.s_abs[t] = std::fabs(s);
          out.gap[t] = l[j] - second;
          const bool gate = follow ? follow->gate[t] != 0 : s > 0;
          const int slot = follow ? follow->slot[t] : j;
          if (gate) {
            uint8_t& map = out.state.stream_map[b * C + c];
            const int p = (map >> (2 * slot)) & 3;
            bf16* bank = &out.state.ram[((b * C + c) * 4 + p) * D];
            for (int64_t d = 0; d < D; ++d) {
              const double old = bf16_to_float(bank[d]);
              bank[d] = float_to_bf16(static_cast<float>(h[d]));
              h[d] = old;
            }
            const int l0 = map & 3, lj = (map >> (2 * slot)) & 3;
            int lanes[4] = {map & 3, (map >> 2) & 3, (map >> 4) & 3, (map >> 6) & 3};
            lanes[0] = lj;
            lanes[slot] = l0;
            map = static_cast<uint8_t>(lanes[0] | lanes[1] << 2 | lanes[2] << 4 | lanes[3] << 6);
          }
          for (int64_t k = 0; k < cfg.k_ffn; ++k) {
            const std::vector<double> nn = rms(h, norm_w);
            std::vector<double> u(F);
            for (int64_t f = 0; f < F; ++f) {
              double a = 0, g = 0;
              for (int64_t d = 0; d < D; ++d) {
                a += nn[d] * w1[f * D + d];
                g += nn[d] * w3[f * D + d];
              }
              u[f] = a / (1.0 + std::exp(-a)) * g;
            }
            for (int64_t d = 0; d < D; ++d) {
              double y = 0;
              for (int64_t f = 0; f < F; ++f) y += u[f] * w2[d * F + f];
              h[d] = cfg.ffn_residual ? h[d] + y : y;
            }
          }
          double ss = 0;
          for (double v : h) ss += v * v;
          out.h_rms[t] = std::sqrt(ss / D);
        }
        std::vector<double> al(K);
        double mx = -INFINITY, sum = 0;
        for (int64_t k = 0; k < K; ++k) {
          al[k] = alpha_b[k];
          for (int64_t e = 0; e < Ce; ++e) al[k] += embed[c * Ce + e] * alpha_w[k * Ce + e];
          mx = std::max(mx, al[k]);
        }
        for (auto& v : al) sum += (v = std::exp(v - mx));
        for (int64_t k = 0; k < K; ++k)
          for (int64_t d = 0; d < D; ++d) pooled[k * D + d] += al[k] / sum * h[d];
      }
      std::vector<double> zc(Rc, 0.0);
      for (int64_t r = 0; r < Rc; ++r) {
        for (int64_t k = 0; k < K; ++k)
          for (int64_t d = 0; d < D; ++d) zc[r] += pooled[k * D + d] * basis[(k * Rc + r) * D + d];
        if (cfg.collapse_silu) zc[r] = zc[r] / (1.0 + std::exp(-zc[r]));
      }
      for (int64_t d = 0; d < D; ++d)
        for (int64_t r = 0; r < Rc; ++r) out.delta[b * D + d] += decoder[d * Rc + r] * zc[r];
    }
    return out;
  }

 private:
  std::vector<double> rms(const std::vector<double>& v, const std::vector<double>& gain) const {
    double ss = 0;
    for (double e : v) ss += e * e;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(v.size()) + cfg.norm_eps);
    std::vector<double> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = v[i] * inv * gain[i];
    return o;
  }

  Config cfg;
  std::vector<double> embed, scale_w, scale_b, shift_w, shift_b, alpha_w, alpha_b;
  std::vector<double> router_norm, router_w, swap_w, bank_w, bank_b, norm_w, w1, w3, w2, basis, decoder;
  double swap_b = 0;
};

}  // namespace swapffn::testing

// A case small enough to check on paper: 2 cores, D = 4, F = 2, E = 2 events of one FFN step,
// R = 2, K = 1, Rc = 2, two tokens. Weights are small dyadic numbers chosen so that:
//   - the swap logit is s = z[1] = rms(h)[1] (router_w picks h[0], h[1]; router_swap_w = (0, 1));
//   - the bank logits are (-4 z[0], 1, 1, 0): a tie of slots 1 and 2 unless z[0] < -1/4;
//   - the FFN never touches h[1], so a core's gate stays where the core's input put it.
// Token 1: core 0 swaps its h into bank 1 (slot 1 by the tie rule), gets a zero vector back, keeps it
// (s = 0 exactly at event 1: closed). Core 1 never swaps. Token 2: core 0 swaps slot 0 (= bank 1,
// reading token 1's vector back widened from bf16), then at event 1 swaps slot 1 (= bank 0).
// Expected values are written out below in double from the formulas, not taken from the engine.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>

#include "engine_test_options.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/engine.hpp"

namespace swapffn {
namespace {

std::vector<bf16> bfv(std::initializer_list<float> v) {
  std::vector<bf16> o;
  for (float f : v) {
    o.push_back(float_to_bf16(f));
    EXPECT_EQ(bf16_to_float(o.back()), f) << "hand weights must be exact in bf16";
  }
  return o;
}

Weights hand_weights() {
  Weights w;
  Config& c = w.cfg;
  c.d_model = 4, c.d_ff = 2, c.core_count = 2, c.n_events = 2, c.k_ffn = 1, c.d_router = 2;
  c.collapse_k = 1, c.collapse_r = 2, c.core_embed_dim = 2;
  w.core_embed = bfv({1, 0, 0, 1});
  w.core_scale_w = bfv({0, -2, 0.5f, -2, 0, 0, 0, 0});  // scale[c][d] = 1 + scale_w[d][c] + b[d]
  w.core_scale_b = bfv({0, 0, 0, -0.5f});
  w.core_shift_w = bfv({0, 0, 0, 0, 0.25f, -0.25f, 0, 0});
  w.core_shift_b = bfv({0, 0, 0, 0.125f});
  w.core_alpha_w = bfv({0.5f, -1});  // K = 1: alpha is 1 whatever these are
  w.core_alpha_b = bfv({0.25f});
  w.router_norm = bfv({2, 1, 1, 1});
  w.router_w = bfv({1, 0, 0, 0, 0, 1, 0, 0});
  w.router_swap_w = bfv({0, 1});
  w.router_swap_b = bfv({0});
  w.bank_w = bfv({-4, 0, 0, 0, 0, 0, 0, 0});
  w.bank_b = bfv({0, 1, 1, 0});
  w.norm_w = bfv({1, 0.5f, 1, 2});
  w.w1 = bfv({1, 0, 0, 0, 0, 0, 1, 0});
  w.w3 = bfv({0, 1, 0, 0, 0, 0, 0, 1});
  w.w2 = bfv({1, 0, 0, 0, 0, 0.5f, -1, 1});
  w.collapse_basis = bfv({1, 0, 1, 0, 0, 1, 0, -1});
  w.collapse_decoder = bfv({1, 0, 0, 1, 1, 1, 0.5f, -0.5f});
  return w;
}

using V4 = std::array<double, 4>;
constexpr double kEps = 1e-6;

double inv_rms(const V4& h) {
  return 1.0 / std::sqrt((h[0] * h[0] + h[1] * h[1] + h[2] * h[2] + h[3] * h[3]) / 4 + kEps);
}
double silu(double t) { return t / (1 + std::exp(-t)); }

// One FFN step with norm.weight (1, 0.5, 1, 2), w1 rows e0 and e2, w3 rows e1 and e3, w2 as above.
V4 ffn(const V4& h) {
  const double r = inv_rms(h);
  const double n0 = h[0] * r, n1 = h[1] * r * 0.5, n2 = h[2] * r, n3 = h[3] * r * 2;
  const double u0 = silu(n0) * n1, u1 = silu(n2) * n3;
  return {h[0] + u0, h[1], h[2] + 0.5 * u1, h[3] - u0 + u1};
}
// Swap logit and logit of slot 0 (the only ones that vary).
double swap_logit(const V4& h) { return h[1] * inv_rms(h); }
double slot0_logit(const V4& h) { return -4 * 2 * h[0] * inv_rms(h); }

V4 delta_of(const V4& pooled) {
  const double z0 = silu(pooled[0] + pooled[2]), z1 = silu(pooled[1] - pooled[3]);
  return {z0, z1, z0 + z1, 0.5 * z0 - 0.5 * z1};
}

void expect_bank(const State& s, int core, int bank, std::array<uint16_t, 4> bits) {
  for (int d = 0; d < 4; ++d)
    EXPECT_EQ(s.ram[(core * 4 + bank) * 4 + d].bits, bits[d]) << "core " << core << " bank " << bank << " d " << d;
}
void expect_bank_zero(const State& s, int core, int bank) { expect_bank(s, core, bank, {0, 0, 0, 0}); }

void expect_delta(const float* got, const V4& want) {
  for (int d = 0; d < 4; ++d) EXPECT_NEAR(got[d], want[d], 1e-6 * (1 + std::fabs(want[d]))) << "d " << d;
}

TEST(ReferenceHand, TwoTokensOnPaper) {
  const Weights w = hand_weights();
  auto eng = make_engine("reference", w, testing::threads(2));
  State st = State::init(w.cfg, 1);
  Trace tr;
  float delta[4];

  // ---- token 1: x = (1, 0.3, -2, 0.75).
  const float x1[4] = {1, 0.3f, -2, 0.75f};
  // Core inputs h = x * scale + shift: scale0 = (1, 1.5, 1, 0.5), shift0 = (0, 0, 0.25, 0.125);
  // scale1 = (-1, -1, 1, 0.5), shift1 = (0, 0, -0.25, 0.125).
  const V4 h0 = {1, 0.3f * 1.5f, -1.75, 0.5};
  const V4 h1 = {-1, -0.3f, -2.25, 0.5};
  ASSERT_GT(swap_logit(h0), 0);   // core 0 opens ...
  ASSERT_LT(slot0_logit(h0), 1);  // ... and the tie of slots 1, 2 picks 1
  ASSERT_LT(swap_logit(h1), 0);   // core 1 stays closed
  ASSERT_GT(slot0_logit(h1), 1);  // and would pick slot 0
  const V4 h1a = ffn(h1);
  ASSERT_LT(swap_logit(h1a), 0);
  ASSERT_GT(slot0_logit(h1a), 1);
  const V4 h1b = ffn(h1a);

  eng->step(x1, delta, st, testing::step_opts(&tr));
  // Core 0 swapped out bf16(h0) = (1, 0.44921875, -1.75, 0.5) into bank 1 and now holds zeros, so
  // only core 1 contributes to the collapse (K = 1: alpha = 1).
  expect_bank(st, 0, 1, {0x3F80, 0x3EE6, 0xBFE0, 0x3F00});
  expect_bank_zero(st, 0, 0), expect_bank_zero(st, 0, 2), expect_bank_zero(st, 0, 3);
  for (int b = 0; b < 4; ++b) expect_bank_zero(st, 1, b);
  EXPECT_EQ(st.stream_map[0], 0xE1);  // lanes (1, 0, 2, 3)
  EXPECT_EQ(st.stream_map[1], 0xE4);
  // Trace [event][core]: core 0 gate (1, 0) with slots (1, 1) (zero h: s = 0, logits = bank_b);
  // core 1 gate (0, 0) with slots (0, 0).
  EXPECT_EQ(tr.gate, (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ(tr.slot, (std::vector<uint8_t>{1, 0, 1, 0}));
  expect_delta(delta, delta_of(h1b));

  // ---- token 2: x = (-1, 0.3, -2, 0.75).
  const float x2[4] = {-1, 0.3f, -2, 0.75f};
  const V4 g0 = {-1, 0.3f * 1.5f, -1.75, 0.5};
  const V4 g1 = {1, -0.3f, -2.25, 0.5};
  ASSERT_GT(swap_logit(g0), 0);
  ASSERT_GT(slot0_logit(g0), 1);  // slot 0 -> lane 0 of 0xE1 = bank 1
  const V4 g0_in = {1, 0.44921875, -1.75, 0.5};  // token 1's vector, read back from bf16
  const V4 g0a = ffn(g0_in);
  ASSERT_GT(swap_logit(g0a), 0);
  ASSERT_LT(slot0_logit(g0a), 1);  // slot 1 -> lane 1 of 0xE1 = bank 0 (zeros)
  ASSERT_LT(swap_logit(g1), 0);
  ASSERT_LT(slot0_logit(g1), 1);
  const V4 g1a = ffn(g1);
  ASSERT_LT(swap_logit(g1a), 0);
  const V4 g1b = ffn(g1a);

  eng->step(x2, delta, st, testing::step_opts(&tr));
  expect_bank(st, 0, 1, {0xBF80, 0x3EE6, 0xBFE0, 0x3F00});  // bf16(g0)
  std::array<uint16_t, 4> bank0{};
  for (int d = 0; d < 4; ++d) bank0[d] = float_to_bf16(static_cast<float>(g0a[d])).bits;
  expect_bank(st, 0, 0, bank0);
  expect_bank_zero(st, 0, 2), expect_bank_zero(st, 0, 3);
  for (int b = 0; b < 4; ++b) expect_bank_zero(st, 1, b);
  EXPECT_EQ(st.stream_map[0], 0xE4);  // slot 0 swap is a no-op on the map, the slot 1 swap undoes 0xE1
  EXPECT_EQ(st.stream_map[1], 0xE4);
  EXPECT_EQ(tr.gate, (std::vector<uint8_t>{1, 0, 1, 0}));
  EXPECT_EQ(tr.slot, (std::vector<uint8_t>{0, 1, 1, 1}));
  expect_delta(delta, delta_of(g1b));
}

TEST(ReferenceHand, CollapseAloneWithoutEvents) {
  // E = 0: delta = decoder @ silu(basis . sum_c alpha_c h_c) with h_c = x * scale_c + shift_c.
  // K = 2 here so alpha matters: alpha_c = softmax(Linear(core_embed[c])).
  Weights w = hand_weights();
  w.cfg.n_events = 0;
  w.cfg.collapse_k = 2;
  w.core_alpha_w = bfv({0.5f, -1, 0, 0.25f});
  w.core_alpha_b = bfv({0.25f, -0.5f});
  w.collapse_basis = bfv({1, 0, 1, 0, 0, 1, 0, -1, 0.5f, 0.5f, 0, 0, 0, 0, -1, 2});
  auto eng = make_engine("reference", w, testing::threads(1));
  State st = State::init(w.cfg, 1);
  const float x[4] = {0.5f, -1.25f, 2, 0.1f};
  float delta[4];
  eng->step(x, delta, st);

  const V4 scale[2] = {{1, 1.5, 1, 0.5}, {-1, -1, 1, 0.5}};
  const V4 shift[2] = {{0, 0, 0.25, 0.125}, {0, 0, -0.25, 0.125}};
  // alpha logits: core 0 (0.5 + 0.25, 0 - 0.5) = (0.75, -0.5); core 1 (-1 + 0.25, 0.25 - 0.5).
  const double logit[2][2] = {{0.75, -0.5}, {-0.75, -0.25}};
  double pooled[2][4] = {};
  for (int c = 0; c < 2; ++c) {
    const double e0 = std::exp(logit[c][0]), e1 = std::exp(logit[c][1]);
    const double alpha[2] = {e0 / (e0 + e1), e1 / (e0 + e1)};
    for (int k = 0; k < 2; ++k)
      for (int d = 0; d < 4; ++d) pooled[k][d] += alpha[k] * (static_cast<double>(x[d]) * scale[c][d] + shift[c][d]);
  }
  // zc[r] = sum_k pooled[k] . basis[k][r]
  const double zc0 = silu(pooled[0][0] + pooled[0][2] + 0.5 * pooled[1][0] + 0.5 * pooled[1][1]);
  const double zc1 = silu(pooled[0][1] - pooled[0][3] - pooled[1][2] + 2 * pooled[1][3]);
  expect_delta(delta, {zc0, zc1, zc0 + zc1, 0.5 * zc0 - 0.5 * zc1});
  EXPECT_EQ(st, State::init(w.cfg, 1));  // no events: the state is untouched

  // collapse_silu = false drops the silu.
  w.cfg.collapse_silu = false;
  auto lin = make_engine("reference", w, testing::threads(1));
  lin->step(x, delta, st);
  const double y0 = pooled[0][0] + pooled[0][2] + 0.5 * pooled[1][0] + 0.5 * pooled[1][1];
  const double y1 = pooled[0][1] - pooled[0][3] - pooled[1][2] + 2 * pooled[1][3];
  expect_delta(delta, {y0, y1, y0 + y1, 0.5 * y0 - 0.5 * y1});
}

TEST(ReferenceHand, NonResidualFfnReplacesH) {
  // ffn_residual = false, one event, core 1 never swaps: its final h is u @ w2^T alone.
  Weights w = hand_weights();
  w.cfg.ffn_residual = false;
  w.cfg.n_events = 1;
  auto eng = make_engine("reference", w, testing::threads(1));
  State st = State::init(w.cfg, 1);
  const float x[4] = {1, 0.3f, -2, 0.75f};
  float delta[4];
  eng->step(x, delta, st);
  const V4 h1 = {-1, -0.3f, -2.25, 0.5};
  const V4 r = ffn(h1);
  const V4 y = {r[0] - h1[0], 0, r[2] - h1[2], r[3] - h1[3]};
  // core 0 swapped and holds zeros: its FFN output is 0 too.
  expect_delta(delta, delta_of(y));
}

}  // namespace
}  // namespace swapffn

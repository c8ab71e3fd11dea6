// The agreement check (SPEC section 5): the reference against itself passes with no disagreement,
// and backends that decide wrongly or compute wrongly are caught.
#include <gtest/gtest.h>

#include <cmath>

#include "engine_test_options.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/check.hpp"
#include "swapffn/error.hpp"

namespace swapffn {
namespace {

// Wraps the reference and corrupts it in one way, to prove the check can fail.
class FaultyEngine : public Engine {
 public:
  enum class Fault { InvertGates, ScaleDelta, PerturbRam };
  FaultyEngine(const Weights& w, Fault f) : ref_(make_engine("reference", w, testing::threads(2))), fault_(f) {}
  std::string name() const override { return "faulty"; }
  const Config& config() const override { return ref_->config(); }
  void step(const float* x, float* delta, State& state, const StepOptions& opt) override {
    if (fault_ == Fault::InvertGates) {
      // Decide like the reference, then apply (and report) every gate inverted.
      State dry = state;
      std::vector<float> scratch(state.batch * config().d_model);
      Trace own;
      ref_->step(x, scratch.data(), dry, testing::step_opts(&own));
      for (auto& g : own.gate) g ^= 1;
      ref_->step(x, delta, state, testing::step_opts(nullptr, &own));
      if (opt.record) *opt.record = own;
      return;
    }
    ref_->step(x, delta, state, opt);
    if (fault_ == Fault::ScaleDelta)
      for (int64_t i = 0; i < state.batch * config().d_model; ++i) delta[i] *= 1.001f;
    if (fault_ == Fault::PerturbRam)
      for (auto& v : state.ram)
        if (v.bits != 0) v = float_to_bf16(bf16_to_float(v) * 1.5f);
  }

 private:
  std::unique_ptr<Engine> ref_;
  Fault fault_;
};

Weights tiny_weights() { return Weights::random(Config::preset("tiny"), 2); }

TEST(Check, ReferenceAgainstItselfPasses) {
  const Weights w = tiny_weights();
  auto eng = make_engine("reference", w, testing::threads(2));
  const CheckReport r = check_backend(w, *eng, 2, 2, 7, Tolerance::fp32(), 1);
  EXPECT_TRUE(r.passed()) << r.summary();
  const int64_t n = 2 * w.cfg.n_events * 2 * w.cfg.core_count;
  EXPECT_EQ(r.gate_checked, n);
  EXPECT_GT(r.slot_checked, 0);
  EXPECT_LT(r.slot_checked, n);
  EXPECT_EQ(r.disagreeing(), 0);
  EXPECT_EQ(r.delta_rel_l2, 0.0);
  EXPECT_EQ(r.state_rel_l2, 0.0);
  EXPECT_TRUE(r.stream_maps_equal);
  EXPECT_NE(r.summary().find("PASS"), std::string::npos);
  EXPECT_EQ(r.summary().find('\n'), std::string::npos);
}

TEST(Check, WrongDecisionsAreCaught) {
  const Weights w = tiny_weights();
  FaultyEngine eng(w, FaultyEngine::Fault::InvertGates);
  const CheckReport r = check_backend(w, eng, 1, 2, 7, Tolerance::bf16());
  EXPECT_FALSE(r.passed()) << r.summary();
  // Event 0 of every token sees the same state in both engines, so each of its gates disagrees.
  const int64_t event0 = 2 * w.cfg.core_count;
  EXPECT_GE(r.gate_disagree, event0);
  EXPECT_GT(r.disagree_over_tau, 0);
  EXPECT_GT(r.max_disagree_margin, Tolerance::bf16().tau);
  // The reference followed the inverted trace, so the numbers themselves agree.
  EXPECT_EQ(r.delta_rel_l2, 0.0);
  EXPECT_TRUE(r.stream_maps_equal);
  EXPECT_NE(r.summary().find("FAIL"), std::string::npos);
}

TEST(Check, WrongDeltaIsCaughtAtFp32ToleranceOnly) {
  const Weights w = tiny_weights();
  FaultyEngine eng(w, FaultyEngine::Fault::ScaleDelta);
  const CheckReport strict = check_backend(w, eng, 1, 2, 7, Tolerance::fp32());
  EXPECT_FALSE(strict.passed()) << strict.summary();
  EXPECT_NEAR(strict.delta_rel_l2, 1e-3, 1e-5);
  const CheckReport loose = check_backend(w, eng, 1, 2, 7, Tolerance::bf16());
  EXPECT_TRUE(loose.passed()) << loose.summary();
}

TEST(Check, WrongStateIsCaught) {
  const Weights w = tiny_weights();
  FaultyEngine eng(w, FaultyEngine::Fault::PerturbRam);
  const CheckReport r = check_backend(w, eng, 1, 2, 7, Tolerance::bf16());
  EXPECT_FALSE(r.passed()) << r.summary();
  EXPECT_GT(r.state_rel_l2, 0.1);
}

TEST(Check, TolerancePresetsAndBadArguments) {
  EXPECT_EQ(Tolerance::preset("bf16").delta_rel_l2, 2e-2);
  EXPECT_EQ(Tolerance::preset("fp32").delta_rel_l2, 1e-4);
  EXPECT_EQ(Tolerance::preset("fp8").tau, 0.25);
  EXPECT_EQ(Tolerance::preset("fp8").delta_rel_l2, 6e-2);
  EXPECT_EQ(Tolerance::preset("fp8").state_rel_l2, 8e-2);
  EXPECT_THROW(Tolerance::preset("fp4"), Error);
  const Weights w = tiny_weights();
  auto eng = make_engine("reference", w);
  EXPECT_THROW(check_backend(w, *eng, 0, 1, 1, Tolerance::fp32()), Error);
  EXPECT_THROW(check_backend(w, *eng, 1, 0, 1, Tolerance::fp32()), Error);
  EXPECT_EQ(rel_l2(nullptr, nullptr, 0), 0.0);
  const float a[2] = {1, 1}, b[2] = {0, 0};
  EXPECT_TRUE(std::isinf(rel_l2(a, b, 2)));
}

}  // namespace
}  // namespace swapffn

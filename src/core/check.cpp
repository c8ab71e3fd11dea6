#include "swapffn/check.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "core/reference/reference_engine.hpp"
#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"
#include "swapffn/random.hpp"

namespace swapffn {

Tolerance Tolerance::bf16() { return {0.05, 2e-2, 2e-2, "bf16"}; }
Tolerance Tolerance::fp8() { return {0.25, 6e-2, 8e-2, "fp8"}; }
Tolerance Tolerance::fp32() { return {1e-3, 1e-4, 1e-4, "fp32"}; }

Tolerance Tolerance::preset(const std::string& name) {
  if (name == "bf16") return bf16();
  if (name == "fp8") return fp8();
  if (name == "fp32") return fp32();
  SWAPFFN_FAIL("unknown tolerance preset '" + name + "' (known: bf16, fp8, fp32)");
}

double rel_l2(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  if (num == 0) return 0;
  if (den == 0) return std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

bool CheckReport::passed() const {
  return disagree_over_tau == 0 && stream_maps_equal && delta_rel_l2 <= tol.delta_rel_l2 &&
         state_rel_l2 <= tol.state_rel_l2;
}

std::string CheckReport::summary() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s: %s vs reference (B=%lld, T=%lld, tolerance %s): decisions checked %lld, "
                "disagreeing %lld (%lld with margin > tau=%g, max margin %.3g), delta rel L2 %.3g "
                "(<= %g), state rel L2 %.3g (<= %g), stream maps %s",
                passed() ? "PASS" : "FAIL", backend.c_str(), static_cast<long long>(batch),
                static_cast<long long>(tokens), tol.name.c_str(), static_cast<long long>(checked()),
                static_cast<long long>(disagreeing()), static_cast<long long>(disagree_over_tau), tol.tau,
                max_disagree_margin, delta_rel_l2, tol.delta_rel_l2, state_rel_l2, tol.state_rel_l2,
                stream_maps_equal ? "equal" : "DIFFER");
  return buf;
}

CheckReport check_backend(const Weights& w, Engine& backend, int64_t batch, int64_t tokens,
                          uint64_t seed, const Tolerance& tol, int ref_threads) {
  const Config& cfg = w.cfg;
  require_in_range(batch, 1, kMaxBatch, "check: batch");
  require_in_range(tokens, 1, kMaxTokens, "check: tokens");
  SWAPFFN_REQUIRE(backend.config() == cfg, "check: backend '" + backend.name() +
                                               "' was built for a different config than the weights");
  const int64_t D = cfg.d_model, n = checked_product({batch, D}, "check: B*D");
  const std::vector<float> x = decode_inputs(seed, tokens, batch, D);

  State got = State::init(cfg, batch);
  std::vector<float> delta_got;
  allocate(delta_got, checked_product({tokens, n}, "check: T*B*D"), 0.0f, "check: the outputs delta [T, B, D]");
  std::vector<Trace> traces;
  backend.decode(x.data(), delta_got.data(), tokens, got, &traces);
  SWAPFFN_REQUIRE(static_cast<int64_t>(traces.size()) == tokens,
                  "check: backend '" + backend.name() + "' recorded " + std::to_string(traces.size()) +
                      " traces for " + std::to_string(tokens) + " tokens");

  EngineOptions ro;
  ro.threads = ref_threads;
  auto ref = reference::make_reference_engine(w, ro);
  State want = State::init(cfg, batch);
  std::vector<float> delta_want(delta_got.size());

  CheckReport rep;
  rep.backend = backend.name();
  rep.batch = batch;
  rep.tokens = tokens;
  rep.tol = tol;
  for (int64_t t = 0; t < tokens; ++t) {
    const Trace& tr = traces[static_cast<size_t>(t)];
    FollowReport fr;
    StepOptions so;
    so.follow = &tr;
    so.report = &fr;
    ref->step(x.data() + t * n, delta_want.data() + t * n, want, so);
    for (size_t i = 0; i < tr.gate.size(); ++i) {
      ++rep.gate_checked;
      if (fr.own.gate[i] != tr.gate[i]) {
        ++rep.gate_disagree;
        rep.max_disagree_margin = std::max<double>(rep.max_disagree_margin, fr.gate_margin[i]);
        if (fr.gate_margin[i] > tol.tau) ++rep.disagree_over_tau;
      }
      if (tr.gate[i]) {
        ++rep.slot_checked;
        if (fr.own.slot[i] != tr.slot[i]) {
          ++rep.slot_disagree;
          rep.max_disagree_margin = std::max<double>(rep.max_disagree_margin, fr.slot_margin[i]);
          if (fr.slot_margin[i] > tol.tau) ++rep.disagree_over_tau;
        }
      }
    }
  }

  SWAPFFN_REQUIRE(got.ram.size() == want.ram.size() && got.stream_map.size() == want.stream_map.size(),
                  "check: backend '" + backend.name() + "' returned a state of the wrong size");
  rep.delta_rel_l2 = rel_l2(delta_got.data(), delta_want.data(), static_cast<int64_t>(delta_got.size()));
  std::vector<float> ram_got(got.ram.size()), ram_want(want.ram.size());
  for (size_t i = 0; i < ram_got.size(); ++i) {
    ram_got[i] = bf16_to_float(got.ram[i]);
    ram_want[i] = bf16_to_float(want.ram[i]);
  }
  rep.state_rel_l2 = rel_l2(ram_got.data(), ram_want.data(), static_cast<int64_t>(ram_got.size()));
  rep.stream_maps_equal = got.stream_map == want.stream_map;
  return rep;
}

}  // namespace swapffn

// The CPU reference backend: SPEC section 4 computed literally, one core at a time, fp32 activations
// with double accumulation. Cores are independent, so threads take tiles of cores in any order and
// every core's result is bitwise the same whatever the thread count or batch; the collapse sums over
// cores in ascending order on one thread.
#include "core/reference/reference_engine.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <string>
#include <thread>

#include "core/reference/reference_math.hpp"
#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"

namespace swapffn::reference {
namespace {

std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
  return out;
}

// Cores advance through the events together in tiles of this many, so each weight row is read
// once per tile instead of once per core. The tile size has no effect on the results.
constexpr int kTile = 8;

class ReferenceEngine final : public Engine {
 public:
  ReferenceEngine(const Weights& w, const EngineOptions& opt);
  std::string name() const override { return "reference"; }
  Precision precision() const override { return Precision::fp32; }
  const Config& config() const override { return cfg_; }
  void step(const float* x, float* delta, State& state, const StepOptions& opt) override;

 private:
  // Everything one step writes, held apart from the caller's objects until the step has finished.
  struct Scratch {
    std::vector<bf16> ram;
    std::vector<uint8_t> map;
    std::vector<float> h;  // [B, C, D]: each core's vector after the last event
    Trace record;
    FollowReport report;
    std::vector<float> delta;
  };
  struct TileBuffers {
    std::vector<float> n, z, a, u;
  };

  void validate_step(const float* x, const State& state, const StepOptions& opt) const;
  void run_tile(int64_t first, int64_t count, const float* x, const StepOptions& opt, Scratch& s,
                TileBuffers& buf) const;
  void collapse(int64_t b, Scratch& s) const;
  int thread_count(int64_t tiles) const;

  Config cfg_;
  int64_t D_, F_, C_, E_, R_, K_, Rc_;
  CoreTables tables_;
  std::vector<float> router_norm_, router_w_, swap_w_, bank_w_, bank_b_, norm_w_;
  std::vector<float> w1_, w3_, w2_, basis_, decoder_;
  float swap_b_;
  int threads_;
};

ReferenceEngine::ReferenceEngine(const Weights& w, const EngineOptions& opt)
    : cfg_(w.cfg),
      D_(w.cfg.d_model),
      F_(w.cfg.d_ff),
      C_(w.cfg.core_count),
      E_(w.cfg.n_events),
      R_(w.cfg.d_router),
      K_(w.cfg.collapse_k),
      Rc_(w.cfg.collapse_r),
      tables_(CoreTables::compute(w)),
      router_norm_(widen(w.router_norm)),
      router_w_(widen(w.router_w)),
      swap_w_(widen(w.router_swap_w)),
      bank_w_(widen(w.bank_w)),
      bank_b_(widen(w.bank_b)),
      norm_w_(widen(w.norm_w)),
      w1_(widen(w.w1)),
      w3_(widen(w.w3)),
      w2_(widen(w.w2)),
      basis_(widen(w.collapse_basis)),
      decoder_(widen(w.collapse_decoder)),
      swap_b_(bf16_to_float(w.router_swap_b.at(0))),
      threads_(opt.threads) {
  require_in_range(opt.threads, 0, kMaxThreads, "reference: threads (0 = all cores)");
  if (threads_ == 0) threads_ = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void ReferenceEngine::validate_step(const float* x, const State& state, const StepOptions& opt) const {
  const int64_t B = state.batch;
  state.check_matches(cfg_, B);
  state.validate();
  check_input_values(x, B * D_, "x");
  if (const Trace* f = opt.follow) {
    const int64_t n = E_ * B * C_;
    SWAPFFN_REQUIRE(f->events == E_ && f->batch == B && f->cores == C_,
                    "trace to follow has shape [" + std::to_string(f->events) + ", " +
                        std::to_string(f->batch) + ", " + std::to_string(f->cores) + "], expected [" +
                        std::to_string(E_) + ", " + std::to_string(B) + ", " + std::to_string(C_) + "]");
    SWAPFFN_REQUIRE(static_cast<int64_t>(f->gate.size()) == n && static_cast<int64_t>(f->slot.size()) == n,
                    "trace to follow holds " + std::to_string(f->gate.size()) + " gate and " +
                        std::to_string(f->slot.size()) + " slot entries, expected " + std::to_string(n));
    for (int64_t i = 0; i < n; ++i) {
      SWAPFFN_REQUIRE(f->gate[i] <= 1, "trace to follow: gate at index " + std::to_string(i) + " is " +
                                           std::to_string(f->gate[i]) + " (must be 0 or 1)");
      SWAPFFN_REQUIRE(f->slot[i] <= 3, "trace to follow: slot at index " + std::to_string(i) + " is " +
                                           std::to_string(f->slot[i]) + " (must be 0..3)");
    }
  }
}

// Runs all events for `count` consecutive (sequence, core) items starting at flat index `first`.
void ReferenceEngine::run_tile(int64_t first, int64_t count, const float* x, const StepOptions& opt,
                               Scratch& s, TileBuffers& buf) const {
  const int64_t B = static_cast<int64_t>(s.map.size()) / C_;
  const double eps = cfg_.norm_eps;
  buf.n.resize(kTile * D_);
  buf.z.resize(kTile * R_);
  buf.a.resize(kTile * F_);
  buf.u.resize(kTile * F_);

  for (int64_t i = 0; i < count; ++i) {
    const int64_t item = first + i, b = item / C_, c = item % C_;
    float* h = &s.h[item * D_];
    const float* scale = &tables_.scale[c * D_];
    const float* shift = &tables_.shift[c * D_];
    for (int64_t d = 0; d < D_; ++d)
      h[d] = static_cast<float>(static_cast<double>(x[b * D_ + d]) * scale[d] + shift[d]);
  }

  for (int64_t e = 0; e < E_; ++e) {
    // Swap.
    for (int64_t i = 0; i < count; ++i) {
      const int64_t item = first + i, b = item / C_, c = item % C_;
      float* h = &s.h[item * D_];
      float* n = &buf.n[i * D_];
      float* z = &buf.z[i * R_];
      rms_norm(h, router_norm_.data(), D_, eps, n);
      for (int64_t r = 0; r < R_; ++r) z[r] = static_cast<float>(dot(n, &router_w_[r * D_], D_));
      const float sv = static_cast<float>(dot(z, swap_w_.data(), R_) + swap_b_);
      float logits[4];
      for (int k = 0; k < 4; ++k) {
        double acc = bank_b_[k];
        for (int64_t r = 0; r < R_; ++r) acc += static_cast<double>(z[r]) * bank_w_[r * 4 + k];
        logits[k] = static_cast<float>(acc);
      }
      const SlotChoice own = choose_slot(logits);
      const bool own_gate = gate_open(sv);

      const int64_t t = (e * B + b) * C_ + c;  // Trace::index(e, b, c)
      const bool gate = opt.follow ? opt.follow->gate[t] != 0 : own_gate;
      const int slot = opt.follow ? opt.follow->slot[t] : own.slot;
      if (opt.record) {
        s.record.gate[t] = gate ? 1 : 0;
        s.record.slot[t] = static_cast<uint8_t>(slot);
      }
      if (opt.report) {
        s.report.own.gate[t] = own_gate ? 1 : 0;
        s.report.own.slot[t] = static_cast<uint8_t>(own.slot);
        s.report.gate_margin[t] = std::fabs(sv);
        s.report.slot_margin[t] = own.gap;
      }
      if (gate) {
        uint8_t& map = s.map[b * C_ + c];
        const int p = lane_of(map, slot);
        exchange_with_bank(h, &s.ram[((b * C_ + c) * 4 + p) * D_], D_);
        map = swap_lanes(map, slot);
      }
    }
    // FFN, k_ffn times with the shared weights.
    for (int64_t k = 0; k < cfg_.k_ffn; ++k) {
      for (int64_t i = 0; i < count; ++i)
        rms_norm(&s.h[(first + i) * D_], norm_w_.data(), D_, eps, &buf.n[i * D_]);
      for (int64_t f = 0; f < F_; ++f) {
        const float* r1 = &w1_[f * D_];
        const float* r3 = &w3_[f * D_];
        for (int64_t i = 0; i < count; ++i) {
          const float* n = &buf.n[i * D_];
          const float g = silu(static_cast<float>(dot(n, r1, D_)));
          const float up = static_cast<float>(dot(n, r3, D_));
          buf.u[i * F_ + f] = g * up;
        }
      }
      for (int64_t d = 0; d < D_; ++d) {
        const float* r2 = &w2_[d * F_];
        for (int64_t i = 0; i < count; ++i) {
          const float y = static_cast<float>(dot(&buf.u[i * F_], r2, F_));
          float& hd = s.h[(first + i) * D_ + d];
          hd = cfg_.ffn_residual ? hd + y : y;
        }
      }
    }
  }
}

// delta[b] from the final core vectors of sequence b; cores are summed in ascending order.
void ReferenceEngine::collapse(int64_t b, Scratch& s) const {
  std::vector<double> acc(K_ * D_, 0.0);
  for (int64_t c = 0; c < C_; ++c) {
    const float* h = &s.h[(b * C_ + c) * D_];
    for (int64_t k = 0; k < K_; ++k) {
      const double alpha = tables_.alpha[c * K_ + k];
      double* row = &acc[k * D_];
      for (int64_t d = 0; d < D_; ++d) row[d] += alpha * h[d];
    }
  }
  std::vector<float> pooled(K_ * D_);
  for (int64_t i = 0; i < K_ * D_; ++i) pooled[i] = static_cast<float>(acc[i]);
  std::vector<float> zc(Rc_);
  for (int64_t r = 0; r < Rc_; ++r) {
    double sum = 0;
    for (int64_t k = 0; k < K_; ++k) sum += dot(&pooled[k * D_], &basis_[(k * Rc_ + r) * D_], D_);
    zc[r] = cfg_.collapse_silu ? silu(static_cast<float>(sum)) : static_cast<float>(sum);
  }
  for (int64_t d = 0; d < D_; ++d)
    s.delta[b * D_ + d] = static_cast<float>(dot(&decoder_[d * Rc_], zc.data(), Rc_));
}

int ReferenceEngine::thread_count(int64_t tiles) const {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads_, tiles)));
}

void ReferenceEngine::step(const float* x, float* delta, State& state, const StepOptions& opt) {
  validate_step(x, state, opt);
  const int64_t B = state.batch, items = B * C_;

  Scratch s;
  s.ram = state.ram;
  s.map = state.stream_map;
  s.h.assign(items * D_, 0.0f);
  s.delta.assign(B * D_, 0.0f);
  if (opt.record) s.record.resize(E_, B, C_);
  if (opt.report) {
    s.report.own.resize(E_, B, C_);
    s.report.gate_margin.assign(E_ * B * C_, 0.0f);
    s.report.slot_margin.assign(E_ * B * C_, 0.0f);
  }

  const int64_t tiles = (items + kTile - 1) / kTile;
  std::atomic<int64_t> next{0};
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  auto worker = [&] {
    try {
      TileBuffers buf;
      for (int64_t t; !failed && (t = next.fetch_add(1)) < tiles;)
        run_tile(t * kTile, std::min<int64_t>(kTile, items - t * kTile), x, opt, s, buf);
    } catch (...) {
      if (!failed.exchange(true)) failure = std::current_exception();
    }
  };
  const int nthreads = thread_count(tiles);
  std::vector<std::thread> pool;
  for (int i = 1; i < nthreads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);

  for (int64_t b = 0; b < B; ++b) collapse(b, s);

  // Commit: nothing above touched the caller's objects.
  state.ram.swap(s.ram);
  state.stream_map.swap(s.map);
  std::copy(s.delta.begin(), s.delta.end(), delta);
  if (opt.record) *opt.record = std::move(s.record);
  if (opt.report) *opt.report = std::move(s.report);
}

}  // namespace

std::unique_ptr<Engine> make_reference_engine(const Weights& w, const EngineOptions& opt) {
  return std::make_unique<ReferenceEngine>(w, opt);
}

}  // namespace swapffn::reference

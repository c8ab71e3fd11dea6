// swapffn check: a backend against the reference following its decision trace (SPEC section 5).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/check.hpp"
#include "swapffn/error.hpp"
#include "swapffn/flip_rate.hpp"
#include "swapffn/limits.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::cli {

namespace {
struct CheckArgs {
  std::string model, backend, tolerance;
  int64_t batch = 1, tokens = 2;
  int64_t flip_tokens = 16, flip_batch = 4;
  uint64_t seed = 1;
  double tau = -1;
  int threads = 0;
  bool no_graph = false;
  FusedFlags fused;
};
}  // namespace

void add_check_command(CLI::App& app) {
  auto a = std::make_shared<CheckArgs>();
  auto* cmd = add_command(app, "check", "check a backend against the reference following its decisions (exit 1 on disagreement)",
                          "swapffn check --model m.safetensors --backend fused --batch 3 --tokens 4");
  cmd->add_option("--model", a->model, "model file (safetensors)")->required();
  cmd->add_option("--backend", a->backend, "backend to check")->required();
  cmd->add_option("--batch", a->batch, "sequences per step")->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "tokens to decode")->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the inputs x ~ N(0,1)")->capture_default_str();
  cmd->add_option("--tolerance", a->tolerance,
                  "tolerance preset: bf16, fp8 or fp32 (default: the backend's precision)");
  cmd->add_option("--tau", a->tau, "decision margin tolerance (overrides the preset's)");
  cmd->add_option("--threads", a->threads, "CPU threads of the reference (0 = all)")->capture_default_str();
  cmd->add_flag("--no-graph", a->no_graph, "GPU backends: no CUDA graph");
  cmd->add_option("--flip-tokens", a->flip_tokens,
                  "fp8 backends: tokens of the free-running decision flip rate against fused (bf16)")
      ->capture_default_str();
  cmd->add_option("--flip-batch", a->flip_batch, "fp8 backends: sequences of that flip rate")->capture_default_str();
  a->fused.add_to(cmd);
  cmd->callback([a] {
    require_in_range(a->batch, 1, kMaxBatch, "--batch");
    require_in_range(a->tokens, 1, kMaxTokens, "--tokens");
    require_in_range(a->threads, 0, kMaxThreads, "--threads");
    require_in_range(a->flip_tokens, 1, kMaxTokens, "--flip-tokens");
    require_in_range(a->flip_batch, 1, kMaxBatch, "--flip-batch");
    const Weights w = Weights::load(a->model);
    EngineOptions eo;
    eo.threads = a->threads;
    eo.graph = !a->no_graph;
    const std::string backend = chosen_backend(a->backend, w).name;
    eo.fused = a->fused.resolve(w.cfg, backend);
    auto engine = make_engine(backend, w, eo);
    Tolerance tol = Tolerance::preset(!a->tolerance.empty() ? a->tolerance : precision_name(engine->precision()));
    if (a->tau >= 0) {
      tol.tau = a->tau;
      tol.name += " with tau " + std::to_string(a->tau);
    }
    const CheckReport r = check_backend(w, *engine, a->batch, a->tokens, a->seed, tol, a->threads);
    std::printf("decisions checked: %lld (gate %lld, slot %lld)\n", static_cast<long long>(r.checked()),
                static_cast<long long>(r.gate_checked), static_cast<long long>(r.slot_checked));
    std::printf("decisions disagreeing: %lld (gate %lld, slot %lld), %lld with margin > tau %g, "
                "max margin %.3g\n",
                static_cast<long long>(r.disagreeing()), static_cast<long long>(r.gate_disagree),
                static_cast<long long>(r.slot_disagree), static_cast<long long>(r.disagree_over_tau),
                tol.tau, r.max_disagree_margin);
    std::printf("delta: relative L2 error %.3g (tolerance %g)\n", r.delta_rel_l2, tol.delta_rel_l2);
    std::printf("final state: relative L2 error %.3g (tolerance %g), stream maps %s\n", r.state_rel_l2,
                tol.state_rel_l2, r.stream_maps_equal ? "equal" : "differ");
    std::printf("%s\n", r.summary().c_str());
    if (const char* twin = backend_facts(backend).bf16_twin) {
      // The bf16 engine runs the model's bf16 weights: a bf16 file's own (the user's real trade),
      // an fp8 file's dequantised ones (isolating the rounding of the activations).
      EngineOptions bo;
      bo.threads = a->threads;
      bo.graph = !a->no_graph;
      auto bf16_engine = make_engine(twin, w.as_bf16(), bo);
      const FlipRate f = decision_flip_rate(*engine, *bf16_engine, a->flip_batch, a->flip_tokens, a->seed);
      std::printf("flip rate vs %s (bf16), per token over %lld tokens at B=%lld: %s\n",
                  twin, static_cast<long long>(f.tokens), static_cast<long long>(f.batch),
                  f.per_token().c_str());
    }
    SWAPFFN_REQUIRE(r.passed(), "backend '" + backend + "' disagrees with the reference: " + r.summary());
  });
}

}  // namespace swapffn::cli

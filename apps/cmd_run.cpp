// swapffn run: decodes T tokens of random inputs x ~ N(0,1) with one backend, prints the rate and
// checksums, optionally saves the final state and a dump an independent implementation can judge.
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/dump.hpp"
#include "swapffn/error.hpp"
#include "swapffn/file_output.hpp"
#include "swapffn/limits.hpp"
#include "swapffn/random.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::cli {

namespace {

struct RunArgs {
  std::string model, backend = kAutoBackend, state_in, state_out, dump;
  int64_t batch = 1, tokens = 8;
  uint64_t seed = 1;
  int threads = 0;
  bool no_graph = false, allow_foreign_state = false;
  FusedFlags fused;
};

// FNV-1a over raw bytes: a checksum that changes with any bit of the data.
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xCBF29CE484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

void draw_progress(int64_t done, int64_t total, double seconds) {
  constexpr int kWidth = 40;
  const int fill = static_cast<int>(kWidth * done / total);
  std::fprintf(stderr, "\r[%.*s%.*s] %" PRId64 "/%" PRId64 " tokens, %.1f s", fill,
               "########################################", kWidth - fill,
               "........................................", done, total, seconds);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

// The --state-in file, refused when it cannot be shown to belong to this model unless the user
// allows it.
State load_state_in(const RunArgs& a, uint64_t model_fingerprint) {
  try {
    return State::load(a.state_in, model_fingerprint, a.model);
  } catch (const ForeignStateError& e) {
    SWAPFFN_REQUIRE(a.allow_foreign_state, std::string(e.what()) + " (--allow-foreign-state uses it anyway)");
    std::fprintf(stderr, "swapffn: warning: %s; using it anyway (--allow-foreign-state)\n", e.what());
    return State::load(a.state_in);
  }
}

void run(const RunArgs& a, bool batch_given) {
  if (batch_given || a.state_in.empty()) require_in_range(a.batch, 1, kMaxBatch, "--batch");
  require_in_range(a.tokens, 1, kMaxTokens, "--tokens");
  require_in_range(a.threads, 0, kMaxThreads, "--threads");
  if (!a.state_out.empty()) {
    check_writable(a.state_out);
    require_not_input(a.state_out, "--state-out", a.model, "--model");
  }
  if (!a.dump.empty()) {
    check_writable(a.dump);
    require_not_input(a.dump, "--dump", a.model, "--model");
    if (!a.state_in.empty()) require_not_input(a.dump, "--dump", a.state_in, "--state-in");
  }
  if (!a.state_out.empty() && !a.dump.empty()) require_not_input(a.dump, "--dump", a.state_out, "--state-out");
  const Weights w = Weights::load(a.model);
  // It reads every parameter, so only when a state file needs it.
  const uint64_t fingerprint = a.state_in.empty() && a.state_out.empty() ? 0 : w.fingerprint();
  const Config& cfg = w.cfg;
  EngineOptions eo;
  eo.threads = a.threads;
  eo.graph = !a.no_graph;
  const ResolvedBackend backend = chosen_backend(a.backend, w);
  eo.fused = a.fused.resolve(cfg, backend.name);
  auto engine = make_engine(backend.name, w, eo);

  State st = a.state_in.empty() ? State::init(cfg, a.batch) : load_state_in(a, fingerprint);
  const int64_t B = (!a.state_in.empty() && !batch_given) ? st.batch : a.batch;
  st.check_matches(cfg, B);
  std::optional<State> initial;
  if (!a.dump.empty() && !a.state_in.empty()) initial = st;

  const int64_t T = a.tokens, n = checked_product({B, cfg.d_model}, "B*D");
  const std::vector<float> x = decode_inputs(a.seed, T, B, cfg.d_model);
  std::vector<float> delta;
  allocate(delta, checked_product({T, n}, "T*B*D"), 0.0f, "the outputs delta [T, B, D]");
  std::vector<Trace> traces;
  const bool want_traces = !a.dump.empty();

  // The first token runs alone; when the rest looks long and stderr is a terminal, the rest runs
  // in chunks with a progress bar between them.
  const bool tty = isatty(fileno(stderr)) != 0;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  int64_t done = 0;
  auto decode_chunk = [&](int64_t count) {
    std::vector<Trace> chunk;
    engine->decode(x.data() + done * n, delta.data() + done * n, count, st, want_traces ? &chunk : nullptr);
    traces.insert(traces.end(), chunk.begin(), chunk.end());
    done += count;
  };
  decode_chunk(1);
  const double first = std::chrono::duration<double>(clock::now() - t0).count();
  const bool progress = tty && first * static_cast<double>(T - 1) > 2.0;
  const int64_t chunk = progress ? std::max<int64_t>(1, (T - 1) / 50) : T - 1;
  while (done < T) {
    decode_chunk(std::min(chunk, T - done));
    if (progress) draw_progress(done, T, std::chrono::duration<double>(clock::now() - t0).count());
  }
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();

  double sum = 0, abs_sum = 0;
  for (float v : delta) sum += v, abs_sum += std::fabs(v);
  const uint64_t delta_hash = fnv1a(delta.data(), delta.size() * sizeof(float));
  const uint64_t state_hash =
      fnv1a(st.stream_map.data(), st.stream_map.size(), fnv1a(st.ram.data(), st.ram.size() * sizeof(bf16)));
  if (!backend.why.empty()) std::printf("%s\n", backend.why.c_str());
  std::printf("decoded %" PRId64 " tokens x %" PRId64 " sequences with backend %s in %.3f s: %.2f tok/s "
              "(%.3f ms per step)\n",
              T, B, engine->name().c_str(), secs, static_cast<double>(T * B) / secs, 1e3 * secs / T);
  std::printf("checksum: delta sum %.9g, sum|delta| %.9g, delta hash %016" PRIx64 ", state hash %016" PRIx64 "\n",
              sum, abs_sum, delta_hash, state_hash);

  if (!a.state_out.empty()) {
    st.save(a.state_out, fingerprint);
    std::printf("wrote state %s\n", a.state_out.c_str());
  }
  if (!a.dump.empty()) {
    Dump d;
    d.cfg = cfg;
    d.backend = engine->name();
    d.tokens = T;
    d.batch = B;
    d.x = x;
    d.delta = delta;
    d.set_traces(traces);
    d.final_state = st;
    d.initial_state = initial;
    write_dump(a.dump, d);
    std::printf("wrote dump %s\n", a.dump.c_str());
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* cmd = add_command(app, "run", "decode tokens of random inputs with a backend, print rate and checksums",
                          "swapffn run --model m.safetensors --backend fused --batch 4 --tokens 64");
  cmd->add_option("--model", a->model, "model file (safetensors)")->required();
  cmd->add_option("--backend", a->backend, "backend (auto: fused on a Hopper GPU, else the reference)")
      ->capture_default_str();
  auto* batch = cmd->add_option("--batch", a->batch, "sequences per step (default 1, or the --state-in batch)");
  cmd->add_option("--tokens", a->tokens, "tokens to decode")->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the inputs x ~ N(0,1)")->capture_default_str();
  cmd->add_option("--state-in", a->state_in, "start from this state file instead of the initial state");
  cmd->add_option("--state-out", a->state_out, "write the final state here");
  cmd->add_flag("--allow-foreign-state", a->allow_foreign_state,
                "use a --state-in file saved for another model (or before states recorded their model)");
  cmd->add_option("--dump", a->dump, "write x, delta, decision trace and states here (safetensors)");
  cmd->add_option("--threads", a->threads, "CPU threads of the reference (0 = all)")->capture_default_str();
  cmd->add_flag("--no-graph", a->no_graph, "GPU backends: no CUDA graph");
  a->fused.add_to(cmd);
  cmd->callback([a, batch] { run(*a, batch->count() > 0); });
}

}  // namespace swapffn::cli

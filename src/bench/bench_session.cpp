#include "bench/bench_session.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <utility>

#include "bench/python_row.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/error.hpp"
#include "swapffn/flip_rate.hpp"
#include "swapffn/random.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include "bench/gpu_point_timer.hpp"
#endif

namespace swapffn::bench {
namespace {

using Engines = std::vector<std::pair<std::string, std::unique_ptr<Engine>>>;

bool is_gpu_backend(const std::string& b) { return backend_facts(b).needs_cuda; }

void log(const BenchRow& r) {
  std::fprintf(stderr, "  %s B=%lld: %.4f ms/step\n", r.name.c_str(), static_cast<long long>(r.batch), r.ms);
}

// What each fp8 row trades: its free-running decision flip rate against its bf16 twin on the
// bench's weights, when both run.
std::vector<FlipRate> fp8_flip_rates(const Engines& engines) {
  std::vector<FlipRate> out;
  for (const auto& [name, fp8] : engines) {
    if (fp8->precision() != Precision::fp8) continue;
    for (const auto& [other, bf16] : engines)
      if (other == bf16_backend_of(name)) {
        out.push_back(decision_flip_rate(*fp8, *bf16, kFlipBatch, kFlipTokens, kSeed));
        out.back().engine = name;
      }
  }
  return out;
}

// The engines of the bench's rows: one per backend, and fused-fp8 once per scaling it can run here
// (an fp8 model's own, the one pinned by --fp8-kernels scales=, else both), each row named by it.
Engines make_engines(const BenchOptions& o, const Weights& w, const std::vector<std::string>& backends) {
  Engines engines;
  for (const auto& b : backends) {
    EngineOptions eo;
    const BackendFacts& facts = backend_facts(b);
    if (facts.takes_tuning) eo.fused = o.fused;
    if (facts.precision != Precision::fp8) {
      engines.emplace_back(b, make_engine(b, w, eo));
      continue;
    }
    std::vector<fp8::Scaling> scalings{fp8::Scaling::blocks, fp8::Scaling::rows};
    if (w.fp8_ffn) scalings = {w.fp8_ffn->scaling()};
    if (o.fp8_pinned.fp8_scales) scalings = {*o.fp8_pinned.fp8_scales};
    for (const fp8::Scaling s : scalings) {
      eo.fused.pinned = o.fp8_pinned;
      if (!w.fp8_ffn) eo.fused.pinned.fp8_scales = s;
      engines.emplace_back(fp8_row_name(b, s), make_engine(b, w, eo));
    }
  }
  return engines;
}

#ifdef SWAPFFN_WITH_CUDA
// The python row at `batch` (kernels: the fused choices the C++ engine runs at this batch), or the
// first time it cannot run, a line that says why (and no more tries).
void add_python_row(GpuPointTimer& gpu, const BenchOptions& o, int64_t batch, BenchResults& res) {
  if (!res.python_note.empty()) return;
  BenchRow r = python_row(batch);
  const bool ran = gpu.point(r, [&](const cuda::TimedWindow&) -> std::optional<cuda::DecodeTiming> {
    const PythonRowResult p = run_python_row({python_interpreter(), o.python_model, "fused", o.fused.at(batch).describe(),
                                              batch, o.tokens, o.warmup, o.repeats});
    if (!p.ran) {
      res.python_note = p.why_not;
      return std::nullopt;
    }
    r.same_process_cpp_ms = p.engine_decode_ms;
    return cuda::DecodeTiming{p.median_ms, p.min_ms, p.max_ms};
  });
  if (ran) {
    res.rows.push_back(r);
    log(r);
  } else {
    std::printf("skipped: python (%s)\n", res.python_note.c_str());
  }
}

// The anchors of the rows that run (bf16 always; the blocks scaling's with any fp8 row, the rows
// scaling's when a row runs it), and all of them with --fp8-headroom.
void measure_anchors(GpuPointTimer& gpu, const BenchOptions& o, const Weights& w, int64_t batch, const Engines& engines,
                     BenchResults& res) {
  for (const AnchorSpec& a : kAnchors) {
    bool wanted = !a.operands.e4m3 || o.fp8_headroom;
    for (const auto& [name, e] : engines) {
      const bool fp8 = e->precision() == Precision::fp8;
      wanted = wanted || (fp8 && (!a.headroom || backend_row(name, "fp8", batch).vs_gemms == a.name));
    }
    if (!wanted) continue;
    BenchRow r = anchor_row(a, batch);
    std::string algorithms;
    gpu.point(r, [&](const cuda::TimedWindow& win) {
      return cuda::time_cublas_ffn_gemms(w, batch, o.tokens, o.warmup, o.repeats, kSeed, win, &algorithms, a.operands);
    });
    res.anchor_algorithms[a.name][std::to_string(batch)] = algorithms;
    res.rows.push_back(r);
    log(r);
  }
}
#endif

}  // namespace

double time_host_decode(Engine& e, const State& initial, const BenchOptions& o) {
  State s = initial;
  const int64_t n = static_cast<int64_t>(o.tokens) * s.batch * e.config().d_model;
  std::vector<float> delta(static_cast<size_t>(n));
  std::vector<double> ms;
  for (int r = 0; r < o.warmup + o.repeats; ++r) {
    const std::vector<float> x =
        decode_inputs(mix_seed(kSeed, static_cast<uint64_t>(r)), o.tokens, s.batch, e.config().d_model);
    const auto t0 = std::chrono::steady_clock::now();
    e.decode(x.data(), delta.data(), o.tokens, s);
    const auto t1 = std::chrono::steady_clock::now();
    if (r >= o.warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / o.tokens);
  }
  std::sort(ms.begin(), ms.end());
  return ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
}

BenchResults measure(const BenchOptions& o, const Weights& w, const std::vector<std::string>& backends) {
  const Engines engines = make_engines(o, w, backends);
  BenchResults res;
  const bool on_gpu = std::any_of(backends.begin(), backends.end(), is_gpu_backend);
  if (o.fp8_headroom && !on_gpu) std::printf("skipped: --fp8-headroom (its rows time cuBLASLt's GEMMs on a GPU)\n");
#ifdef SWAPFFN_WITH_CUDA
  std::unique_ptr<GpuPointTimer> gpu;
  if (on_gpu) {
    gpu = std::make_unique<GpuPointTimer>(o.cooldown_s);
    res.floor_tflops = gpu->floor_tflops;
    res.floor_telemetry = gpu->floor_telemetry;
    res.telemetry_note = gpu->telemetry_note;
    res.power_note = gpu->power_note;
  }
#else
  SWAPFFN_REQUIRE(!on_gpu, "GPU backends need a CUDA build");
#endif
  for (int64_t batch : o.batches) {
    const State initial = State::random(w.cfg, batch, kSeed);
#ifdef SWAPFFN_WITH_CUDA
    if (gpu) measure_anchors(*gpu, o, w, batch, engines, res);
#endif
    for (auto& [name, engine] : engines) {
      BenchRow r = backend_row(name, precision_name(engine->precision()), batch);
      const bool on_device = engine->device_steps() != nullptr;  // a row's name may carry a scaling
      if (!on_device) r.ms = time_host_decode(*engine, initial, o);
#ifdef SWAPFFN_WITH_CUDA
      if (on_device)
        gpu->point(r, [&](const cuda::TimedWindow& win) {
          return cuda::time_device_decode(*engine, initial, o.tokens, o.warmup, o.repeats, 4, kSeed, win);
        });
#endif
      res.rows.push_back(r);
      log(r);
#ifdef SWAPFFN_WITH_CUDA
      if (name == "fused") {  // the same step through a state pool (SPEC section 7)
        BenchRow slots = slot_row(name, batch);
        gpu->point(slots, [&](const cuda::TimedWindow& win) {
          return cuda::time_device_decode_slots(*engine, initial, o.tokens, o.warmup, o.repeats, 4, kSeed, win);
        });
        res.rows.push_back(slots);
        log(slots);
        if (!o.python_model.empty()) add_python_row(*gpu, o, batch, res);
      }
#endif
    }
  }
  res.flips = fp8_flip_rates(engines);
  return res;
}

}  // namespace swapffn::bench

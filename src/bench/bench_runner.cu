#include "bench/bench_runner.hpp"

#include <algorithm>
#include <random>
#include <vector>

#include <cuda_bf16.h>

#include "cuda/runtime/captured_graph.hpp"
#include "bench/cublas_ffn_gemms.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/common/gpu_engine.hpp"

namespace swapffn::cuda {

namespace {

// Uniform [-1, 1) from a counter hash: device-side, so large operands cost no host time.
__global__ void fill_uniform_bf16_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = __float2bfloat16_rn(static_cast<float>(z >> 40) * (2.f / 16777216.f) - 1.f);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// cuBLASLt objects of the peak GEMM, released on every path.
struct LtPeakGemm {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtPeakGemm() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {la, lb, lc})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op) cublasLtMatmulDescDestroy(op);
    if (lt) cublasLtDestroy(lt);
  }
};

DecodeTiming timing_of(const std::vector<double>& per_step) {
  DecodeTiming t;
  t.median_ms_per_step = median(per_step);
  t.min_ms_per_step = *std::min_element(per_step.begin(), per_step.end());
  t.max_ms_per_step = *std::max_element(per_step.begin(), per_step.end());
  return t;
}

// `warmup` untimed calls of run(), then `repeats` timed with events on `stream`, each over `steps`
// token steps; `window` spans the timed calls through the last synchronisation.
template <class Run>
DecodeTiming time_runs(Run&& run, cudaStream_t stream, int steps, int warmup, int repeats, const TimedWindow& window) {
  for (int i = 0; i < warmup; ++i) run();
  OwnedTimingEvents ev;
  std::vector<double> per_step;
  if (window.begin) window.begin();  // the warm-up may still run: the window starts with the GPU busy
  for (int i = 0; i < repeats; ++i) {
    CUDA_CHECK(cudaEventRecord(ev.start, stream));
    run();
    CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    per_step.push_back(ev.elapsed_ms() / steps);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (window.end) window.end();
  return timing_of(per_step);
}

GpuEngine& gpu_engine(Engine& e) {
  GpuEngine* g = gpu_engine_of(e);
  SWAPFFN_REQUIRE(g != nullptr, "backend '" + e.name() + "' does not run on the device");
  return *g;
}

std::vector<DeviceBuffer<float>> random_inputs(int count, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<DeviceBuffer<float>> out;
  std::vector<float> host(n);
  for (int i = 0; i < count; ++i) {
    for (float& v : host) v = normal(rng);
    out.emplace_back(n);
    out.back().upload(host);
  }
  return out;
}

}  // namespace

double measure_bf16_gemm_tflops(int n, int warmup, int repeats, double min_ms, const TimedWindow& window) {
  SWAPFFN_REQUIRE(n > 0 && repeats > 0 && warmup >= 0 && min_ms >= 0, "GEMM peak: bad size, repeat count or duration");
  const auto nn = static_cast<size_t>(n) * n;
  DeviceBuffer<__nv_bfloat16> a(nn), b(nn), c(nn);
  fill_uniform_bf16_kernel<<<1024, 256>>>(a.get(), static_cast<int64_t>(nn), 1);
  SWAPFFN_CHECK_LAUNCH();
  fill_uniform_bf16_kernel<<<1024, 256>>>(b.get(), static_cast<int64_t>(nn), 2);
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());

  LtPeakGemm g;
  CUBLAS_CHECK(cublasLtCreate(&g.lt));
  const size_t ws_bytes = size_t{32} << 20;
  DeviceBuffer<uint8_t> ws(ws_bytes);
  const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16BF, n, n, n));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.lb, CUDA_R_16BF, n, n, n));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.lc, CUDA_R_16BF, n, n, n));
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&g.pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                    sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(g.lt, g.op, g.la, g.lb, g.lc, g.lc, g.pref, 1, &res, &found));
  SWAPFFN_REQUIRE(found == 1, "cuBLASLt offers no algorithm for the peak GEMM");
  const float alpha = 1.f, beta = 0.f;
  const auto gemm = [&] {
    CUBLAS_CHECK(cublasLtMatmul(g.lt, g.op, &alpha, a.get(), g.la, b.get(), g.lb, &beta, c.get(), g.lc, c.get(),
                                g.lc, &res.algo, ws.get(), ws_bytes, nullptr));
  };
  for (int i = 0; i < warmup; ++i) gemm();
  OwnedTimingEvents ev;
  std::vector<double> ms;
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
  if (window.begin) window.begin();
  for (double total = 0; static_cast<int>(ms.size()) < repeats || total < min_ms;) {
    CUDA_CHECK(cudaEventRecord(ev.start, nullptr));
    gemm();
    CUDA_CHECK(cudaEventRecord(ev.stop, nullptr));
    ms.push_back(ev.elapsed_ms());
    total += ms.back();
  }
  if (window.end) window.end();
  return 2.0 * n * n * static_cast<double>(n) / (median(ms) * 1e-3) / 1e12;
}

DecodeTiming time_device_decode(Engine& engine, const State& initial, int tokens, int warmup, int repeats,
                                int rotations, uint64_t seed, const TimedWindow& window) {
  SWAPFFN_REQUIRE(tokens > 0 && repeats > 0 && warmup >= 0 && rotations > 0, "bench: bad token/repeat counts");
  GpuEngine& dec = gpu_engine(engine);
  dec.upload_state(initial);
  const size_t n = static_cast<size_t>(tokens) * initial.batch * engine.config().d_model;
  std::vector<DeviceBuffer<float>> xs = random_inputs(rotations, n, seed);
  DeviceBuffer<float> delta(n);
  int next = 0;
  const auto run = [&] {
    dec.enqueue_decode(xs[static_cast<size_t>(next)].get(), delta.get(), tokens);
    next = (next + 1) % rotations;
  };
  return time_runs(run, dec.stream(), tokens, warmup, repeats, window);
}

DecodeTiming time_device_decode_slots(Engine& engine, const State& initial, int tokens, int warmup, int repeats,
                                      int rotations, uint64_t seed, const TimedWindow& window) {
  SWAPFFN_REQUIRE(tokens > 0 && repeats > 0 && warmup >= 0 && rotations > 0, "bench: bad token/repeat counts");
  GpuEngine& dec = gpu_engine(engine);
  const int64_t B = initial.batch;
  auto pool = dec.make_pool(4 * B);
  std::vector<int32_t> ids(static_cast<size_t>(B));
  State one = State::init(engine.config(), 1);
  for (int64_t b = 0; b < B; ++b) {
    ids[size_t(b)] = int32_t(4 * b + 1);
    initial.copy_sequence_to(b, one, 0);
    pool->set(ids[size_t(b)], one);
  }
  DeviceBuffer<int32_t> ids_dev;
  ids_dev.upload(ids);
  const size_t n = static_cast<size_t>(tokens) * B * engine.config().d_model;
  std::vector<DeviceBuffer<float>> xs = random_inputs(rotations, n, seed);
  DeviceBuffer<float> delta(n);
  int next = 0;
  const auto run = [&] {
    dec.enqueue_decode_slots(xs[static_cast<size_t>(next)].get(), delta.get(), tokens, *pool, ids_dev.get(), B);
    next = (next + 1) % rotations;
  };
  return time_runs(run, dec.stream(), tokens, warmup, repeats, window);
}

DecodeTiming time_cublas_ffn_gemms(const Weights& w, int64_t batch, int tokens, int warmup, int repeats, uint64_t seed,
                                   const TimedWindow& window, std::string* algorithms, AnchorOperands operands) {
  SWAPFFN_REQUIRE(batch > 0 && tokens > 0 && repeats > 0 && warmup >= 0, "bench: bad batch, token or repeat counts");
  const CublasFfnGemms gemms(w, batch * w.cfg.core_count, seed, operands);
  if (algorithms) *algorithms = gemms.describe();
  OwnedStream stream;
  const CapturedGraph step(stream.s, [&] { gemms.enqueue_step(stream.s); });
  const auto run = [&] {
    for (int t = 0; t < tokens; ++t) step.launch(stream.s);
  };
  return time_runs(run, stream.s, tokens, warmup, repeats, window);
}

}  // namespace swapffn::cuda

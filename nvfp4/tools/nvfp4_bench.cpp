// swapffn-nvfp4 bench: the NVFP4 kernels on the GPU MODE competition's 14 shapes (or given GEMM / dual shapes).
// Per shape: the best time of the candidate configs (median over L2-flushed runs), % of Hopper
// speed-of-light measured in the same run, the B200 competition best, and cuBLAS bf16 on the
// dequantized operands, against which each result is also checked (bit-exact for GEMV, GEMM and
// grouped; within tolerance for the dual GEMM). Correctness against the CPU reference lives in
// nvfp4/tests/gpu_test_nvfp4.cu.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "nvfp4_bench.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"
#include "swapffn/file_output.hpp"
#include "swapffn_commit.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda/runtime/cuda_check.hpp"
#include "swapffn/nvfp4/device.hpp"
#include "swapffn/nvfp4/nvfp4.hpp"
#include "swapffn/nvfp4/reference.hpp"
#endif

namespace swapffn::nvfp4::tool {

struct BenchOptions {
  std::string op = "all", json, flush = "write", scales = "plain";
  int reps = 30;
  std::vector<std::string> shapes;
  bool no_search = false;
};

#ifdef SWAPFFN_WITH_CUDA
namespace {

// Median microseconds over `reps` runs after two warm-ups; before each timed run the L2 is flushed
// by a memset of 2x its size (the competition's method) unless flushing is off (warm L2: what the kernel
// costs without HBM traffic).
struct Timer {
  int reps;
  bool flush_l2;
  DeviceBuffer flush;
  cudaEvent_t start[64], stop[64];
  Timer(int r, size_t l2_bytes, bool f) : reps(std::min(r, 64)), flush_l2(f), flush(std::max<size_t>(2 * l2_bytes, 64 << 20)) {
    for (int i = 0; i < reps; ++i) {
      CUDA_CHECK(cudaEventCreate(&start[i]));
      CUDA_CHECK(cudaEventCreate(&stop[i]));
    }
  }
  ~Timer() {
    for (int i = 0; i < reps; ++i) {
      cudaEventDestroy(start[i]);
      cudaEventDestroy(stop[i]);
    }
  }
  double median_us(const std::function<void()>& fn, bool flush_before = true) {
    fn();
    fn();
    for (int i = 0; i < reps; ++i) {
      if (flush_before && flush_l2) CUDA_CHECK(cudaMemsetAsync(flush.get(), i & 0xFF, flush.bytes(), nullptr));
      CUDA_CHECK(cudaEventRecord(start[i], nullptr));
      fn();
      CUDA_CHECK(cudaEventRecord(stop[i], nullptr));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> t(reps);
    for (int i = 0; i < reps; ++i) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
      t[i] = ms * 1000.0;
    }
    std::sort(t.begin(), t.end());
    return t[reps / 2];
  }
};

struct Cublas {
  cublasHandle_t h = nullptr;
  Cublas() { CUBLAS_CHECK(cublasCreate(&h)); }
  ~Cublas() { cublasDestroy(h); }
  // C[M][N] (fp32, row-major) = A[M][K] * B[N][K]^T with bf16 row-major operands, L times (strided).
  void gemm(const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k, int64_t l = 1) const {
    const float one = 1.0f, zero = 0.0f;
    if (l == 1) {
      CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                &one, b, CUDA_R_16BF, static_cast<int>(k), a, CUDA_R_16BF, static_cast<int>(k), &zero, c,
                                CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
    }
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                            static_cast<int>(k), &one, b, CUDA_R_16BF, static_cast<int>(k), n * k, a,
                                            CUDA_R_16BF, static_cast<int>(k), m * k, &zero, c, CUDA_R_32F,
                                            static_cast<int>(n), m * n, static_cast<int>(l), CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  }
};

// What this device does in the same run: HBM bandwidth (a 1 GiB copy, read + write) and dense bf16
// tensor throughput (cuBLAS 8192^3).
struct Ceilings {
  double bw_gbs = 0, tflops = 0;
};

Ceilings measure_ceilings(Timer& timer, const Cublas& blas) {
  Ceilings c;
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer src(bytes), dst(bytes);
  src.fill(0x3C);
  const double copy_us = timer.median_us(
      [&] { CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, nullptr)); }, false);
  c.bw_gbs = 2.0 * bytes / (copy_us * 1e3);
  const int64_t n = 8192;
  const DeviceOperand da = upload(make_operand(InputKind::dual, n, n, 1, 991), ScaleLayout::plain);
  const DeviceOperand db = upload(make_operand(InputKind::dual, n, n, 1, 992), ScaleLayout::plain);
  DeviceBuffer a(n * n * 2), b(n * n * 2), out(n * n * 4);
  dequantize_to_bf16(da.view, n, n, 1, a.get(), nullptr);
  dequantize_to_bf16(db.view, n, n, 1, b.get(), nullptr);
  const double gemm_us = timer.median_us([&] { blas.gemm(a.get(), b.get(), out.get(), n, n, n); }, false);
  c.tflops = 2.0 * n * n * n / (gemm_us * 1e6);
  return c;
}

struct Result {
  Result(std::string o, std::string s) : op(std::move(o)), shape(std::move(s)) {}
  std::string op, shape, config, default_config;
  double us = 0, default_us = 0, sol_us = 0, b200_us = 0, cublas_us = 0, bytes = 0, flops = 0;
  int64_t mismatches = 0;
  bool exact = true;
};

int64_t operand_bytes(int64_t rows, int64_t k, int64_t l) { return rows * (k / 2 + k / 16) * l; }

template <class T>
std::vector<T> download(const DeviceBuffer& b, int64_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> h(n);
  b.download(h.data(), n * sizeof(T));
  return h;
}

// Our fp16 results against cuBLAS's fp32 ones rounded to fp16: equal (NaN equals NaN), or within
// 1e-3 + 1e-3|ref| where the sums are not exact (the dual GEMM's SwiGLU).
int64_t mismatches(const std::vector<uint16_t>& ours, const std::vector<float>& ref32, bool exact) {
  int64_t bad = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    const float g = fp16_to_float(ours[i]), r = fp16_to_float(float_to_fp16(ref32[i]));
    const bool both_nan = std::isnan(g) && std::isnan(r);
    bad += !(both_nan || (exact ? g == r : std::fabs(g - r) <= 1e-3f + 1e-3f * std::fabs(r)));
  }
  return bad;
}

// The state every shape's bench shares.
struct Bench {
  Timer& timer;
  const Cublas& blas;
  Ceilings ceil;
  int sms;
  ScaleLayout layout;
  bool search;

  // Times the candidates (all, or the first = the default alone), records the best in r and runs
  // it once more so that its output can be checked. Each time goes to stderr, for the record.
  template <class Problem, class Cfg, class Run>
  void time(Result& r, const Problem& p, std::vector<Cfg> cands, Run run) {
    if (!search) cands.resize(1);
    size_t bytes = 0;
    for (const Cfg& c : cands) bytes = std::max(bytes, workspace_bytes(p, c));
    DeviceBuffer ws = make_workspace(bytes);
    const Workspace w{ws.get(), ws.bytes()};
    size_t best = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      const double us = timer.median_us([&] { run(cands[i], w); });
      std::cerr << "  candidate " << describe(cands[i]) << ": " << us << " us\n";
      if (i == 0) r.default_us = us;
      if (i == 0 || us < r.us) r.us = us, best = i;
    }
    r.config = describe(cands[best]);
    r.default_config = describe(cands[0]);
    run(cands[best], w);
  }

  void finish(Result& r, double b200) const {
    r.sol_us = std::max(r.bytes / (ceil.bw_gbs * 1e3), r.flops / (ceil.tflops * 1e6));
    r.b200_us = b200;
  }
};

std::string dims(std::initializer_list<int64_t> v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

Result bench_gemv(Bench& bn, int64_t m, int64_t k, int64_t l, double b200) {
  Result r{"gemv", dims({m, k, l})};
  const auto ha = make_operand(InputKind::gemv, m, k, l, 1000 + m + k), hb = make_operand(InputKind::gemv, 1, k, l, 2000 + k);
  const auto da = upload(ha, bn.layout), db = upload(hb, bn.layout);
  DeviceBuffer c(m * l * 2);
  const GemvProblem p{m, k, l, da.view, db.view, c.get()};
  bn.time(r, p, gemv_candidates(p, bn.sms), [&](const GemvConfig& cfg, Workspace w) { gemv(p, cfg, w, nullptr); });
  const auto ours = download<uint16_t>(c, m * l);
  DeviceBuffer a16(m * k * l * 2), b16(k * l * 2), c32(m * l * 4);
  dequantize_to_bf16(da.view, m, k, l, a16.get(), nullptr);
  dequantize_to_bf16(db.view, 1, k, l, b16.get(), nullptr);
  // L GEMMs with N = 1: c[l][m] = A[l][m][:] . b[l][:].
  r.cublas_us = bn.timer.median_us([&] { bn.blas.gemm(a16.get(), b16.get(), c32.get(), m, 1, k, l); });
  r.mismatches = mismatches(ours, download<float>(c32, m * l), true);
  r.bytes = static_cast<double>(operand_bytes(m, k, l) + operand_bytes(1, k, l) + m * l * 2);
  r.flops = 2.0 * m * k * l;
  bn.finish(r, b200);
  return r;
}

Result bench_gemm(Bench& bn, int64_t m, int64_t n, int64_t k, double b200) {
  Result r{"gemm", dims({m, n, k})};
  const auto ha = make_operand(InputKind::gemm, m, k, 1, 3000 + n + k), hb = make_operand(InputKind::gemm, n, k, 1, 4000 + n + k);
  const auto da = upload(ha, bn.layout), db = upload(hb, bn.layout);
  DeviceBuffer c(m * n * 2);
  const GemmProblem p{m, n, k, 1, da.view, db.view, c.get()};
  bn.time(r, p, gemm_candidates(p, bn.sms), [&](const TileConfig& cfg, Workspace w) { gemm(p, cfg, w, nullptr); });
  const auto ours = download<uint16_t>(c, m * n);
  DeviceBuffer a16(m * k * 2), b16(n * k * 2), c32(m * n * 4);
  dequantize_to_bf16(da.view, m, k, 1, a16.get(), nullptr);
  dequantize_to_bf16(db.view, n, k, 1, b16.get(), nullptr);
  r.cublas_us = bn.timer.median_us([&] { bn.blas.gemm(a16.get(), b16.get(), c32.get(), m, n, k); });
  r.mismatches = mismatches(ours, download<float>(c32, m * n), true);
  r.bytes = static_cast<double>(operand_bytes(m, k, 1) + operand_bytes(n, k, 1) + m * n * 2);
  r.flops = 2.0 * m * n * k;
  bn.finish(r, b200);
  return r;
}

Result bench_dual(Bench& bn, int64_t m, int64_t n, int64_t k, double b200) {
  Result r{"dual", dims({m, n, k})};
  r.exact = false;
  const auto ha = make_operand(InputKind::dual, m, k, 1, 5000 + m + n), h1 = make_operand(InputKind::dual, n, k, 1, 6000 + n),
             h2 = make_operand(InputKind::dual, n, k, 1, 7000 + n);
  const auto da = upload(ha, bn.layout), d1 = upload(h1, bn.layout), d2 = upload(h2, bn.layout);
  DeviceBuffer c(m * n * 2);
  const DualGemmProblem p{m, n, k, 1, da.view, d1.view, d2.view, c.get()};
  bn.time(r, p, dual_candidates(p, bn.sms), [&](const TileConfig& cfg, Workspace w) { dual_gemm_swiglu(p, cfg, w, nullptr); });
  const auto ours = download<uint16_t>(c, m * n);
  // One cuBLAS GEMM on [B1; B2] (2N columns): both products, the SwiGLU applied on the host.
  DeviceBuffer a16(m * k * 2), b16(2 * n * k * 2), c32(m * 2 * n * 4);
  dequantize_to_bf16(da.view, m, k, 1, a16.get(), nullptr);
  dequantize_to_bf16(d1.view, n, k, 1, b16.get(), nullptr);
  dequantize_to_bf16(d2.view, n, k, 1, static_cast<char*>(b16.get()) + n * k * 2, nullptr);
  r.cublas_us = bn.timer.median_us([&] { bn.blas.gemm(a16.get(), b16.get(), c32.get(), m, 2 * n, k); });
  const auto gu = download<float>(c32, m * 2 * n);
  std::vector<float> ref(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float g = gu[i * 2 * n + j], u = gu[i * 2 * n + n + j];
      ref[i * n + j] = g / (1.0f + std::exp(-g)) * u;
    }
  r.mismatches = mismatches(ours, ref, false);
  r.bytes = static_cast<double>(operand_bytes(m, k, 1) + 2 * operand_bytes(n, k, 1) + m * n * 2);
  r.flops = 4.0 * m * n * k;
  bn.finish(r, b200);
  return r;
}

Result bench_grouped(Bench& bn, int64_t n, int64_t k, const std::vector<int64_t>& ms, double b200) {
  Result r{"grouped", dims({n, k}) + " m="};
  for (size_t g = 0; g < ms.size(); ++g) r.shape += (g ? "," : "") + std::to_string(ms[g]);
  std::vector<DeviceOperand> das, dbs;
  std::vector<DeviceBuffer> cs, a16, b16, c32;
  GroupedGemmProblem p;
  for (size_t g = 0; g < ms.size(); ++g) {
    das.push_back(upload(make_operand(InputKind::grouped, ms[g], k, 1, 8000 + 2 * g + n), bn.layout));
    dbs.push_back(upload(make_operand(InputKind::grouped, n, k, 1, 8001 + 2 * g + n), bn.layout));
    cs.emplace_back(ms[g] * n * 2);
    p.groups.push_back(GemmProblem{ms[g], n, k, 1, das.back().view, dbs.back().view, cs.back().get()});
    r.bytes += static_cast<double>(operand_bytes(ms[g], k, 1) + operand_bytes(n, k, 1) + ms[g] * n * 2);
    r.flops += 2.0 * ms[g] * n * k;
  }
  bn.time(r, p, grouped_candidates(p, bn.sms), [&](const TileConfig& cfg, Workspace w) { grouped_gemm(p, cfg, w, nullptr); });
  for (size_t g = 0; g < ms.size(); ++g) {
    a16.emplace_back(ms[g] * k * 2);
    b16.emplace_back(n * k * 2);
    c32.emplace_back(ms[g] * n * 4);
    dequantize_to_bf16(das[g].view, ms[g], k, 1, a16.back().get(), nullptr);
    dequantize_to_bf16(dbs[g].view, n, k, 1, b16.back().get(), nullptr);
  }
  r.cublas_us = bn.timer.median_us([&] {
    for (size_t g = 0; g < ms.size(); ++g) bn.blas.gemm(a16[g].get(), b16[g].get(), c32[g].get(), ms[g], n, k);
  });
  for (size_t g = 0; g < ms.size(); ++g)
    r.mismatches += mismatches(download<uint16_t>(cs[g], ms[g] * n), download<float>(c32[g], ms[g] * n), true);
  bn.finish(r, b200);
  return r;
}

// The competition's shapes of `op` ("all": every one) with the B200 competition best (us), or the given
// MxNxK shapes for gemm or dual (no B200 reference then).
std::vector<Result> bench_shapes(Bench& bn, const std::string& op, const std::vector<std::string>& shapes) {
  std::vector<Result> rows;
  if (!shapes.empty()) {
    SWAPFFN_REQUIRE(op == "gemm" || op == "dual", "bench --shape needs --op gemm or --op dual");
    for (const std::string& sh : shapes) {
      int64_t m = 0, n = 0, k = 0;
      char x1 = 0, x2 = 0;
      std::istringstream in(sh);
      SWAPFFN_REQUIRE(in >> m >> x1 >> n >> x2 >> k && x1 == 'x' && x2 == 'x' && in.peek() == EOF,
                      "bench --shape '" + sh + "' is not MxNxK");
      rows.push_back(op == "gemm" ? bench_gemm(bn, m, n, k, 0.0) : bench_dual(bn, m, n, k, 0.0));
    }
    return rows;
  }
  const bool all = op == "all";
  if (all || op == "gemv") {
    rows.push_back(bench_gemv(bn, 7168, 16384, 1, 18.4));
    rows.push_back(bench_gemv(bn, 4096, 7168, 8, 28.0));
    rows.push_back(bench_gemv(bn, 7168, 2048, 4, 12.6));
  }
  if (all || op == "gemm") {
    rows.push_back(bench_gemm(bn, 128, 7168, 16384, 18.3));
    rows.push_back(bench_gemm(bn, 128, 4096, 7168, 8.29));
    rows.push_back(bench_gemm(bn, 128, 7168, 2048, 6.54));
  }
  if (all || op == "dual") {
    rows.push_back(bench_dual(bn, 256, 4096, 7168, 12.4));
    rows.push_back(bench_dual(bn, 512, 4096, 7168, 16.4));
    rows.push_back(bench_dual(bn, 256, 3072, 4096, 9.43));
    rows.push_back(bench_dual(bn, 512, 3072, 7168, 16.3));
  }
  if (all || op == "grouped") {
    rows.push_back(bench_grouped(bn, 4096, 7168, {80, 176, 128, 72, 64, 248, 96, 160}, 27.9));
    rows.push_back(bench_grouped(bn, 7168, 2048, {40, 76, 168, 72, 164, 148, 196, 160}, 19.4));
    rows.push_back(bench_grouped(bn, 3072, 4096, {192, 320}, 8.48));
    rows.push_back(bench_grouped(bn, 4096, 1536, {128, 384}, 6.43));
  }
  return rows;
}

void print_table(const std::vector<Result>& rows) {
  std::printf("\n%-8s %-36s %9s %9s %7s %9s %9s %9s  %-22s %s\n", "op", "shape", "ours_us", "SOL_us", "%SOL", "B200_us",
              "cuBLAS_us", "default", "best config", "check vs cuBLAS");
  for (const auto& r : rows)
    std::printf("%-8s %-36s %9.2f %9.2f %6.1f%% %9.2f %9.2f %9.2f  %-22s %s\n", r.op.c_str(), r.shape.c_str(), r.us, r.sol_us,
                100.0 * r.sol_us / r.us, r.b200_us, r.cublas_us, r.default_us, r.config.c_str(),
                r.mismatches ? (std::to_string(r.mismatches) + " MISMATCHES").c_str() : (r.exact ? "bit-exact" : "within tol"));
}

void write_json(const std::string& path, const GpuInfo& g, const Ceilings& ceil, const BenchOptions& o, int reps,
                const std::vector<Result>& rows) {
  nlohmann::json j;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  j["date"] = date;
  j["commit"] = SWAPFFN_GIT_COMMIT;
  j["device"] = g.name;
  j["sm_count"] = g.sm_count;
  j["hbm_gbs_measured"] = ceil.bw_gbs;
  j["bf16_tflops_measured"] = ceil.tflops;
  j["method"] = "median of " + std::to_string(reps) + " runs after 2 warm-ups, CUDA events, " +
                (o.flush == "none" ? "no L2 flush (warm L2)" : "L2 flushed (memset of 2x L2) before each run") +
                "; scales " + o.scales +
                (o.no_search ? "; the default config alone (--no-search)" : "; best of the candidate configs");
  for (const auto& r : rows)
    j["results"].push_back({{"op", r.op}, {"shape", r.shape}, {"us", r.us}, {"sol_us", r.sol_us},
                            {"pct_sol", 100.0 * r.sol_us / r.us}, {"b200_best_us", r.b200_us},
                            {"cublas_bf16_us", r.cublas_us}, {"default_config", r.default_config},
                            {"default_us", r.default_us}, {"best_config", r.config}, {"bytes", r.bytes},
                            {"flops", r.flops}, {"mismatches_vs_cublas", r.mismatches}});
  write_file_atomically(path, j.dump(2) + "\n");
  std::printf("wrote %s\n", path.c_str());
}

void run_bench(const BenchOptions& o) {
  const GpuInfo g = query_gpu();
  SWAPFFN_REQUIRE(g.is_hopper(), "swapffn-nvfp4 needs a Hopper GPU: " + g.why_not_hopper());
  if (!o.json.empty()) check_writable(o.json);
  Timer timer(o.reps, g.l2_bytes, o.flush != "none");
  Cublas blas;
  Bench bn{timer, blas, measure_ceilings(timer, blas), g.sm_count,
           o.scales == "blocked" ? ScaleLayout::blocked_128x4 : ScaleLayout::plain, !o.no_search};
  std::printf("device: %s, %d SMs, L2 %.0f MiB; measured HBM %.0f GB/s (copy, read+write), bf16 dense %.0f TFLOP/s "
              "(cuBLAS 8192^3)\n",
              g.name.c_str(), g.sm_count, g.l2_bytes / 1048576.0, bn.ceil.bw_gbs, bn.ceil.tflops);
  const std::vector<Result> rows = bench_shapes(bn, o.op, o.shapes);
  print_table(rows);
  if (!o.json.empty()) write_json(o.json, g, bn.ceil, o, timer.reps, rows);
  for (const auto& r : rows)
    SWAPFFN_REQUIRE(r.mismatches == 0, "bench: some results disagree with cuBLAS on the dequantized operands (see table)");
}

}  // namespace
#endif

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* bench = app.add_subcommand("bench", "time the NVFP4 kernels on the competition's shapes against speed-of-light, "
                                   "B200 and cuBLAS");
  bench->footer("Example:\n  swapffn-nvfp4 bench --op gemm --json nvfp4.json");
  bench->add_option("--op", o->op, "gemv, gemm, dual, grouped or all")->check(CLI::IsMember({"gemv", "gemm", "dual", "grouped", "all"}));
  bench->add_option("--json", o->json, "write the results as JSON to this file");
  bench->add_option("--reps", o->reps, "timed runs per measurement (median)")->check(CLI::Range(3, 64));
  bench->add_option("--flush", o->flush, "L2 before each timed run: write (memset of 2x L2) or none (warm L2)")
      ->check(CLI::IsMember({"write", "none"}));
  bench->add_option("--shape", o->shapes, "MxNxK shapes (repeatable) for --op gemm or dual instead of the competition's");
  bench->add_option("--scales", o->scales, "scale layout of every operand: plain or blocked (128x4)")
      ->check(CLI::IsMember({"plain", "blocked"}));
  bench->add_flag("--no-search", o->no_search, "time each shape's default config alone, not every candidate");
  bench->callback([o] {
#ifdef SWAPFFN_WITH_CUDA
    run_bench(*o);
#else
    (void)o;
    SWAPFFN_FAIL("swapffn-nvfp4 bench needs a CUDA build");
#endif
  });
}

}  // namespace swapffn::nvfp4::tool

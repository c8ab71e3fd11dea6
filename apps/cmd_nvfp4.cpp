// swapffn nvfp4: the NVFP4 kernel suite of issue 5 from the command line.
//   nvfp4 check  correctness of all four operations against the CPU reference (both scale layouts)
//   nvfp4 bench  the 14 shapes: our time (median over L2-flushed runs, small config
//                search), % of Hopper speed-of-light measured in the same run, the B200 competition
//                best and cuBLAS bf16 on the dequantized operands; each result is also checked
//                against that cuBLAS product (bit-exact for GEMV/GEMM/grouped, tolerance for dual);
//                for the GEMV also a plain stream read of as many bytes (what reading them alone takes).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "swapffn_commit.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda/runtime/cuda_check.hpp"
#include "swapffn/nvfp4/nvfp4.hpp"
#include "swapffn/nvfp4/device.hpp"
#include "swapffn/nvfp4/reference.hpp"
#endif

namespace swapffn::cli {

#ifdef SWAPFFN_WITH_CUDA
namespace {

using namespace swapffn::nvfp4;

void require_hopper() {
  const GpuInfo g = query_gpu();
  SWAPFFN_REQUIRE(g.is_hopper(), "swapffn nvfp4 needs a Hopper GPU: " + (g.present ? g.name : g.why_absent));
}

// ------------------------------------------------------------------ check

bool same_value(uint16_t a, uint16_t b) {
  const float x = fp16_to_float(a), y = fp16_to_float(b);
  return x == y || (std::isnan(x) && std::isnan(y));
}

bool report(const std::string& what, const std::vector<uint16_t>& got, const std::vector<uint16_t>& ref, bool exact) {
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float g = fp16_to_float(got[i]), r = fp16_to_float(ref[i]);
    const bool ok = exact ? same_value(got[i], ref[i]) : (std::fabs(g - r) <= 1e-3f + 1e-3f * std::fabs(r));
    bad += !ok;
  }
  std::printf("%-4s %s (%zu outputs, %s)\n", bad ? "FAIL" : "ok", what.c_str(), ref.size(),
              bad ? (std::to_string(bad) + " mismatches").c_str() : (exact ? "bit-exact" : "within 1e-3 + 1e-3|ref|"));
  return bad == 0;
}

std::vector<uint16_t> fetch(const DeviceBuffer& b, int64_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> h(n);
  b.download(h.data(), n * 2);
  return h;
}

bool run_check(uint64_t seed) {
  require_hopper();
  const int sms = query_gpu().sm_count;
  bool ok = true;
  for (ScaleLayout layout : {ScaleLayout::plain, ScaleLayout::blocked_128x4}) {
    const std::string lay = std::string(" ") + to_string(layout);
    {
      const int64_t m = 520, k = 2048, l = 2;
      const auto a = make_operand(InputKind::gemv, m, k, l, seed), b = make_operand(InputKind::gemv, 1, k, l, seed + 1);
      const auto da = upload(a, layout), db = upload(b, layout, 128);
      DeviceBuffer c(m * l * 2);
      c.fill(0x55);
      GemvProblem p{m, k, l, da.view, db.view, c.get()};
      const GemvConfig cfg = choose_gemv_config(p, sms);
      DeviceBuffer ws = make_workspace(workspace_bytes(p, cfg));
      gemv(p, cfg, {ws.get(), ws.bytes()}, nullptr);
      ok &= report("gemv M=520 K=2048 L=2" + lay + " " + describe(cfg), fetch(c, m * l), reference_gemv(a, b), true);
    }
    {
      const int64_t m = 192, n = 328, k = 1024, l = 1;
      const auto a = make_operand(InputKind::gemm, m, k, l, seed + 2), b = make_operand(InputKind::gemm, n, k, l, seed + 3);
      const auto da = upload(a, layout), db = upload(b, layout);
      const auto ref = reference_gemm(a, b);
      GemmProblem p{m, n, k, l, da.view, db.view, nullptr};
      for (TileConfig cfg : {choose_gemm_config(p, sms), TileConfig{Tile::m128_n64, 3}, TileConfig{Tile::m128_n128_wgmma, 2},
                             TileConfig{Tile::m128_n128_ws, 3}, TileConfig{Tile::m128_n128_wsr, 3},
                             TileConfig{Tile::m128_n128_ws2, 3}, TileConfig{Tile::m128_n128_wst, 3},
                             TileConfig{Tile::m128_n128_wsta, 3}, TileConfig{Tile::m128_n128_wstc, 3},
                             TileConfig{Tile::m128_n128_rs, 3}, TileConfig{Tile::m128_n256_rs, 3},
                             TileConfig{Tile::m128_n64_rs, 3}, TileConfig{Tile::m128_n128_rs, 1, 5},
                             TileConfig{Tile::m128_n256_rs, 1, sms}}) {
        DeviceBuffer c(m * n * 2);
        c.fill(0x55);
        p.c = c.get();
        DeviceBuffer ws = make_workspace(workspace_bytes(p, cfg));
        gemm(p, cfg, {ws.get(), ws.bytes()}, nullptr);
        ok &= report("gemm M=192 N=328 K=1024" + lay + " " + describe(cfg), fetch(c, m * n), ref, true);
      }
    }
    {
      const int64_t m = 160, n = 192, k = 1024, l = 1;
      const auto a = make_operand(InputKind::dual, m, k, l, seed + 4);
      const auto b1 = make_operand(InputKind::dual, n, k, l, seed + 5), b2 = make_operand(InputKind::dual, n, k, l, seed + 6);
      const auto da = upload(a, layout), d1 = upload(b1, layout), d2 = upload(b2, layout);
      const auto ref = reference_dual_gemm_swiglu(a, b1, b2);
      DualGemmProblem p{m, n, k, l, da.view, d1.view, d2.view, nullptr};
      for (TileConfig cfg : {choose_dual_config(p, sms), TileConfig{Tile::m64_n64, 2}, TileConfig{Tile::m128_n64_wgmma, 2},
                             TileConfig{Tile::m128_n64_ws, 3}, TileConfig{Tile::m128_n64_wsr, 3},
                             TileConfig{Tile::m128_n64_ws2, 3}, TileConfig{Tile::m128_n64_wst, 3},
                             TileConfig{Tile::m128_n64_wsta, 3}, TileConfig{Tile::m128_n64_wstc, 3},
                             TileConfig{Tile::m128_n128_rs, 3}, TileConfig{Tile::m128_n64_rs, 3},
                             TileConfig{Tile::m128_n128_rs, 1, 3}}) {
        DeviceBuffer c(m * n * 2);
        c.fill(0x55);
        p.c = c.get();
        DeviceBuffer ws = make_workspace(workspace_bytes(p, cfg));
        dual_gemm_swiglu(p, cfg, {ws.get(), ws.bytes()}, nullptr);
        ok &= report("dual M=160 N=192 K=1024" + lay + " " + describe(cfg), fetch(c, m * n), ref, false);
      }
    }
    {
      const std::vector<int64_t> ms{40, 76, 168};
      const int64_t n = 256, k = 512;
      std::vector<HostOperand> as, bs;
      std::vector<DeviceOperand> das, dbs;
      std::vector<DeviceBuffer> cs;
      GroupedGemmProblem p;
      for (size_t g = 0; g < ms.size(); ++g) {
        as.push_back(make_operand(InputKind::grouped, ms[g], k, 1, seed + 10 + 2 * g));
        bs.push_back(make_operand(InputKind::grouped, n, k, 1, seed + 11 + 2 * g));
        das.push_back(upload(as.back(), layout));
        dbs.push_back(upload(bs.back(), layout));
        cs.emplace_back(ms[g] * n * 2);
        cs.back().fill(0x55);
        p.groups.push_back(GemmProblem{ms[g], n, k, 1, das.back().view, dbs.back().view, cs.back().get()});
      }
      const auto ref = reference_grouped_gemm(as, bs);
      for (TileConfig cfg : {choose_grouped_config(p, sms), TileConfig{Tile::m128_n128_wgmma, 1},
                             TileConfig{Tile::m128_n128_rs, 1}}) {
        for (auto& c : cs) c.fill(0x55);
        DeviceBuffer ws = make_workspace(workspace_bytes(p, cfg));
        grouped_gemm(p, cfg, {ws.get(), ws.bytes()}, nullptr);
        for (size_t g = 0; g < ms.size(); ++g)
          ok &= report("grouped group " + std::to_string(g) + " m=" + std::to_string(ms[g]) + " N=256 K=512" + lay + " " +
                           describe(cfg),
                       fetch(cs[g], ms[g] * n), ref[g], true);
      }
    }
  }
  return ok;
}

// ------------------------------------------------------------------ bench

// L2 flush between timed runs: `write` memsets 2x L2 (the method; the L2 is then full of
// dirty lines, which the timed kernel's misses write back to HBM), `clean` then also stream-reads a
// second 2x L2 buffer, so the timed kernel starts with clean lines and pays only for its own traffic;
// `none` flushes nothing (a diagnostic: operands that fit stay in L2, so the time shows what the
// kernel costs without HBM traffic).
enum class Flush { write, clean, none };

struct Timer {
  int reps;
  Flush mode;
  int sm_count;
  DeviceBuffer flush, flush_read, sink;  // see Flush
  cudaEvent_t start[64], stop[64];
  Timer(int r, size_t l2_bytes, Flush f, int sms)
      : reps(std::min(r, 64)), mode(f), sm_count(sms), flush(std::max<size_t>(2 * l2_bytes, 64 << 20)),
        flush_read(f == Flush::clean ? flush.bytes() : 0), sink(16) {
    if (f == Flush::clean) flush_read.fill(0);
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
  // Median microseconds of fn over `reps` L2-flushed runs after two warm-up runs.
  double median_us(const std::function<void()>& fn, bool flush_l2 = true) {
    fn();
    fn();
    for (int i = 0; i < reps; ++i) {
      if (flush_l2 && mode != Flush::none) CUDA_CHECK(cudaMemsetAsync(flush.get(), i & 0xFF, flush.bytes(), nullptr));
      if (flush_l2 && mode == Flush::clean) stream_read(flush_read.get(), flush_read.bytes(), sink.get(), sm_count, nullptr);
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
  // C[M][N] (fp32, row-major) = A[M][K] * B[N][K]^T with bf16 row-major operands.
  void gemm(const void* a, const void* b, float* c, int64_t m, int64_t n, int64_t k) const {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                              &one, b, CUDA_R_16BF, static_cast<int>(k), a, CUDA_R_16BF, static_cast<int>(k), &zero, c,
                              CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  // Batched GEMV as L GEMMs with N = 1: c[l][m] = A[l][m][:] . b[l][:].
  void gemv(const void* a, const void* b, float* c, int64_t m, int64_t k, int64_t l) const {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 1, static_cast<int>(m), static_cast<int>(k), &one,
                                            b, CUDA_R_16BF, static_cast<int>(k), k, a, CUDA_R_16BF, static_cast<int>(k),
                                            m * k, &zero, c, CUDA_R_32F, 1, m, static_cast<int>(l), CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  }
};

struct Ceilings {
  double bw_gbs = 0, tflops = 0, read_gbs = 0;
};

Ceilings measure_ceilings(Timer& timer, const Cublas& blas, int sm_count) {
  Ceilings c;
  {
    const size_t bytes = size_t{1} << 30;
    DeviceBuffer src(bytes), dst(bytes);
    src.fill(0x3C);
    const double us = timer.median_us([&] { CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, nullptr)); }, false);
    c.bw_gbs = 2.0 * bytes / (us * 1e3);  // read + write
    const double read_us = timer.median_us([&] { stream_read(src.get(), bytes, dst.get(), sm_count, nullptr); }, false);
    c.read_gbs = bytes / (read_us * 1e3);
  }
  {
    const int64_t n = 8192;
    const HostOperand ha = make_operand(InputKind::dual, n, n, 1, 991), hb = make_operand(InputKind::dual, n, n, 1, 992);
    const DeviceOperand da = upload(ha, ScaleLayout::plain), db = upload(hb, ScaleLayout::plain);
    DeviceBuffer a(n * n * 2), b(n * n * 2), out(n * n * 4);
    dequantize_to_bf16(da.view, n, n, 1, a.get(), nullptr);
    dequantize_to_bf16(db.view, n, n, 1, b.get(), nullptr);
    const double us = timer.median_us([&] { blas.gemm(a.get(), b.get(), static_cast<float*>(out.get()), n, n, n); }, false);
    c.tflops = 2.0 * n * n * n / (us * 1e6);
  }
  return c;
}

struct Result {
  std::string op, shape, config, default_config;
  double us = 0, default_us = 0, sol_us = 0, b200_us = 0, cublas_us = 0, bytes = 0, flops = 0;
  double read_us = 0;  // GEMV: a stream read of as many bytes as the operands, under the same flush
  std::vector<std::pair<std::string, double>> probes;  // --probe: config -> us of its data path alone
  double probe_bytes = 0;                              // what each probe config copies into shared memory
  int64_t mismatches = 0;
  bool exact = true;
};

// fp32 cuBLAS results -> fp16 (or the SwiGLU of gate/up halves) compared with ours.
int64_t compare(const std::vector<uint16_t>& ours, const std::vector<float>& ref32, bool exact) {
  int64_t bad = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    const uint16_t r = float_to_fp16(ref32[i]);
    if (exact) {
      bad += !same_value(ours[i], r);
    } else {
      const float g = fp16_to_float(ours[i]), x = fp16_to_float(r);
      bad += !(std::fabs(g - x) <= 1e-3f + 1e-3f * std::fabs(x) || (std::isnan(g) && std::isnan(x)));
    }
  }
  return bad;
}

std::vector<float> download_f32(const DeviceBuffer& b, int64_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> h(n);
  b.download(h.data(), n * 4);
  return h;
}

int64_t operand_bytes(int64_t rows, int64_t k, int64_t l) { return rows * (k / 2 + k / 16) * l; }

double sol_us(const Ceilings& c, double bytes, double flops) {
  return std::max(bytes / (c.bw_gbs * 1e3), flops / (c.tflops * 1e6));
}

// What every shape's bench shares: the scale layout, the stream-K candidates' CTA counts, whether
// to time the data-path probes, and whether to search the candidate configs or time the default
// alone (a profiler then sees only the default's kernels).
struct BenchOptions {
  ScaleLayout layout = ScaleLayout::plain;
  std::vector<int> sk_ctas;
  bool probe = false;
  bool search = true;
};

// Times each candidate config, returns (best us, best index); default is candidates[0].
template <class Cfg>
std::pair<double, size_t> search(Timer& timer, const std::vector<Cfg>& cands, const std::function<void(const Cfg&)>& run,
                                 double* default_us) {
  double best = 1e30;
  size_t bi = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    const double us = timer.median_us([&] { run(cands[i]); });
    std::cerr << "  candidate " << describe(cands[i]) << ": " << us << " us\n";  // the whole search, for the record
    if (i == 0) *default_us = us;
    if (us < best) best = us, bi = i;
  }
  return {best, bi};
}

Result bench_gemv(Timer& timer, const Cublas& blas, const Ceilings& ceil, int sms, const BenchOptions& o, int64_t m, int64_t k, int64_t l, double b200) {
  const ScaleLayout layout = o.layout;
  Result r;
  r.op = "gemv";
  r.shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(l);
  const auto ha = make_operand(InputKind::gemv, m, k, l, 1000 + m + k), hb = make_operand(InputKind::gemv, 1, k, l, 2000 + k);
  const auto da = upload(ha, layout), db = upload(hb, layout);
  DeviceBuffer c(m * l * 2);
  GemvProblem p{m, k, l, da.view, db.view, c.get()};
  std::vector<GemvConfig> cands{choose_gemv_config(p, sms)};
  for (GemvDecode d : {GemvDecode::int8, GemvDecode::mma})
    for (int w : {4, 8})
      for (int s : {1, 2, 4, 8})
        if (s <= k / 128) cands.push_back({w, s, d});
  const int tma_variants[][2] = {{4, 512}, {8, 512}, {2, 1024}, {4, 1024}, {2, 2048}, {4, 2048}};  // stages, step_k
  if (gemv_tma_supported(p))
    for (int w : {4, 8})
      for (const auto& v : tma_variants)
        for (int s : {1, 2})
          if (s <= k / v[1]) cands.push_back({w, s, GemvDecode::int8, GemvLoad::tma, v[0], v[1]});
  if (!o.search) cands.resize(1);
  size_t ws_bytes = 0;
  for (const auto& cfg : cands) ws_bytes = std::max(ws_bytes, workspace_bytes(p, cfg));
  DeviceBuffer ws = make_workspace(ws_bytes);
  const auto [best, bi] = search<GemvConfig>(timer, cands, [&](const GemvConfig& cfg) { gemv(p, cfg, {ws.get(), ws.bytes()}, nullptr); }, &r.default_us);
  r.us = best;
  r.config = describe(cands[bi]);
  r.default_config = describe(cands[0]);
  c.fill(0x55);
  gemv(p, cands[bi], {ws.get(), ws.bytes()}, nullptr);
  const auto ours = fetch(c, m * l);
  DeviceBuffer a16(m * k * l * 2), b16(k * l * 2), c32(m * l * 4);
  dequantize_to_bf16(da.view, m, k, l, a16.get(), nullptr);
  dequantize_to_bf16(db.view, 1, k, l, b16.get(), nullptr);
  r.cublas_us = timer.median_us([&] { blas.gemv(a16.get(), b16.get(), static_cast<float*>(c32.get()), m, k, l); });
  {
    DeviceBuffer same_bytes((operand_bytes(m, k, l) + 15) / 16 * 16), sink(16);
    r.read_us = timer.median_us([&] { stream_read(same_bytes.get(), same_bytes.bytes(), sink.get(), sms, nullptr); });
  }
  r.mismatches = compare(ours, download_f32(c32, m * l), true);
  r.bytes = static_cast<double>(operand_bytes(m, k, l) + operand_bytes(1, k, l) + m * l * 2);
  r.flops = 2.0 * m * k * l;
  r.sol_us = sol_us(ceil, r.bytes, r.flops);
  r.b200_us = b200;
  return r;
}

// --probe (TileConfig::probe): the data path alone of the default config's tile, if it is an rs
// tile, at splits 1, 2 and 4 where the op splits (the CTA count changes, the copies do not): every
// copy of a stage, the activations or the weights alone, the weights through a deeper weight-only
// ring, the activations as one bulk copy (GEMM and dual GEMM), no copies (the launch, its pre-pass
// and the ring's hand-offs, which every probe time includes), and two parts of that fixed cost:
// the pre-pass alone and the grid's launch alone. `tile_stages`: the grid's 128-k stages over all
// its tiles; nb weight operands; `grouped`: no split, no bulk activations. `run` runs a config.
// Fills r.probes and r.probe_bytes (every copy of every stage of the grid).
void run_probes(Timer& timer, Result& r, const TileConfig& def, int64_t tile_stages, int64_t m, int64_t k, int nb,
                ScaleLayout layout, bool grouped, const std::function<void(const TileConfig&)>& run) {
  if (def.tile != Tile::m128_n128_rs && def.tile != Tile::m128_n256_rs && def.tile != Tile::m128_n64_rs) return;
  const int64_t bn = tile_n(def.tile);
  const int64_t scale_bytes = layout == ScaleLayout::plain ? bn * 16 : (bn + 127) / 128 * 1024;
  r.probe_bytes = static_cast<double>(tile_stages) * (128 * 128 * 2 + nb * (bn * 64 + scale_bytes));
  for (int split : {1, 2, 4})
    for (Probe pr : {Probe::stages, Probe::activations, Probe::weights, Probe::weight_ring, Probe::bulk_activations,
                     Probe::ring, Probe::prepass, Probe::launch}) {
      const TileConfig cfg{def.tile, split, 0, pr};
      if (split > k / 128 || (grouped && split > 1) ||
          (pr == Probe::bulk_activations && (grouped || m % 128 != 0)))
        continue;
      r.probes.emplace_back(describe(cfg), timer.median_us([&] { run(cfg); }));
    }
}

// The 128-k stages of an m x n output in tiles of 128 x bn.
int64_t tile_stages(int64_t m, int64_t n, int64_t k, int64_t bn) { return ((m + 127) / 128) * ((n + bn - 1) / bn) * (k / 128); }

Result bench_gemm(Timer& timer, const Cublas& blas, const Ceilings& ceil, int sms, const BenchOptions& o, int64_t m, int64_t n, int64_t k, double b200) {
  const ScaleLayout layout = o.layout;
  Result r;
  r.op = "gemm";
  r.shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  const auto ha = make_operand(InputKind::gemm, m, k, 1, 3000 + n + k), hb = make_operand(InputKind::gemm, n, k, 1, 4000 + n + k);
  const auto da = upload(ha, layout), db = upload(hb, layout);
  DeviceBuffer c(m * n * 2);
  GemmProblem p{m, n, k, 1, da.view, db.view, c.get()};
  std::vector<TileConfig> cands{choose_gemm_config(p, sms)};
  for (Tile t : {Tile::m128_n128, Tile::m128_n64, Tile::m128_n128_wgmma, Tile::m128_n128_ws, Tile::m128_n128_wsr,
                 Tile::m128_n128_ws2, Tile::m128_n128_wst, Tile::m128_n128_wsta, Tile::m128_n128_wstc,
                 Tile::m128_n128_rs, Tile::m128_n256_rs, Tile::m128_n64_rs})
    for (int s : {1, 2, 3, 4, 6})
      if (s <= k / 64 / 8) cands.push_back({t, s});
  for (Tile t : {Tile::m128_n128_rs, Tile::m128_n256_rs})
    for (int ctas : o.sk_ctas) cands.push_back({t, 1, ctas});  // stream-K
  if (!o.search) cands.resize(1);
  size_t ws_bytes = 0;
  for (const auto& cfg : cands) ws_bytes = std::max(ws_bytes, workspace_bytes(p, cfg));
  for (int s : {1, 2, 4}) ws_bytes = std::max(ws_bytes, workspace_bytes(p, TileConfig{cands[0].tile, s}));
  DeviceBuffer ws = make_workspace(ws_bytes);
  const std::function<void(const TileConfig&)> run = [&](const TileConfig& cfg) { gemm(p, cfg, {ws.get(), ws.bytes()}, nullptr); };
  if (o.probe) run_probes(timer, r, cands[0], tile_stages(m, n, k, tile_n(cands[0].tile)), m, k, 1, layout, false, run);
  const auto [best, bi] = search<TileConfig>(timer, cands, run, &r.default_us);
  r.us = best;
  r.config = describe(cands[bi]);
  r.default_config = describe(cands[0]);
  c.fill(0x55);
  gemm(p, cands[bi], {ws.get(), ws.bytes()}, nullptr);
  const auto ours = fetch(c, m * n);
  DeviceBuffer a16(m * k * 2), b16(n * k * 2), c32(m * n * 4);
  dequantize_to_bf16(da.view, m, k, 1, a16.get(), nullptr);
  dequantize_to_bf16(db.view, n, k, 1, b16.get(), nullptr);
  r.cublas_us = timer.median_us([&] { blas.gemm(a16.get(), b16.get(), static_cast<float*>(c32.get()), m, n, k); });
  r.mismatches = compare(ours, download_f32(c32, m * n), true);
  r.bytes = static_cast<double>(operand_bytes(m, k, 1) + operand_bytes(n, k, 1) + m * n * 2);
  r.flops = 2.0 * m * n * k;
  r.sol_us = sol_us(ceil, r.bytes, r.flops);
  r.b200_us = b200;
  return r;
}

Result bench_dual(Timer& timer, const Cublas& blas, const Ceilings& ceil, int sms, const BenchOptions& o, int64_t m, int64_t n, int64_t k, double b200) {
  const ScaleLayout layout = o.layout;
  Result r;
  r.op = "dual";
  r.shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  r.exact = false;
  const auto ha = make_operand(InputKind::dual, m, k, 1, 5000 + m + n), h1 = make_operand(InputKind::dual, n, k, 1, 6000 + n),
             h2 = make_operand(InputKind::dual, n, k, 1, 7000 + n);
  const auto da = upload(ha, layout), d1 = upload(h1, layout), d2 = upload(h2, layout);
  DeviceBuffer c(m * n * 2);
  DualGemmProblem p{m, n, k, 1, da.view, d1.view, d2.view, c.get()};
  std::vector<TileConfig> cands{choose_dual_config(p, sms)};
  for (Tile t : {Tile::m128_n64, Tile::m64_n64, Tile::m128_n64_wgmma, Tile::m128_n64_ws, Tile::m128_n64_wsr,
                 Tile::m128_n64_ws2, Tile::m128_n64_wst, Tile::m128_n64_wsta, Tile::m128_n64_wstc, Tile::m128_n128_rs, Tile::m128_n64_rs})
    for (int s : {1, 2, 3, 4})
      cands.push_back({t, s});
  for (int ctas : o.sk_ctas) cands.push_back({Tile::m128_n128_rs, 1, ctas});  // stream-K
  if (!o.search) cands.resize(1);
  size_t ws_bytes = 0;
  for (const auto& cfg : cands) ws_bytes = std::max(ws_bytes, workspace_bytes(p, cfg));
  for (int s : {1, 2, 4}) ws_bytes = std::max(ws_bytes, workspace_bytes(p, TileConfig{cands[0].tile, s}));
  DeviceBuffer ws = make_workspace(ws_bytes);
  const std::function<void(const TileConfig&)> run = [&](const TileConfig& cfg) { dual_gemm_swiglu(p, cfg, {ws.get(), ws.bytes()}, nullptr); };
  if (o.probe) run_probes(timer, r, cands[0], tile_stages(m, n, k, tile_n(cands[0].tile)), m, k, 2, layout, false, run);
  const auto [best, bi] = search<TileConfig>(timer, cands, run, &r.default_us);
  r.us = best;
  r.config = describe(cands[bi]);
  r.default_config = describe(cands[0]);
  c.fill(0x55);
  dual_gemm_swiglu(p, cands[bi], {ws.get(), ws.bytes()}, nullptr);
  const auto ours = fetch(c, m * n);
  DeviceBuffer a16(m * k * 2), b16(2 * n * k * 2), c32(m * 2 * n * 4);
  dequantize_to_bf16(da.view, m, k, 1, a16.get(), nullptr);
  dequantize_to_bf16(d1.view, n, k, 1, b16.get(), nullptr);
  dequantize_to_bf16(d2.view, n, k, 1, static_cast<char*>(b16.get()) + n * k * 2, nullptr);
  // One cuBLAS GEMM on [B1; B2] (2N columns): both products, no SwiGLU epilogue.
  r.cublas_us = timer.median_us([&] { blas.gemm(a16.get(), b16.get(), static_cast<float*>(c32.get()), m, 2 * n, k); });
  const auto gu = download_f32(c32, m * 2 * n);
  std::vector<float> ref(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float g = gu[i * 2 * n + j], u = gu[i * 2 * n + n + j];
      ref[i * n + j] = g / (1.0f + std::exp(-g)) * u;
    }
  r.mismatches = compare(ours, ref, false);
  r.bytes = static_cast<double>(operand_bytes(m, k, 1) + 2 * operand_bytes(n, k, 1) + m * n * 2);
  r.flops = 4.0 * m * n * k;
  r.sol_us = sol_us(ceil, r.bytes, r.flops);
  r.b200_us = b200;
  return r;
}

Result bench_grouped(Timer& timer, const Cublas& blas, const Ceilings& ceil, int sms, const BenchOptions& o, int64_t n, int64_t k,
                     const std::vector<int64_t>& ms, double b200) {
  const ScaleLayout layout = o.layout;
  std::string shape = std::to_string(n) + "x" + std::to_string(k) + " m=";
  for (size_t g = 0; g < ms.size(); ++g) shape += (g ? "," : "") + std::to_string(ms[g]);
  Result r;
  r.op = "grouped";
  r.shape = shape;
  std::vector<DeviceOperand> das, dbs;
  std::vector<DeviceBuffer> cs, a16, b16, c32;
  GroupedGemmProblem p;
  for (size_t g = 0; g < ms.size(); ++g) {
    das.push_back(upload(make_operand(InputKind::grouped, ms[g], k, 1, 8000 + 2 * g + n), layout));
    dbs.push_back(upload(make_operand(InputKind::grouped, n, k, 1, 8001 + 2 * g + n), layout));
    cs.emplace_back(ms[g] * n * 2);
    p.groups.push_back(GemmProblem{ms[g], n, k, 1, das.back().view, dbs.back().view, cs.back().get()});
    r.bytes += static_cast<double>(operand_bytes(ms[g], k, 1) + operand_bytes(n, k, 1) + ms[g] * n * 2);
    r.flops += 2.0 * ms[g] * n * k;
  }
  std::vector<TileConfig> cands{choose_grouped_config(p, sms), {Tile::m128_n128, 1}, {Tile::m128_n64, 1}, {Tile::m64_n128, 1},
                                {Tile::m128_n128_wgmma, 1}, {Tile::m128_n128_ws, 1},
                                {Tile::m128_n128_wsr, 1}, {Tile::m128_n128_ws2, 1}, {Tile::m128_n128_rs, 1},
                                {Tile::m128_n256_rs, 1}};
  // Mixed widths (TileConfig::wide_n): a quarter, half and three quarters of the columns wide.
  // One that repeats a candidate (the default, or another quarter on a narrow N) is not timed twice.
  for (int q = 1; q <= 3; ++q) {
    const TileConfig mixed{Tile::m128_n256_rs, 1, 0, Probe::none, static_cast<int>((n + 255) / 256 * q / 4)};
    bool repeat = false;
    for (const auto& c : cands) repeat = repeat || describe(c) == describe(mixed);
    if (!repeat) cands.push_back(mixed);
  }
  if (!o.search) cands.resize(1);
  size_t ws_bytes = 0;
  for (const auto& cfg : cands) ws_bytes = std::max(ws_bytes, workspace_bytes(p, cfg));
  DeviceBuffer ws = make_workspace(ws_bytes);
  const Workspace w{ws.get(), ws.bytes()};
  const std::function<void(const TileConfig&)> run = [&](const TileConfig& cfg) { grouped_gemm(p, cfg, w, nullptr); };
  if (o.probe) {
    // The probes run grids of one width: a mixed default's tile with every column tile of it.
    TileConfig uniform = cands[0];
    uniform.wide_n = -1;
    int64_t stages = 0;
    for (int64_t m : ms) stages += tile_stages(m, n, k, tile_n(uniform.tile));
    run_probes(timer, r, uniform, stages, -1, k, 1, layout, true, run);
  }
  const auto [best, bi] = search<TileConfig>(timer, cands, run, &r.default_us);
  r.us = best;
  r.config = describe(cands[bi]);
  r.default_config = describe(cands[0]);
  for (auto& c : cs) c.fill(0x55);
  grouped_gemm(p, cands[bi], w, nullptr);
  for (size_t g = 0; g < ms.size(); ++g) {
    a16.emplace_back(ms[g] * k * 2);
    b16.emplace_back(n * k * 2);
    c32.emplace_back(ms[g] * n * 4);
    dequantize_to_bf16(das[g].view, ms[g], k, 1, a16.back().get(), nullptr);
    dequantize_to_bf16(dbs[g].view, n, k, 1, b16.back().get(), nullptr);
  }
  r.cublas_us = timer.median_us([&] {
    for (size_t g = 0; g < ms.size(); ++g) blas.gemm(a16[g].get(), b16[g].get(), static_cast<float*>(c32[g].get()), ms[g], n, k);
  });
  for (size_t g = 0; g < ms.size(); ++g) r.mismatches += compare(fetch(cs[g], ms[g] * n), download_f32(c32[g], ms[g] * n), true);
  r.sol_us = sol_us(ceil, r.bytes, r.flops);
  r.b200_us = b200;
  return r;
}

// shapes: "MxNxK" strings for --op gemm or dual; when given they replace the shapes (no
// B200 reference then).
void run_bench(const std::string& op, const std::string& json_path, int reps, Flush flush,
               const std::vector<std::string>& shapes, BenchOptions o) {
  require_hopper();
  const GpuInfo g = query_gpu();
  if (o.sk_ctas.empty()) o.sk_ctas.push_back(g.sm_count);
  Timer timer(reps, g.l2_bytes, flush, g.sm_count);
  Cublas blas;
  const Ceilings ceil = measure_ceilings(timer, blas, g.sm_count);
  std::printf("device: %s, %d SMs, L2 %.0f MiB; measured HBM %.0f GB/s (copy, read+write), %.0f GB/s (stream read), "
              "bf16 dense %.0f TFLOP/s (cuBLAS 8192^3)\n",
              g.name.c_str(), g.sm_count, g.l2_bytes / 1048576.0, ceil.bw_gbs, ceil.read_gbs, ceil.tflops);
  std::vector<Result> rows;
  if (!shapes.empty()) {
    SWAPFFN_REQUIRE(op == "gemm" || op == "dual", "nvfp4 bench --shape needs --op gemm or --op dual");
    for (const std::string& sh : shapes) {
      int64_t m = 0, n = 0, k = 0;
      char x1 = 0, x2 = 0;
      std::istringstream in(sh);
      SWAPFFN_REQUIRE(in >> m >> x1 >> n >> x2 >> k && x1 == 'x' && x2 == 'x' && in.peek() == EOF,
                      "nvfp4 bench --shape '" + sh + "' is not MxNxK");
      rows.push_back(op == "gemm" ? bench_gemm(timer, blas, ceil, g.sm_count, o, m, n, k, 0.0)
                                  : bench_dual(timer, blas, ceil, g.sm_count, o, m, n, k, 0.0));
    }
  }
  const bool all = op == "all" && shapes.empty();
  if (shapes.empty() && (all || op == "gemv")) {
    rows.push_back(bench_gemv(timer, blas, ceil, g.sm_count, o, 7168, 16384, 1, 18.4));
    rows.push_back(bench_gemv(timer, blas, ceil, g.sm_count, o, 4096, 7168, 8, 28.0));
    rows.push_back(bench_gemv(timer, blas, ceil, g.sm_count, o, 7168, 2048, 4, 12.6));
  }
  if (shapes.empty() && (all || op == "gemm")) {
    rows.push_back(bench_gemm(timer, blas, ceil, g.sm_count, o, 128, 7168, 16384, 18.3));
    rows.push_back(bench_gemm(timer, blas, ceil, g.sm_count, o, 128, 4096, 7168, 8.29));
    rows.push_back(bench_gemm(timer, blas, ceil, g.sm_count, o, 128, 7168, 2048, 6.54));
  }
  if (shapes.empty() && (all || op == "dual")) {
    rows.push_back(bench_dual(timer, blas, ceil, g.sm_count, o, 256, 4096, 7168, 12.4));
    rows.push_back(bench_dual(timer, blas, ceil, g.sm_count, o, 512, 4096, 7168, 16.4));
    rows.push_back(bench_dual(timer, blas, ceil, g.sm_count, o, 256, 3072, 4096, 9.43));
    rows.push_back(bench_dual(timer, blas, ceil, g.sm_count, o, 512, 3072, 7168, 16.3));
  }
  if (shapes.empty() && (all || op == "grouped")) {
    rows.push_back(bench_grouped(timer, blas, ceil, g.sm_count, o, 4096, 7168, {80, 176, 128, 72, 64, 248, 96, 160}, 27.9));
    rows.push_back(bench_grouped(timer, blas, ceil, g.sm_count, o, 7168, 2048, {40, 76, 168, 72, 164, 148, 196, 160}, 19.4));
    rows.push_back(bench_grouped(timer, blas, ceil, g.sm_count, o, 3072, 4096, {192, 320}, 8.48));
    rows.push_back(bench_grouped(timer, blas, ceil, g.sm_count, o, 4096, 1536, {128, 384}, 6.43));
  }
  std::printf("\n%-8s %-36s %9s %9s %7s %9s %9s %9s %9s  %-22s %s\n", "op", "shape", "ours_us", "SOL_us", "%SOL", "read_us",
              "B200_us", "cuBLAS_us", "default", "best config", "check vs cuBLAS");
  bool all_ok = true;
  for (const auto& r : rows) {
    char read[32] = "-";
    if (r.read_us > 0) std::snprintf(read, sizeof read, "%.2f", r.read_us);
    std::printf("%-8s %-36s %9.2f %9.2f %6.1f%% %9s %9.2f %9.2f %9.2f  %-22s %s\n", r.op.c_str(), r.shape.c_str(), r.us,
                r.sol_us, 100.0 * r.sol_us / r.us, read, r.b200_us, r.cublas_us, r.default_us, r.config.c_str(),
                r.mismatches ? (std::to_string(r.mismatches) + " MISMATCHES").c_str() : (r.exact ? "bit-exact" : "within tol"));
    all_ok &= r.mismatches == 0;
  }
  for (const auto& r : rows) {
    if (r.probes.empty()) continue;
    std::printf("\n%s %s, the data path alone (--probe; %.1f MB into shared memory per run):\n", r.op.c_str(), r.shape.c_str(),
                r.probe_bytes * 1e-6);
    for (const auto& [cfg, us] : r.probes) {
      const bool all_copies = cfg.find("probe=stages") != std::string::npos;
      std::printf("  %-52s %9.2f us", cfg.c_str(), us);
      if (all_copies) std::printf("  %.2f TB/s", r.probe_bytes / (us * 1e6));
      std::printf("\n");
    }
  }
  if (!json_path.empty()) {
    nlohmann::json j;
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    j["date"] = date;
    j["commit"] = SWAPFFN_GIT_COMMIT;
    j["device"] = g.name;
    j["sm_count"] = g.sm_count;
    j["hbm_gbs_measured"] = ceil.bw_gbs;
    j["hbm_read_gbs_measured"] = ceil.read_gbs;
    j["bf16_tflops_measured"] = ceil.tflops;
    j["method"] = "median of " + std::to_string(timer.reps) +
                  " runs after 2 warm-ups, CUDA events, " +
                  (flush == Flush::none ? std::string("no L2 flush (warm L2)")
                                        : std::string("L2 flushed (memset of 2x L2") +
                                              (flush == Flush::clean ? ", then a stream read of another 2x L2" : "") +
                                              ") before each run") +
                  "; scales " + to_string(o.layout) +
                  (o.search ? "; best of the candidate configs" : "; the default config alone (--no-search)");
    for (const auto& r : rows)
      j["results"].push_back({{"op", r.op}, {"shape", r.shape}, {"us", r.us}, {"sol_us", r.sol_us},
                              {"pct_sol", 100.0 * r.sol_us / r.us}, {"b200_best_us", r.b200_us},
                              {"cublas_bf16_us", r.cublas_us}, {"default_config", r.default_config},
                              {"default_us", r.default_us}, {"best_config", r.config}, {"bytes", r.bytes},
                              {"flops", r.flops}, {"mismatches_vs_cublas", r.mismatches}});
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].read_us > 0) j["results"][i]["stream_read_us"] = rows[i].read_us;
      for (const auto& [cfg, us] : rows[i].probes) j["results"][i]["probes_us"][cfg] = us;
      if (!rows[i].probes.empty()) j["results"][i]["probe_stage_bytes"] = rows[i].probe_bytes;
    }
    std::ofstream(json_path) << j.dump(2) << "\n";
    std::printf("wrote %s\n", json_path.c_str());
  }
  SWAPFFN_REQUIRE(all_ok, "nvfp4 bench: some results disagree with cuBLAS on the dequantized operands (see table)");
}

}  // namespace
#endif

void add_nvfp4_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("nvfp4", "NVFP4 block-scaled kernels (GEMV, GEMM, dual GEMM, grouped GEMM)");
  cmd->require_subcommand(1);
  auto seed = std::make_shared<uint64_t>(1);
  auto* check = cmd->add_subcommand("check", "all four ops vs the CPU reference, both scale layouts");
  check->add_option("--seed", *seed, "input seed");
  check->callback([seed] {
#ifdef SWAPFFN_WITH_CUDA
    SWAPFFN_REQUIRE(run_check(*seed), "nvfp4 check failed (see the FAIL lines)");
    std::printf("nvfp4 check: all passed\n");
#else
    (void)seed;
    SWAPFFN_FAIL("swapffn nvfp4 needs a CUDA build");
#endif
  });
  auto op = std::make_shared<std::string>("all");
  auto json = std::make_shared<std::string>();
  auto reps = std::make_shared<int>(30);
  auto flush = std::make_shared<std::string>("write");
  auto shapes = std::make_shared<std::vector<std::string>>();
  auto scales = std::make_shared<std::string>("plain");
  auto sk_ctas = std::make_shared<std::vector<int>>();
  auto probe = std::make_shared<bool>(false);
  auto no_search = std::make_shared<bool>(false);
  auto* bench = cmd->add_subcommand("bench", "the issue's 14 shapes vs Hopper SOL, B200 best and cuBLAS bf16");
  bench->add_option("--op", *op, "gemv, gemm, dual, grouped or all")->check(CLI::IsMember({"gemv", "gemm", "dual", "grouped", "all"}));
  bench->add_option("--json", *json, "write the results as JSON to this file");
  bench->add_option("--reps", *reps, "timed runs per measurement (median; at most 64)")->check(CLI::Range(3, 64));
  bench->add_option("--flush", *flush,
                    "L2 flush before each timed run: write (memset of 2x L2, the default) or clean (then a read of "
                    "another 2x L2, so no dirty lines are left for the timed kernel to write back) or none (a "
                    "diagnostic: warm L2)")
      ->check(CLI::IsMember({"write", "clean", "none"}));
  bench->add_option("--shape", *shapes, "MxNxK shapes (repeatable) for --op gemm or dual instead of the issue's");
  bench->add_option("--scales", *scales, "scale layout of every operand: plain (the default) or blocked (128x4)")
      ->check(CLI::IsMember({"plain", "blocked"}));
  bench->add_option("--stream-k", *sk_ctas, "CTA counts of the stream-K candidates for gemm and dual (repeatable; default: the SM count)")
      ->check(CLI::Range(1, 4096));
  bench->add_flag("--probe", *probe,
                  "gemm, dual and grouped: also time the default rs tile's data path alone (its stage copies, or a part "
                  "of them, without arithmetic, or the weights through a deeper weight-only ring; TileConfig::probe) "
                  "and the parts of its fixed cost (the pre-pass alone, the grid's launch alone), at splits 1, 2 and 4 "
                  "(grouped: 1)");
  bench->add_flag("--no-search", *no_search,
                  "time each shape's default config alone, without the search over candidate configs (quicker; "
                  "under a profiler only the default's kernels run)");
  bench->callback([op, json, reps, flush, shapes, scales, sk_ctas, probe, no_search] {
#ifdef SWAPFFN_WITH_CUDA
    run_bench(*op, *json, *reps, *flush == "clean" ? Flush::clean : *flush == "none" ? Flush::none : Flush::write, *shapes,
              BenchOptions{*scales == "blocked" ? ScaleLayout::blocked_128x4 : ScaleLayout::plain, *sk_ctas, *probe,
                           !*no_search});
#else
    (void)op, (void)json, (void)reps, (void)flush, (void)shapes, (void)scales, (void)sk_ctas, (void)probe, (void)no_search;
    SWAPFFN_FAIL("swapffn nvfp4 needs a CUDA build");
#endif
  });
}

}  // namespace swapffn::cli

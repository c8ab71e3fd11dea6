// The folded event router (src/cuda/kernels/folded_event_router.cu) against the spec's event head.
// - The fold (host): s and l through the five folded vectors equal the spec's chain through z.
// - The kernel on random rows (some swap, some do not; several slots): every decision whose margin
//   in the spec's fp32 chain (computed here in double) exceeds a small tau is the spec's, and,
//   following the kernel's own decisions, h, the banks, the stream maps and the trace are exactly
//   the spec's exchange, and the FFN operand is bf16(rms(h) * norm.weight) of the new h.
// - Row splits (the fused backend's row groups) and repeated runs give the same bits.
// - The e4m3 FFN operand (fused-fp8's) is the recipe's quantisation of the bf16 one, bit for bit,
//   with and without row splits; every other output keeps its bits.
// - The core broadcast done by the router (the first event of a step) gives the bits of the FiLM
//   kernel followed by the router, with and without row splits.
// - Bad arguments are refused by name before any CUDA call (these run without a GPU).
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/kernels/core_film.hpp"
#include "cuda/kernels/folded_event_router.hpp"
#include "event_router_test_util.hpp"
#include "gpu_backend_test_util.hpp"
#include "swapffn/error.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn::cuda {
namespace {

using router_test::expect_same_outputs;
using router_test::FilmInputs;
using router_test::in_two_launches;
using router_test::Operand;
using router_test::RouterInputs;
using router_test::RouterOutputs;
using router_test::run_event;

// The spec's event head for row m of `in`, in double: s and the four bank logits through z.
struct Logits {
  double s, l[4];
};
Logits spec_logits(const RouterInputs& in, int64_t m, const std::vector<float>& router_w) {
  const size_t D = size_t(in.d), R = size_t(in.r);
  const float* h = &in.h[size_t(m) * D];
  double ss = 0;
  for (size_t d = 0; d < D; ++d) ss += double(h[d]) * h[d];
  const double rs = 1.0 / std::sqrt(ss / double(D) + 1e-6);
  Logits out{in.swap_b[0], {in.bank_b[0], in.bank_b[1], in.bank_b[2], in.bank_b[3]}};
  for (size_t r = 0; r < R; ++r) {
    double z = 0;
    for (size_t d = 0; d < D; ++d) z += double(h[d]) * rs * in.rgain[d] * router_w[r * D + d];
    out.s += z * in.swap_w[r];
    for (int k = 0; k < 4; ++k) out.l[k] += z * in.bank_w[r * 4 + size_t(k)];
  }
  return out;
}

int lane_of(uint8_t map, int j) { return (map >> (2 * j)) & 3; }

TEST(FoldedEventRouter, FoldGivesTheSpecChainsLogits) {
  for (const auto& [D, R] : {std::pair<int64_t, int64_t>{256, 48}, {1024, 64}, {128, 7}}) {
    const RouterInputs in = RouterInputs::random(8, D, R, 7 + static_cast<uint32_t>(D + R));
    const std::vector<float> w = in.router_w_f32();
    const std::vector<float> f = fold_router(in.rgain, w, in.swap_w, in.bank_w, D, R);
    ASSERT_EQ(f.size(), size_t(5 * D));
    for (int64_t m = 0; m < in.rows; ++m) {
      const Logits want = spec_logits(in, m, w);
      const float* h = &in.h[size_t(m * D)];
      double ss = 0, t[5] = {0, 0, 0, 0, 0};
      for (int64_t d = 0; d < D; ++d) {
        ss += double(h[d]) * h[d];
        for (int j = 0; j < 5; ++j) t[j] += double(h[d]) * f[size_t(j * D + d)];
      }
      const double rs = 1.0 / std::sqrt(ss / double(D) + 1e-6);
      // The folded vectors are rounded to fp32 once: relative 6e-8 per element.
      EXPECT_NEAR(rs * t[0] + in.swap_b[0], want.s, 1e-5 * (1 + std::abs(want.s))) << "D " << D << " row " << m;
      for (int k = 0; k < 4; ++k)
        EXPECT_NEAR(rs * t[1 + k] + in.bank_b[size_t(k)], want.l[k], 1e-5 * (1 + std::abs(want.l[k])))
            << "D " << D << " row " << m << " bank " << k;
    }
  }
  const RouterInputs in = RouterInputs::random(1, 128, 16, 3);
  try {
    fold_router(in.rgain, in.router_w_f32(), in.swap_w, in.bank_w, 128, 17);
    ADD_FAILURE() << "R = 17 with 16 rows of router_w was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("router_w [17, 128]"), std::string::npos) << e.what();
  }
}

RouterOutputs run_folded(const RouterInputs& in, bool with_norm, int64_t split = 0, const FilmInputs* film = nullptr,
                         Operand form = Operand::bf16) {
  return run_event(
      in, with_norm,
      in_two_launches(split, [](const EventRouterArgs& a) { launch_folded_event_router(a, nullptr, false); }), film,
      form);
}

TEST(FoldedEventRouter, FollowsTheSpecOnRandomRows) {
  struct Shape {
    int64_t rows, d, r;
    bool norm;
  };
  // The defaults' D and R, rows that fill no CTA evenly, the smallest D, no norm, and router widths
  // the MMA router cannot take (R = 10, R = 128).
  for (const Shape sh : {Shape{512, 1024, 64, true}, Shape{333, 1024, 64, true}, Shape{100, 256, 32, true},
                         Shape{40, 128, 16, true}, Shape{77, 512, 48, false}, Shape{50, 384, 10, true},
                         Shape{64, 1024, 128, true}}) {
    const std::string what = "rows " + std::to_string(sh.rows) + " D " + std::to_string(sh.d) + " R " +
                             std::to_string(sh.r) + (sh.norm ? "" : " (no norm)");
    const RouterInputs in = RouterInputs::random(sh.rows, sh.d, sh.r, 2000 + static_cast<uint32_t>(sh.rows + sh.d + sh.r));
    const std::vector<float> w = in.router_w_f32();
    const RouterOutputs got = run_folded(in, sh.norm);
    const size_t D = size_t(sh.d);
    constexpr double kTau = 1e-3;  // fp32 reassociation moves these logits by ~1e-5
    int swapped = 0, slots = 0, checked = 0;
    for (int64_t m = 0; m < sh.rows; ++m) {
      const size_t row = size_t(m);
      ASSERT_LE(got.gate[row], 1) << what << ": row " << m << " has no decision";
      ASSERT_LE(got.slot[row], 3) << what << ": row " << m << " has no slot";
      const bool gate = got.gate[row] == 1;
      const int slot = got.slot[row];
      swapped += gate;
      slots |= 1 << slot;
      const Logits want = spec_logits(in, m, w);
      if (std::abs(want.s) > kTau) {
        ++checked;
        EXPECT_EQ(gate, want.s > 0) << what << ": row " << m << " gate, s = " << want.s;
      }
      if (gate) {
        int best = 0;
        for (int k = 1; k < 4; ++k)
          if (want.l[k] > want.l[best]) best = k;
        double gap = 1e300;
        for (int k = 0; k < 4; ++k)
          if (k != best) gap = std::min(gap, want.l[best] - want.l[k]);
        if (gap > kTau) {
          EXPECT_EQ(slot, best) << what << ": row " << m << " slot, top-2 gap " << gap;
        }
      }
      // Following the kernel's decision: the spec's exchange, bit for bit.
      const uint8_t map0 = in.map[row];
      const int p = lane_of(map0, slot);
      uint8_t map1 = map0;
      if (gate) {
        const int l0 = map0 & 3, lj = lane_of(map0, slot);
        map1 = static_cast<uint8_t>((map0 & ~(3 | (3 << (2 * slot)))) | lj | (l0 << (2 * slot)));
      }
      EXPECT_EQ(got.map[row], map1) << what << ": row " << m << " stream map";
      std::vector<float> h1(D);
      for (size_t d = 0; d < D; ++d) {
        const float h0 = in.h[row * D + d];
        h1[d] = gate ? __bfloat162float(in.ram[(row * 4 + size_t(p)) * D + d]) : h0;
        ASSERT_EQ(got.h[row * D + d], h1[d]) << what << ": row " << m << " h[" << d << "]";
        for (int b = 0; b < 4; ++b) {
          const __nv_bfloat16 want_bank =
              gate && b == p ? __float2bfloat16(h0) : in.ram[(row * 4 + size_t(b)) * D + d];
          ASSERT_EQ(__bfloat16_as_ushort(got.ram[(row * 4 + size_t(b)) * D + d]), __bfloat16_as_ushort(want_bank))
              << what << ": row " << m << " bank " << b << " [" << d << "]";
        }
      }
      if (!sh.norm) continue;
      double ss = 0;
      for (size_t d = 0; d < D; ++d) ss += double(h1[d]) * h1[d];
      const double rs = 1.0 / std::sqrt(ss / double(D) + 1e-6);
      for (size_t d = 0; d < D; ++d) {
        const double want = h1[d] * rs * in.ngain[d];
        const float have = __bfloat162float(got.norm_out[row * D + d]);
        ASSERT_NEAR(have, want, std::abs(want) * (1.0 / 128) + 1e-30)  // within one bf16 rounding
            << what << ": row " << m << " FFN operand [" << d << "]";
      }
    }
    EXPECT_GT(checked, sh.rows * 9 / 10) << what << ": too few rows outside the margin";
    EXPECT_GT(swapped, 0) << what;
    EXPECT_LT(swapped, static_cast<int>(sh.rows)) << what;
    EXPECT_NE(slots & (slots - 1), 0) << what << ": one slot only";
  }
}

TEST(FoldedEventRouter, RowSplitsAndRepeatsGiveTheSameBits) {
  for (const auto& [rows, D, R] : {std::tuple<int64_t, int64_t, int64_t>{512, 1024, 64}, {333, 256, 32}}) {
    const RouterInputs in = RouterInputs::random(rows, D, R, 77 + static_cast<uint32_t>(rows));
    const RouterOutputs one = run_folded(in, true);
    for (const int64_t split : {int64_t{0}, rows / 3 + 1, int64_t{1}}) {
      const RouterOutputs got = run_folded(in, true, split);
      const std::string where = "rows " + std::to_string(rows) + (split ? ", split at " + std::to_string(split) : ", again");
      expect_same_outputs(one, got, where);
    }
  }
}

// The fp8 FFN's operand: the bf16 operand's values quantised by the recipe (fp8::quantize_row) in
// either scaling, each launch's scales in its own [scales per row, rows] block; everything else the
// bf16 run's bits.
TEST(FoldedEventRouter, E4m3OperandIsTheRecipeOnTheBf16Operand) {
  for (const auto& [rows, D, R, scaling] :
       {std::tuple<int64_t, int64_t, int64_t, fp8::Scaling>{512, 1024, 64, fp8::Scaling::blocks},
        {333, 256, 32, fp8::Scaling::blocks}, {512, 1024, 64, fp8::Scaling::rows}, {333, 256, 32, fp8::Scaling::rows}}) {
    const int64_t per_row = fp8::row_scale_count(scaling, D);
    const RouterInputs in = RouterInputs::random(rows, D, R, 91 + static_cast<uint32_t>(rows));
    const RouterOutputs bf = run_folded(in, true);
    for (const int64_t split : {int64_t{0}, rows / 3 + 1}) {
      const std::string where = std::string(fp8::scaling_name(scaling)) + ", rows " + std::to_string(rows) +
                                (split ? ", split at " + std::to_string(split) : "");
      RouterOutputs got = run_folded(in, true, split, nullptr,
                                     scaling == fp8::Scaling::rows ? Operand::e4m3_rows : Operand::e4m3);
      std::vector<float> row(static_cast<size_t>(D)), want_s(static_cast<size_t>(per_row));
      std::vector<uint8_t> want_q(static_cast<size_t>(D));
      for (int64_t m = 0; m < rows; ++m) {
        for (int64_t d = 0; d < D; ++d) row[size_t(d)] = __bfloat162float(bf.norm_out[size_t(m * D + d)]);
        fp8::quantize_row(scaling, row.data(), D, want_q.data(), want_s.data());
        ASSERT_EQ(std::memcmp(want_q.data(), &got.norm_e4m3[size_t(m * D)], size_t(D)), 0)
            << where << ": row " << m << " codes";
        const int64_t g0 = m < split ? 0 : split, g_rows = m < split ? split : rows - split;
        for (int64_t kb = 0; kb < per_row; ++kb)
          ASSERT_EQ(got.norm_scales[size_t(g0 * per_row + kb * g_rows + (m - g0))], want_s[size_t(kb)])
              << where << ": row " << m << " scale of block " << kb;
      }
      got.norm_out = bf.norm_out;  // not written: poison in both
      got.norm_e4m3.clear();
      got.norm_scales.clear();
      expect_same_outputs(bf, got, where);
    }
  }
}

TEST(FoldedEventRouter, CoreBroadcastInTheHeadGivesTheFilmKernelsBits) {
  struct Shape {
    int64_t batch, cores, d, r;
  };
  for (const Shape sh : {Shape{1, 512, 1024, 64}, Shape{3, 40, 256, 32}}) {
    const int64_t rows = sh.batch * sh.cores;
    const std::string what = "B " + std::to_string(sh.batch) + " cores " + std::to_string(sh.cores) + " D " +
                             std::to_string(sh.d);
    const RouterInputs in = RouterInputs::random(rows, sh.d, sh.r, 500 + static_cast<uint32_t>(rows + sh.d));
    const FilmInputs film = FilmInputs::random(rows, sh.cores, sh.d, 900 + static_cast<uint32_t>(rows));
    // The FiLM kernel's h, checked against the host's single-rounding fused multiply-add.
    DeviceBuffer<float> x, scale, shift, h(static_cast<size_t>(rows * sh.d));
    x.upload(film.x);
    scale.upload(film.scale);
    shift.upload(film.shift);
    CUDA_CHECK(cudaMemset(h.get(), 0xFF, h.size() * sizeof(float)));
    DeviceBuffer<StepIO> io;
    io.upload(std::vector<StepIO>{{x.get(), nullptr, nullptr, nullptr, {}}});
    launch_core_film({io.get(), scale.get(), shift.get(), h.get(), sh.batch, sh.cores, sh.d, nullptr, nullptr, 1e-6f},
                     nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    RouterInputs after_film = in;
    after_film.h = h.download();
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t d = 0; d < sh.d; ++d) {
        const size_t b = size_t(m / sh.cores), c = size_t(m % sh.cores), D = size_t(sh.d);
        ASSERT_EQ(after_film.h[size_t(m) * D + size_t(d)],
                  std::fmaf(film.x[b * D + size_t(d)], film.scale[c * D + size_t(d)], film.shift[c * D + size_t(d)]))
            << what << ": FiLM kernel, row " << m << " [" << d << "]";
      }
    const RouterOutputs want = run_folded(after_film, true);
    for (const int64_t split : {int64_t{0}, rows / 3 + 1}) {
      const RouterOutputs got = run_folded(in, true, split, &film);
      const std::string where = what + (split ? ", split at " + std::to_string(split) : "");
      expect_same_outputs(want, got, where);
    }
  }
}

TEST(FoldedEventRouter, RefusesBadArgumentsNamingThem) {
  alignas(16) static float storage[1024];
  auto* bf = reinterpret_cast<__nv_bfloat16*>(storage);
  const EventRouterArgs ok{.h = storage, .swap_b = storage, .bank_b = storage, .ram = bf, .stream_map = nullptr,
                           .io = reinterpret_cast<const StepIO*>(storage), .event = 0, .row_begin = 0, .rows = 8,
                           .total_rows = 8, .d_model = 128, .norm_gain = storage, .norm_out = {.bf16 = bf}, .eps = 1e-6f,
                           .router_fold = storage, .cores = 8};
  struct Case {
    const char* needle;
    void (*edit)(EventRouterArgs&);
  };
  for (const Case c : {Case{"router_fold (the folded router vectors) is not set", [](EventRouterArgs& a) { a.router_fold = nullptr; }},
                       Case{"router_fold is not 16-byte aligned", [](EventRouterArgs& a) { a.router_fold += 1; }},
                       Case{"norm_gain is not 16-byte aligned", [](EventRouterArgs& a) { a.norm_gain += 2; }},
                       Case{"got 1152", [](EventRouterArgs& a) { a.d_model = 1152; }},
                       Case{"got 96", [](EventRouterArgs& a) { a.d_model = 96; }},
                       Case{"not within the 8 rows", [](EventRouterArgs& a) { a.row_begin = 4; }},
                       Case{"must be given together", [](EventRouterArgs& a) { a.norm_out = {}; }},
                       Case{"bf16 rows or e4m3 codes with their scales",
                            [](EventRouterArgs& a) { a.norm_out = {.e4m3 = reinterpret_cast<uint8_t*>(a.h)}; }},
                       Case{"io (the step's StepIO) is not set", [](EventRouterArgs& a) { a.io = nullptr; }},
                       Case{"film_scale and film_shift must be given together",
                            [](EventRouterArgs& a) { a.film_scale = a.h; }},
                       Case{"whole sequences of cores (3)", [](EventRouterArgs& a) { a.cores = 3; }},
                       Case{"film_shift is not 16-byte aligned", [](EventRouterArgs& a) {
                              a.film_scale = a.h;
                              a.film_shift = a.h + 1;
                              a.cores = 4;
                            }}}) {
    EventRouterArgs a = ok;
    c.edit(a);
    try {
      launch_folded_event_router(a, nullptr, false);
      ADD_FAILURE() << "accepted; expected: " << c.needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace swapffn::cuda

// Pieces of the folded event router's tests (gpu_test_folded_event_router.cpp): one event's random
// inputs, a run of the router over them with its outputs poisoned first, and bitwise comparison.
#pragma once
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/runtime/device_buffer.hpp"
#include "cuda/kernels/folded_event_router.hpp"

namespace swapffn::cuda::router_test {

// Host inputs of one event on `rows` rows, random from `seed`: h in [-2, 2], gains in [0.5, 1.5],
// router_w in +-0.1 (bf16), swap and bank weights in +-1, banks in +-2 (bf16), random stream maps.
struct RouterInputs {
  int64_t rows = 0, d = 0, r = 0;
  std::vector<uint8_t> map;
  std::vector<float> h, rgain, swap_w, swap_b, bank_w, bank_b, ngain;
  std::vector<__nv_bfloat16> router_w, ram;

  static RouterInputs random(int64_t rows, int64_t d, int64_t r, uint32_t seed) {
    RouterInputs in{rows, d, r, std::vector<uint8_t>(static_cast<size_t>(rows)), {}, {}, {}, {}, {}, {}, {}, {}, {}};
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const auto floats = [&](size_t n, float lo, float hi) {
      std::vector<float> v(n);
      for (float& x : v) x = lo + (hi - lo) * (u(rng) + 1.f) / 2.f;
      return v;
    };
    const auto bf16s = [&](size_t n, float scale) {
      std::vector<__nv_bfloat16> v(n);
      for (auto& x : v) x = __float2bfloat16(scale * u(rng));
      return v;
    };
    for (auto& m : in.map) {  // a random permutation of the 4 banks, 2 bits per lane
      int p[4] = {0, 1, 2, 3};
      std::shuffle(p, p + 4, rng);
      m = static_cast<uint8_t>(p[0] | p[1] << 2 | p[2] << 4 | p[3] << 6);
    }
    in.h = floats(size_t(rows * d), -2.f, 2.f);
    in.rgain = floats(size_t(d), 0.5f, 1.5f);
    in.router_w = bf16s(size_t(r * d), 0.1f);
    in.swap_w = floats(size_t(r), -1.f, 1.f);
    in.swap_b = floats(1, -0.2f, 0.2f);
    in.bank_w = floats(size_t(4 * r), -1.f, 1.f);
    in.bank_b = floats(4, -0.1f, 0.1f);
    in.ngain = floats(size_t(d), 0.5f, 1.5f);
    in.ram = bf16s(size_t(rows * 4 * d), 2.f);
    return in;
  }

  // router_w widened to fp32.
  std::vector<float> router_w_f32() const {
    std::vector<float> v(router_w.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = __bfloat162float(router_w[i]);
    return v;
  }
};

// The core broadcast's inputs, for a router that does it (EventRouterArgs::film_scale): x
// [rows / cores, D] of the step, scale and shift [cores, D], random from `seed` in +-2 and +-1.
struct FilmInputs {
  int64_t cores = 0;
  std::vector<float> x, scale, shift;

  static FilmInputs random(int64_t rows, int64_t cores, int64_t d, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const auto floats = [&](int64_t n, float scale) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = scale * u(rng);
      return v;
    };
    return {cores, floats(rows / cores * d, 2.f), floats(cores * d, 2.f), floats(cores * d, 1.f)};
  }
};

// Host copies of everything a router writes.
struct RouterOutputs {
  std::vector<float> h;
  std::vector<__nv_bfloat16> ram, norm_out;
  std::vector<uint8_t> map, gate, slot;
  std::vector<uint8_t> norm_e4m3;  // the FFN operand's codes and scales when it was asked for in e4m3
  std::vector<float> norm_scales;
};

template <class T>
bool same_bits(const std::vector<T>& x, const std::vector<T>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

// Every output of `got` has the bits of `want` (an FFN operand a router did not write holds the
// same poison in both); `where` names the run in the failure messages.
inline void expect_same_outputs(const RouterOutputs& want, const RouterOutputs& got, const std::string& where) {
  EXPECT_TRUE(same_bits(want.h, got.h)) << where << ": h differs";
  EXPECT_TRUE(same_bits(want.ram, got.ram)) << where << ": banks differ";
  EXPECT_TRUE(same_bits(want.map, got.map)) << where << ": stream maps differ";
  EXPECT_TRUE(same_bits(want.gate, got.gate)) << where << ": gates differ";
  EXPECT_TRUE(same_bits(want.slot, got.slot)) << where << ": slots differ";
  EXPECT_TRUE(same_bits(want.norm_out, got.norm_out)) << where << ": FFN operands differ";
  EXPECT_TRUE(same_bits(want.norm_e4m3, got.norm_e4m3)) << where << ": e4m3 FFN operands differ";
  EXPECT_TRUE(same_bits(want.norm_scales, got.norm_scales)) << where << ": the e4m3 FFN operand's scales differ";
}

// The FFN operand's form a router is asked to write.
enum class Operand { bf16, e4m3, e4m3_rows };

// One event over `in` (the RMSNorm operand written when with_norm, in the form `form`): uploads the
// inputs and the folded vectors, poisons the FFN operand and the trace, calls launch(args) with
// every pointer of the args set (over all rows; launch may narrow the range), synchronises and
// downloads. With `film`, the router does the core broadcast: h is poisoned instead of uploaded
// (in.h is unused).
template <class Launch>
RouterOutputs run_event(const RouterInputs& in, bool with_norm, Launch launch, const FilmInputs* film = nullptr,
                        Operand form = Operand::bf16) {
  DeviceBuffer<float> h, swap_b, bank_b, ngain, fold;
  DeviceBuffer<__nv_bfloat16> ram, norm_out(static_cast<size_t>(in.rows * in.d));
  DeviceBuffer<uint8_t> norm_e4m3(static_cast<size_t>(in.rows * in.d));
  DeviceBuffer<float> norm_scales(static_cast<size_t>(in.rows * in.d / 128));
  DeviceBuffer<uint8_t> map, gate(static_cast<size_t>(in.rows)), slot(static_cast<size_t>(in.rows));
  DeviceBuffer<float> x, scale, shift;
  if (film) {
    x.upload(film->x);
    scale.upload(film->scale);
    shift.upload(film->shift);
    h.resize(in.h.size());
    CUDA_CHECK(cudaMemset(h.get(), 0xFF, h.size() * sizeof(float)));  // NaN
  } else {
    h.upload(in.h);
  }
  swap_b.upload(in.swap_b);
  bank_b.upload(in.bank_b);
  ngain.upload(in.ngain);
  ram.upload(in.ram);
  map.upload(in.map);
  fold.upload(fold_router(in.rgain, in.router_w_f32(), in.swap_w, in.bank_w, in.d, in.r));
  CUDA_CHECK(cudaMemset(norm_out.get(), 0xFF, norm_out.size() * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMemset(norm_e4m3.get(), 0x7F, norm_e4m3.size()));  // NaN codes
  CUDA_CHECK(cudaMemset(norm_scales.get(), 0xFF, norm_scales.size() * sizeof(float)));
  FfnOperand operand;
  if (with_norm && form == Operand::bf16) operand.bf16 = norm_out.get();
  if (with_norm && form != Operand::bf16)
    operand = {.e4m3 = norm_e4m3.get(), .scales = norm_scales.get(), .per_row = form == Operand::e4m3_rows};
  CUDA_CHECK(cudaMemset(gate.get(), 0xEE, gate.size()));
  CUDA_CHECK(cudaMemset(slot.get(), 0xEE, slot.size()));
  DeviceBuffer<StepIO> io;
  io.upload(std::vector<StepIO>{{film ? x.get() : nullptr, nullptr, gate.get(), slot.get(), {}}});
  launch(EventRouterArgs{.h = h.get(), .swap_b = swap_b.get(), .bank_b = bank_b.get(), .ram = ram.get(),
                         .stream_map = map.get(), .io = io.get(), .event = 0, .row_begin = 0, .rows = in.rows,
                         .total_rows = in.rows, .d_model = in.d,
                         .norm_gain = with_norm ? ngain.get() : nullptr, .norm_out = operand,
                         .eps = 1e-6f, .router_fold = fold.get(), .cores = film ? film->cores : in.rows,
                         .film_scale = film ? scale.get() : nullptr, .film_shift = film ? shift.get() : nullptr});
  CUDA_CHECK(cudaDeviceSynchronize());
  RouterOutputs out{h.download(), ram.download(), norm_out.download(), map.download(), gate.download(), slot.download(), {}, {}};
  if (form != Operand::bf16) {
    out.norm_e4m3 = norm_e4m3.download();
    out.norm_scales = norm_scales.download();
  }
  return out;
}

// launch, or with split > 0 two launches: rows [0, split) and [split, rows) (the fused backend's
// row groups, each with its own FFN operand: its rows' codes, and its scales [D / 128, its rows], or
// [its rows] per row, after the first group's).
template <class Launch>
auto in_two_launches(int64_t split, Launch launch) {
  return [split, launch](EventRouterArgs a) {
    if (split > 0) {
      const int64_t rows = a.rows;
      a.rows = split;
      launch(a);
      a.row_begin = split;
      a.rows = rows - split;
      FfnOperand& o = a.norm_out;
      if (o.bf16) o.bf16 += split * a.d_model;
      if (o.e4m3) {
        o.e4m3 += split * a.d_model;
        o.scales += split * (o.per_row ? 1 : a.d_model / 128);
      }
    }
    launch(a);
  };
}

}  // namespace swapffn::cuda::router_test

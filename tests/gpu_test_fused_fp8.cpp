// The fused-fp8 backend: agreement with the reference following its trace under SPEC section 5's fp8
// tolerance (Tolerance::fp8: tau 0.25, relative L2 error of delta <= 0.06 and of the final RAM <=
// 0.08, runs of at most 4 tokens; stream maps exact) for both event heads and row groups; bitwise
// determinism (graph vs eager, run vs run, engine vs engine); bitwise batch invariance; the model's
// own fp8 weights used when it has them; refusal of configs the path cannot run and of bad input,
// with the state unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu_backend_test_util.hpp"
#include "swapffn/check.hpp"
#include "swapffn/error.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn {
namespace {

using gpu_test::decode;
using gpu_test::Decoded;
using gpu_test::expect_bad_input_refused;
using gpu_test::expect_bitwise_equal;
using gpu_test::random_state;
using gpu_test::weights_of;

std::unique_ptr<Engine> fused_fp8(const Weights& w, bool graph = true, const std::string& kernels = "") {
  return gpu_test::fused_engine("fused-fp8", w, graph, kernels);
}

struct CheckCase {
  const char* preset;
  int64_t batch, tokens;
  const char* kernels;  // pinned choices ("" = the built-in choice)
};

class FusedFp8Check : public ::testing::TestWithParam<CheckCase> {};

TEST_P(FusedFp8Check, AgreesWithReferenceWithinFp8Tolerance) {
  const auto [preset, batch, tokens, kernels] = GetParam();
  const Weights& w = weights_of(preset);
  auto e = fused_fp8(w, true, kernels);
  EXPECT_EQ(e->precision(), Precision::fp8);
  const CheckReport r = check_backend(w, *e, batch, tokens, 401 + static_cast<uint64_t>(batch), Tolerance::fp8());
  std::printf("[fused-fp8 %s B=%lld T=%lld %s] %s\n", preset, static_cast<long long>(batch),
              static_cast<long long>(tokens), kernels, r.summary().c_str());
  EXPECT_TRUE(r.passed()) << r.summary();
  EXPECT_TRUE(r.stream_maps_equal);
  EXPECT_GT(r.gate_checked, 0);
}

// Both event heads, row groups (120 rows as 64 + 56; 640 rows as 3 x 192 + 64; the default model's
// 512 rows as 2 x 256), and the built-in choice at 16,000 rows (two groups on a 132-SM Hopper); each
// up projection (cuBLASLt's GEMM then the SwiGLU kernel, or ours with both fused).
INSTANTIATE_TEST_SUITE_P(
    Paths, FusedFp8Check,
    ::testing::Values(CheckCase{"tiny", 1, 4, ""}, CheckCase{"tiny", 3, 4, ""}, CheckCase{"tiny", 16, 2, ""},
                      CheckCase{"tiny", 3, 4, "router=cublas"}, CheckCase{"tiny", 3, 4, "groups=2"},
                      CheckCase{"tiny", 16, 2, "groups=4"}, CheckCase{"default", 1, 2, ""},
                      CheckCase{"default", 2, 1, "router=cublas"}, CheckCase{"default", 1, 2, "groups=2"},
                      CheckCase{"tiny", 400, 2, ""}, CheckCase{"tiny", 3, 4, "fp8up=cublas"},
                      CheckCase{"tiny", 16, 2, "fp8up=cublas,groups=4"}, CheckCase{"default", 1, 2, "fp8up=cublas"},
                      CheckCase{"default", 2, 1, "fp8up=cublas,router=cublas"},
                      // The rows scaling (one scale per weight channel and per activation row).
                      CheckCase{"tiny", 1, 4, "scales=rows"}, CheckCase{"tiny", 3, 4, "scales=rows"},
                      CheckCase{"tiny", 17, 2, "scales=rows,groups=4"}, CheckCase{"tiny", 3, 4, "scales=rows,router=cublas"},
                      CheckCase{"default", 1, 2, "scales=rows"}, CheckCase{"default", 2, 2, "scales=rows"},
                      CheckCase{"default", 3, 1, "scales=rows,groups=2"}, CheckCase{"default", 4, 1, "scales=rows"},
                      CheckCase{"default", 2, 1, "scales=rows,router=cublas"},
                      CheckCase{"tiny", 3, 4, "scales=rows,fp8up=cublas"}, CheckCase{"default", 2, 1, "scales=rows,fp8up=cublas"}),
    [](const auto& info) { return std::string(info.param.preset) + "_" + std::to_string(info.index); });

// The e4m3 operands really run: fused-fp8's delta differs from the bf16 fused path's by the order of
// e4m3's rounding (SPEC section 5's simulation: 0.03 against fp32), not by bf16's. Free-running, a
// decision may flip between the two (about 1%), so the upper bound only says "the same model".
TEST(FusedFp8, DiffersFromTheBf16PathByE4m3Rounding) {
  const Weights& w = weights_of("tiny");
  const int64_t B = 3, T = 1;
  const State s0 = random_state(w.cfg, B, 71);
  const auto x = decode_inputs(72, T, B, w.cfg.d_model);
  const Decoded e4m3 = decode(*fused_fp8(w), x, T, s0);
  const Decoded bf16_path = decode(*make_engine("fused", w), x, T, s0);
  const double diff = rel_l2(e4m3.delta.data(), bf16_path.delta.data(), int64_t(e4m3.delta.size()));
  std::printf("fused-fp8 vs fused: relative L2 difference of delta %.3g\n", diff);
  EXPECT_GT(diff, 3e-3);
  EXPECT_LT(diff, 0.5);
}

TEST(FusedFp8, NoResidualNoSiluAndDegenerateCountsAgree) {
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {"ffn_residual=false", "collapse_silu=false", "core_count=8"}, {"n_events=0"}, {"k_ffn=0"}}) {
    Config cfg = Config::preset("tiny");
    std::string label;
    for (const auto& kv : sets) {
      cfg.set(kv);
      label += kv + " ";
    }
    cfg.validate();
    // Without the residual each FFN replaces h, so rounding errors compound instead of being diluted:
    // on the first config the reference alone, free-running on the fp8 model's weights, moves delta
    // by 44% (4% on tiny), and SPEC's fp8 tolerance (derived with the residual) does not apply. These
    // configs run the fp8 model (the reference follows the same weights; only the activations'
    // rounding differs) for one token; without the residual, delta, state and the decision margin
    // get a wider stated bound, which still fails on garbage (errors of order 1). A CPU emulation of
    // the recipe gives 0.32-0.38 and 0.10-0.13 here with either head (the heads make the same
    // decisions). The H200 gave 0.32 / 0.11 with cuBLASLt's up GEMM (bf16 gate and up products) and
    // 0.42 / 0.13 with ours (fp32 products), whose h moves the router's logits enough to flip one
    // decision of margin 0.36 (so its tau is 0.5; cuBLASLt's path keeps 0.25): the same order as the
    // 30-40% error of h itself. Both heads and both up projections are run and printed.
    // Both scalings: rows runs its own w2 GEMM, whose h = product path (no residual) only these configs
    // take. The bounds above were measured for blocks; rows (a coarser u scale) has not run here yet.
    for (const fp8::Scaling scaling : {fp8::Scaling::blocks, fp8::Scaling::rows}) {
      const Weights w = Weights::random(cfg, 17).quantized_fp8(scaling);
      for (const char* kernels : {"router=folded", "router=cublas", "router=folded,fp8up=cublas"}) {
        Tolerance tol = Tolerance::fp8();
        if (!cfg.ffn_residual) {
          tol.delta_rel_l2 = 0.5;
          tol.state_rel_l2 = 0.2;
          // Only our up GEMM's fp32 products move a decision that far; cuBLASLt's keeps SPEC's tau.
          if (std::string(kernels).find("fp8up=cublas") == std::string::npos) tol.tau = 0.5;
        }
        auto e = fused_fp8(w, true, kernels);
        const CheckReport r = check_backend(w, *e, 2, 1, 5, tol);
        const std::string name = label + kernels + " scales=" + fp8::scaling_name(scaling);
        std::printf("[fused-fp8 %s] %s\n", name.c_str(), r.summary().c_str());
        EXPECT_TRUE(r.passed()) << name << ": " << r.summary();
      }
    }
  }
}

TEST(FusedFp8, RefusesShapesAndChoicesItCannotRunNamingThem) {
  for (const auto& [kv, field] : std::vector<std::pair<std::string, std::string>>{
           {"d_model=96", "d_model"}, {"d_ff=320", "d_ff"}, {"core_count=6", "core_count"}, {"d_router=6", "d_router"}}) {
    Config cfg = Config::preset("tiny");
    cfg.set(kv);
    cfg.validate();
    const Weights w = Weights::random(cfg, 3);
    try {
      fused_fp8(w);
      ADD_FAILURE() << kv << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("fused-fp8"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(fused_fp8(weights_of("tiny"), true, "up=bn256_st4_sk1_mc1"), Error);  // no dual GEMM tile here
  EXPECT_THROW(fused_fp8(weights_of("tiny"), true, "router=cublas,groups=2"), Error);
  EngineOptions bf16_with_fp8_choice;
  bf16_with_fp8_choice.fused.pinned = parse_fused_choice("fp8up=sm90");
  EXPECT_THROW(make_engine("fused", weights_of("tiny"), bf16_with_fp8_choice), Error);
}

TEST(FusedFp8, GraphAndEagerAreBitwiseIdenticalAndRunsRepeat) {
  const Weights& w = weights_of("tiny");
  const int64_t B = 3, T = 4;
  const State s0 = random_state(w.cfg, B, 21);
  const auto x = decode_inputs(22, T, B, w.cfg.d_model);
  std::vector<Decoded> per_up;
  for (const char* up : {"fp8up=cublas", "fp8up=sm90", "scales=rows", "scales=rows,fp8up=cublas"}) {
    SCOPED_TRACE(up);
    auto g = fused_fp8(w, true, up), n = fused_fp8(w, false, up);
    const Decoded rg = decode(*g, x, T, s0);
    expect_bitwise_equal(rg, decode(*n, x, T, s0));
    expect_bitwise_equal(rg, decode(*g, x, T, s0));
    expect_bitwise_equal(rg, decode(*fused_fp8(w, true, up), x, T, s0));
    per_up.push_back(rg);
  }
  // The two up projections round differently (a bf16 intermediate or none), and the scalings quantise
  // differently: equal bits would mean the choice did not reach the engine.
  EXPECT_NE(0, std::memcmp(per_up[0].delta.data(), per_up[1].delta.data(), per_up[0].delta.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(per_up[0].delta.data(), per_up[2].delta.data(), per_up[0].delta.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(per_up[2].delta.data(), per_up[3].delta.data(), per_up[2].delta.size() * sizeof(float)));
}

// A sequence's bits must not depend on its batch-mates or on B, whether its rows run in groups side
// by side, with either event head and either up projection (`both`: the choices of both runs).
TEST(FusedFp8, SequenceIsBitwiseIdenticalAloneAndInABatch) {
  for (const auto& [preset, B, batch_kernels, both] :
       {std::tuple<const char*, int64_t, const char*, const char*>{"tiny", 5, "", "router=folded"},
        {"default", 9, "", "router=folded"},
        {"default", 9, "groups=3", "router=folded"},
        {"tiny", 400, "", "router=folded"},  // the built-in choice: two groups on 132 SMs
        {"default", 9, "", "router=cublas"},
        {"default", 9, "", "router=folded,fp8up=cublas"},
        {"tiny", 400, "", "router=folded,fp8up=cublas"},
        {"tiny", 5, "", "scales=rows"},
        {"default", 9, "groups=3", "scales=rows"},
        {"tiny", 400, "", "scales=rows"},
        {"default", 9, "", "scales=rows,router=cublas"},
        {"default", 9, "", "scales=rows,fp8up=cublas"}}) {
    const std::string choices = both;
    gpu_test::expect_alone_as_in_a_batch("fused-fp8", preset, B, choices + (*batch_kernels ? "," : "") + batch_kernels,
                                         choices);
  }
}

TEST(FusedFp8, RowGroupsGiveTheSameBitsAsOneGroup) {
  gpu_test::expect_row_groups_bitwise_equal("fused-fp8", "tiny", 5, 3);
  gpu_test::expect_row_groups_bitwise_equal("fused-fp8", "default", 1, 2);
  gpu_test::expect_row_groups_bitwise_equal("fused-fp8", "tiny", 5, 3, ",fp8up=cublas");
  gpu_test::expect_row_groups_bitwise_equal("fused-fp8", "default", 1, 2, ",scales=rows");
}

// A model that carries its e4m3 FFN (Weights::fp8_ffn, as `swapffn quantize` writes it) runs those
// codes and scales: the recipe's own quantisation gives the bits of an engine that quantises the bf16
// model at construction; a changed scale changes the output. bf16 backends refuse such a model.
TEST(FusedFp8, UsesTheModelsOwnFp8Weights) {
  const Weights& w = weights_of("tiny");
  const int64_t B = 2, T = 2;
  const State s0 = random_state(w.cfg, B, 61);
  const auto x = decode_inputs(62, T, B, w.cfg.d_model);
  const Decoded plain = decode(*fused_fp8(w), x, T, s0);

  const Weights carried = w.quantized_fp8(fp8::Scaling::blocks);
  expect_bitwise_equal(plain, decode(*fused_fp8(carried), x, T, s0));
  EXPECT_THROW(make_engine("fused", carried), Error);

  fp8::FfnWeights q = *carried.fp8_ffn;
  for (float& s : q.w2.scale) s *= 2.0f;
  Weights doubled = w;
  doubled.set_fp8_ffn(q);
  const Decoded twice = decode(*fused_fp8(doubled), x, T, s0);
  EXPECT_NE(0, std::memcmp(plain.delta.data(), twice.delta.data(), plain.delta.size() * sizeof(float)))
      << "the model's fp8 w2 scales were not used";
}

// A rows-scaled model file runs its own scaling: the bits of a bf16 model pinned to scales=rows; a
// pinned scaling that differs from the model's is refused.
TEST(FusedFp8, RowsScaledModelsRunTheirScaling) {
  const Weights& w = weights_of("tiny");
  const int64_t B = 2, T = 2;
  const State s0 = random_state(w.cfg, B, 71);
  const auto x = decode_inputs(72, T, B, w.cfg.d_model);
  const Weights rows = w.quantized_fp8(fp8::Scaling::rows);
  const Decoded pinned = decode(*fused_fp8(w, true, "scales=rows"), x, T, s0);
  expect_bitwise_equal(pinned, decode(*fused_fp8(rows), x, T, s0));
  expect_bitwise_equal(pinned, decode(*fused_fp8(rows, true, "scales=rows"), x, T, s0));
  for (const char* bad : {"scales=blocks"}) {
    try {
      fused_fp8(rows, true, bad);
      ADD_FAILURE() << bad << " was accepted for a rows-scaled model";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rows"), std::string::npos) << e.what();
    }
  }
  EngineOptions bf16_with_scales;
  bf16_with_scales.fused.pinned = parse_fused_choice("scales=rows");
  EXPECT_THROW(make_engine("fused", w, bf16_with_scales), Error);
}

TEST(FusedFp8, BadInputIsRefusedAndStateLeftUnchanged) {
  const Weights& w = weights_of("tiny");
  expect_bad_input_refused([&] { return fused_fp8(w); }, w);
}

}  // namespace
}  // namespace swapffn

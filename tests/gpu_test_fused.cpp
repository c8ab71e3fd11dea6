// The fused GPU backend: agreement with the reference following its trace (SPEC section 5, the
// bf16 preset of check.hpp: tau 0.05 on the reference's decision margins, relative L2 error <= 2e-2
// for delta and the final RAM, stream maps exact), for every selectable kernel choice; bitwise
// determinism (graph vs eager, run vs run); bitwise batch invariance; refusal of configs the
// kernels cannot run and of bad input, with the state unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu_backend_test_util.hpp"
#include "swapffn/check.hpp"
#include "swapffn/error.hpp"

namespace swapffn {
namespace {

using gpu_test::decode;
using gpu_test::Decoded;
using gpu_test::expect_bad_input_refused;
using gpu_test::expect_bitwise_equal;
using gpu_test::random_state;
using gpu_test::weights_of;

std::unique_ptr<Engine> fused(const Weights& w, bool graph = true, const std::string& kernels = "") {
  return gpu_test::fused_engine("fused", w, graph, kernels);
}

struct CheckCase {
  const char* preset;
  int64_t batch, tokens;
  const char* kernels;  // pinned kernel choices ("" = the built-in choice)
};

class FusedCheck : public ::testing::TestWithParam<CheckCase> {};

TEST_P(FusedCheck, AgreesWithReferenceWithinBf16Tolerance) {
  const auto [preset, batch, tokens, kernels] = GetParam();
  const Weights& w = weights_of(preset);
  auto e = fused(w, true, kernels);
  const CheckReport r = check_backend(w, *e, batch, tokens, 301 + static_cast<uint64_t>(batch), Tolerance::bf16());
  std::printf("[fused %s B=%lld T=%lld %s] %s\n", preset, static_cast<long long>(batch), static_cast<long long>(tokens),
              kernels, r.summary().c_str());
  EXPECT_TRUE(r.passed()) << r.summary();
  EXPECT_TRUE(r.stream_maps_equal);
  EXPECT_GT(r.gate_checked, 0);
}

// Every path through the fused step: both event heads (the default, folded; the cuBLAS chain), each
// dual GEMM tile, row groups. The default model's reference costs ~206 GFLOP per token and sequence
// on the CPU: short runs there.
INSTANTIATE_TEST_SUITE_P(
    Paths, FusedCheck,
    ::testing::Values(CheckCase{"tiny", 1, 6, ""}, CheckCase{"tiny", 3, 6, ""}, CheckCase{"tiny", 16, 2, ""},
                      CheckCase{"tiny", 3, 4, "router=cublas"},
                      CheckCase{"tiny", 2, 4, "router=cublas,up=bn256_st4_sk1_mc2_p"},
                      CheckCase{"tiny", 3, 4, "up=bn256_st4_sk1_mc1_p"},
                      CheckCase{"tiny", 3, 4, "up=bn256_st4_sk1_mc2_p"},
                      CheckCase{"default", 1, 2, ""}, CheckCase{"default", 2, 1, "router=cublas"},
                      // Row groups on their own streams: 120 rows as 64 + 56; 640 rows as 3 x 192 + 64;
                      // the default model's 512 rows as 2 x 256.
                      CheckCase{"tiny", 3, 4, "groups=2"}, CheckCase{"tiny", 16, 2, "groups=4"},
                      CheckCase{"default", 1, 2, "groups=2"},
                      // 16,000 rows: the built-in choice takes two row groups on a 132-SM Hopper.
                      CheckCase{"tiny", 400, 2, ""}),
    [](const auto& info) { return std::string(info.param.preset) + "_" + std::to_string(info.index); });

TEST(Fused, NoResidualNoSiluAndDegenerateCountsAgree) {
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {"ffn_residual=false", "collapse_silu=false", "core_count=7"}, {"n_events=0"}, {"k_ffn=0"}}) {
    Config cfg = Config::preset("tiny");
    std::string label;
    for (const auto& kv : sets) {
      cfg.set(kv);
      label += kv + " ";
    }
    cfg.validate();
    const Weights w = Weights::random(cfg, 17);
    for (const char* kernels : {"router=folded", "router=cublas"}) {
      auto e = fused(w, true, kernels);
      const CheckReport r = check_backend(w, *e, 2, 3, 5, Tolerance::bf16());
      EXPECT_TRUE(r.passed()) << label << kernels << ": " << r.summary();
    }
  }
}

// d_ff = 320: 2F = 640 is 2.5 dual-GEMM tiles of 256, so the last weight tile is partial and its
// outputs past F are clipped; the down GEMM runs K = 320.
TEST(Fused, RunsAnFfnWidthThatIsNotAWholeNumberOfTiles) {
  Config cfg = Config::preset("tiny");
  cfg.set("d_ff=320");
  cfg.validate();
  const Weights w = Weights::random(cfg, 23);
  for (const char* kernels : {"", "up=bn256_st4_sk1_mc2_p"}) {
    auto e = fused(w, true, kernels);
    const CheckReport r = check_backend(w, *e, 3, 3, 7, Tolerance::bf16());
    EXPECT_TRUE(r.passed()) << "'" << kernels << "': " << r.summary();
  }
}

TEST(Fused, RefusesShapesItCannotRunNamingTheField) {
  for (const auto& [kv, field] : std::vector<std::pair<std::string, std::string>>{
           {"d_model=96", "d_model"}, {"d_ff=200", "d_ff"}, {"d_router=6", "d_router"}}) {
    Config cfg = Config::preset("tiny");
    cfg.set(kv);
    cfg.validate();
    const Weights w = Weights::random(cfg, 3);
    try {
      fused(w);
      ADD_FAILURE() << kv << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(fused(weights_of("tiny"), true, "up=bn128_st6_sk1_mc2"), Error);  // not compiled
  EXPECT_THROW(fused(weights_of("tiny"), true, "router=magic"), Error);
  EXPECT_THROW(fused(weights_of("tiny"), true, "router=cublas,groups=2"), Error);
  Config deep = Config::preset("tiny");  // a row too long for a warp's registers: no folded head
  deep.set("d_model=1152");
  deep.validate();
  try {
    fused(Weights::random(deep, 3), true, "router=folded");
    ADD_FAILURE() << "the folded head was accepted with d_model = 1152";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d_model <= 1024"), std::string::npos) << e.what();
  }
}

TEST(Fused, GraphAndEagerAreBitwiseIdenticalAndRunsRepeat) {
  const Weights& w = weights_of("tiny");
  const int64_t B = 3, T = 4;
  const State s0 = random_state(w.cfg, B, 21);
  const auto x = decode_inputs(22, T, B, w.cfg.d_model);
  auto g = fused(w, true), n = fused(w, false);
  const Decoded rg = decode(*g, x, T, s0);
  expect_bitwise_equal(rg, decode(*n, x, T, s0));
  expect_bitwise_equal(rg, decode(*g, x, T, s0));
  expect_bitwise_equal(rg, decode(*fused(w, true), x, T, s0));
}

// A sequence's bits must not depend on its batch-mates or on B, whatever tiles a batch size selects
// (the tuner may pick different ones per B), whether its rows run in groups side by side, with
// either event head.
TEST(Fused, SequenceIsBitwiseIdenticalAloneAndInABatch) {
  for (const auto& [preset, B, batch_kernels, head] :
       {std::tuple<const char*, int64_t, const char*, const char*>{"tiny", 5, "up=bn256_st4_sk1_mc1_p", "folded"},
        {"default", 9, "up=bn256_st4_sk1_mc1_p", "folded"},
        {"default", 9, "groups=3", "folded"},  // the batch's rows in three groups on their own streams
        {"default", 9, "up=bn256_st4_sk1_mc2_p", "folded"},  // the built-in choice from B = 16
        {"tiny", 400, "", "folded"},                          // the built-in choice: two groups on 132 SMs
        {"default", 9, "up=bn256_st4_sk1_mc2_p", "cublas"}}) {
    const std::string router = std::string("router=") + head;
    gpu_test::expect_alone_as_in_a_batch("fused", preset, B, router + (*batch_kernels ? "," : "") + batch_kernels,
                                         router + ",up=bn256_st4_sk1_mc1");
  }
}

// Row groups change which rows a launch covers and which stream runs it, never a row's arithmetic.
TEST(Fused, RowGroupsGiveTheSameBitsAsOneGroup) {
  gpu_test::expect_row_groups_bitwise_equal("fused", "tiny", 5, 3);
  gpu_test::expect_row_groups_bitwise_equal("fused", "default", 1, 2);
}

TEST(Fused, BadInputIsRefusedAndStateLeftUnchanged) {
  const Weights& w = weights_of("tiny");
  expect_bad_input_refused([&] { return fused(w); }, w);
}

}  // namespace
}  // namespace swapffn

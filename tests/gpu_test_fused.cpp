// The fused GPU backend: agreement with the reference following its trace (SPEC section 5, the
// bf16 preset of check.hpp: tau 0.05 on the reference's decision margins, relative L2 error <= 2e-2
// for delta and the final RAM, stream maps exact), for every selectable kernel configuration;
// bitwise determinism (graph vs eager, run vs run); bitwise batch invariance; refusal of configs
// the kernels cannot run and of bad input, with the state unchanged. Skips without a Hopper GPU.
#include <cuda_runtime.h>
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
using gpu_test::expect_bitwise_equal;
using gpu_test::random_state;
using gpu_test::weights_of;

std::unique_ptr<Engine> fused(const Weights& w, bool graph = true, const std::string& kernels = "") {
  EngineOptions o;
  o.graph = graph;
  o.kernel_config = kernels;
  return make_engine("fused", w, o);
}

struct CheckCase {
  const char* preset;
  int64_t batch, tokens;
  const char* kernels;  // kernel config override ("" = the built-in choice)
};

class FusedCheck : public ::testing::TestWithParam<CheckCase> {};

TEST_P(FusedCheck, AgreesWithReferenceWithinBf16Tolerance) {
  SKIP_WITHOUT_HOPPER();
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

// Every path through the fused step: the three routers (the default, folded; the MMA event router
// with 8- and 16-row CTAs: 16 in the batch-invariance test below; the cuBLAS chain), our split-K down GEMM (with and without operand
// multicast) and cuBLASLt's, each dual-GEMM tile. The default model's reference costs ~206 GFLOP
// per token and sequence on the CPU: short runs there.
INSTANTIATE_TEST_SUITE_P(
    Paths, FusedCheck,
    ::testing::Values(CheckCase{"tiny", 1, 6, ""}, CheckCase{"tiny", 3, 6, ""},
                      CheckCase{"tiny", 16, 2, ""},
                      CheckCase{"tiny", 16, 2, "router=event"},  // 640 rows: the MMA router's 8-row CTAs
                      CheckCase{"tiny", 3, 4, "router=cublas,down=cublas"},
                      CheckCase{"tiny", 2, 4, "router=event,down=bn64_st6_sk2_mc2,up=bn256_st4_sk1_mc2"},
                      CheckCase{"tiny", 2, 4, "router=cublas,down=bn128_st4_sk2_mc1,up=bn128_st6_sk1_mc2"},
                      CheckCase{"tiny", 3, 4, "up=bn256_st4_sk1_mc1_p"},
                      CheckCase{"tiny", 3, 4, "chunk=48"},  // 120 rows: chunks of 48, 48 and 24
                      CheckCase{"tiny", 3, 4, "down=bm64_bn64_st12_sk1_mc1"},  // 64-row tiles, 2 M tiles
                      CheckCase{"tiny", 3, 4, "up=bn128_st3_sk1_mc1_o2"},
                      CheckCase{"tiny", 2, 4, "router=cublas,down=bn64_st6_sk2_mc1,chunk=64"},
                      CheckCase{"tiny", 3, 4, "down=pp_64x64_c1x2"},  // CUTLASS's kernels (with PDL)
                      CheckCase{"tiny", 3, 4, "down=co_128x256_c2x1,chunk=48"},
                      CheckCase{"default", 1, 2, "down=pp_64x64_c1x2"},
                      CheckCase{"default", 1, 2, ""}, CheckCase{"default", 2, 1, "router=cublas,down=bn64_st6_sk2_mc1"},
                      CheckCase{"default", 1, 2, "down=sk4"}, CheckCase{"default", 3, 1, "down=sk4,router=cublas"},
                      // Row groups on their own streams: 120 rows as 64 + 56; 640 rows as 3 x 192 + 64,
                      // chunked, with our split-K down GEMM; the default model's 512 rows as 2 x 256.
                      CheckCase{"tiny", 3, 4, "groups=2"}, CheckCase{"tiny", 16, 2, "groups=4,chunk=80,down=bn64_st6_sk2_mc1"},
                      CheckCase{"default", 1, 2, "groups=2"},
                      // 16,000 rows: the built-in choice takes two row groups on a 132-SM Hopper.
                      CheckCase{"tiny", 400, 2, ""}),
    [](const auto& info) { return std::string(info.param.preset) + "_" + std::to_string(info.index); });

TEST(Fused, NoResidualNoSiluAndDegenerateCountsAgree) {
  SKIP_WITHOUT_HOPPER();
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
    for (const char* kernels :
         {"router=folded,down=cublas", "router=event,down=cublas", "router=cublas,down=bn64_st6_sk2_mc1"}) {
      auto e = fused(w, true, kernels);
      const CheckReport r = check_backend(w, *e, 2, 3, 5, Tolerance::bf16());
      EXPECT_TRUE(r.passed()) << label << kernels << ": " << r.summary();
    }
  }
}

// d_ff = 320: 2F = 640 is 2.5 dual-GEMM tiles of 256 (and 3.6 of 176), so the last weight tile is
// partial and its outputs past F are clipped; the down GEMM runs K = 320.
TEST(Fused, RunsAnFfnWidthThatIsNotAWholeNumberOfTiles) {
  SKIP_WITHOUT_HOPPER();
  Config cfg = Config::preset("tiny");
  cfg.set("d_ff=320");
  cfg.validate();
  const Weights w = Weights::random(cfg, 23);
  for (const char* kernels : {"", "up=bn176_st5_sk1_mc1_p", "down=co_128x256_c2x1"}) {
    auto e = fused(w, true, kernels);
    const CheckReport r = check_backend(w, *e, 3, 3, 7, Tolerance::bf16());
    EXPECT_TRUE(r.passed()) << "'" << kernels << "': " << r.summary();
  }
  EXPECT_THROW(fused(w, true, "down=sk2"), Error);  // K = 320 is not whole 64-k steps of two splits
}

TEST(Fused, RefusesShapesItCannotRunNamingTheField) {
  SKIP_WITHOUT_HOPPER();
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
  EXPECT_THROW(fused(weights_of("tiny"), true, "down=bn64_st6_sk1_mc1"), Error);  // not compiled
  try {  // tiny: d_ff = 384 is not a multiple of 64 * 4
    fused(weights_of("tiny"), true, "down=sk4");
    ADD_FAILURE() << "down=sk4 accepted with d_ff = 384";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d_ff"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fused(weights_of("tiny"), true, "router=magic"), Error);
}

TEST(Fused, GraphAndEagerAreBitwiseIdenticalAndRunsRepeat) {
  SKIP_WITHOUT_HOPPER();
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

// The timing diagnostics' engine (EngineOptions::leave_out, `swapffn bench --leave-out`): the kernels
// are really left out (here the down GEMMs: delta changes), an unknown kind is refused by name when
// the engine is made, and a FiLM kernel that the folded router's first head has absorbed cannot be
// left out.
TEST(Fused, LeavingKernelsOutChangesTheStepAndBadKindsAreRefused) {
  SKIP_WITHOUT_HOPPER();
  const Weights& w = weights_of("tiny");
  const int64_t B = 2, T = 2;
  const State s0 = random_state(w.cfg, B, 31);
  const auto x = decode_inputs(32, T, B, w.cfg.d_model);
  const Decoded full = decode(*fused(w), x, T, s0);
  EngineOptions o;
  o.leave_out = "down";
  const Decoded part = decode(*make_engine("fused", w, o), x, T, s0);
  EXPECT_NE(full.delta, part.delta) << "leaving the down GEMMs out changed nothing";
  o.leave_out = "down+gemm";
  try {
    make_engine("fused", w, o);
    ADD_FAILURE() << "leave_out=down+gemm was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown kind of kernel 'gemm'"), std::string::npos) << e.what();
  }
  o.leave_out = "film";
  auto e = make_engine("fused", w, o);
  State s = s0;
  std::vector<float> delta(x.size());
  try {
    e->decode(x.data(), delta.data(), T, s);
    ADD_FAILURE() << "leave_out=film was accepted with the folded router";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("no FiLM kernel to leave out"), std::string::npos) << err.what();
  }
}

// With the heads and RMSNorms left out nothing writes the GEMMs' activation operands; the timing
// diagnostics must then give them random values, not a fresh buffer's zeros (a GEMM on zeros runs
// faster than on real data, and at large B the clock follows the power it draws). On nonzero
// operands the FFN steps move h, so consecutive tokens' deltas differ; on zeros u = silu(0) * 0 = 0,
// h stays put and every token's delta would be the same.
TEST(Fused, LeftOutProducersLeaveTheGemmsRandomOperands) {
  SKIP_WITHOUT_HOPPER();
  const Weights& w = weights_of("tiny");
  const int64_t B = 2, T = 2, D = w.cfg.d_model;
  EngineOptions o;
  o.leave_out = "router+rmsnorm";
  // decode() poisons delta and fails on any value left unwritten or not finite.
  const Decoded r = decode(*make_engine("fused", w, o), decode_inputs(42, T, B, D), T, random_state(w.cfg, B, 41));
  const auto token_1 = r.delta.begin() + std::ptrdiff_t(B * D);
  EXPECT_FALSE(std::equal(r.delta.begin(), token_1, token_1))
      << "h did not move between tokens: the GEMMs ran on zero operands";
}

// A sequence's bits must not depend on its batch-mates or on B, whatever tile variants a batch
// size selects (the tuner may pick different ones per B; these two differ in tile N and multicast)
// and however many rows an MMA event-router CTA takes (default model on 132 SMs: B = 9 takes 32-row
// CTAs, B = 4 16-row CTAs; alone: 8; the other cases run the default, folded router), whether the batch's FFN runs in row chunks (with a shorter
// last chunk; the sequence alone does not), whether its rows run in groups side by side and
// two-CTAs-per-SM dual GEMM tiles.
TEST(Fused, SequenceIsBitwiseIdenticalAloneAndInABatch) {
  SKIP_WITHOUT_HOPPER();
  // down=sk4: our split-4 down GEMM in the batch and alone (tile widths by batch size; the GEMM test
  // SameSplitGivesSameBitsForAnyTileAndRowCount checks the widths against each other bitwise).
  for (const auto& [preset, B, batch_kernels, down] :
       {std::tuple<const char*, int64_t, const char*, const char*>{"tiny", 5, "chunk=72", "cublas"},
        {"default", 9, "chunk=2048", "cublas"},
        {"default", 4, "up=bn128_st3_sk1_mc1_o2", "cublas"},
        {"default", 9, "groups=3", "cublas"},  // the batch's rows in three groups on their own streams
        // The persistent walk with W13 multicast (the built-in choice from B = 16), the 176-wide
        // tiles with a partial last weight tile, and the 256-row tiles.
        {"default", 9, "up=bn256_st4_sk1_mc2_p", "cublas"},
        {"default", 9, "up=bn176_st5_sk1_mc1_p", "cublas"},
        {"default", 9, "up=bm256_bn192_st3_sk1_mc2_p", "cublas"},  // 128 rows per consumer warpgroup
        {"tiny", 400, "groups=auto", "cublas"},  // the built-in choice: two groups on 132 SMs
        {"default", 9, "chunk=1536", "sk4"},
        {"default", 9, "router=event", "cublas,router=event"},  // the MMA router: 32-row CTAs, alone 8
        // CUTLASS: a wide cooperative tile for the batch, the pingpong 64 x 64 tile alone.
        {"default", 9, "down=co_128x256_c2x1", "pp_64x64_c1x2"}}) {
    const Weights& w = weights_of(preset);
    const bool tiny = preset[0] == 't';
    const int64_t T = tiny ? 3 : 2, D = w.cfg.d_model, pick = 3;
    const State batch_state = random_state(w.cfg, B, 31);
    const auto x = decode_inputs(32, T, B, D);
    const Decoded all = decode(*fused(w, true, std::string("up=bn256_st4_sk1_mc2,down=") + down + "," + batch_kernels), x,
                               T, batch_state);

    State one = State::init(w.cfg, 1);
    batch_state.copy_sequence_to(pick, one, 0);
    std::vector<float> x1(static_cast<size_t>(T * D));
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(&x[static_cast<size_t>((t * B + pick) * D)], D, &x1[static_cast<size_t>(t * D)]);
    const Decoded alone = decode(*fused(w, true, std::string("up=bn128_st6_sk1_mc2,down=") + down), x1, T, one);

    for (int64_t t = 0; t < T; ++t)
      EXPECT_EQ(0, std::memcmp(&alone.delta[static_cast<size_t>(t * D)], &all.delta[static_cast<size_t>((t * B + pick) * D)],
                               static_cast<size_t>(D) * sizeof(float)))
          << preset << ": delta of token " << t << " differs alone vs in the batch";
    State got = State::init(w.cfg, 1);
    all.state.copy_sequence_to(pick, got, 0);
    EXPECT_TRUE(got == alone.state) << preset << ": final state differs alone vs in the batch";
  }
}

// Row groups change which rows a launch covers and which stream runs it, never a row's arithmetic:
// the same bits for every group count, captured in a graph or run eagerly.
TEST(Fused, RowGroupsGiveTheSameBitsAsOneGroup) {
  SKIP_WITHOUT_HOPPER();
  for (const auto& [preset, B, T] : {std::tuple<const char*, int64_t, int64_t>{"tiny", 5, 3}, {"default", 1, 2}}) {
    const Weights& w = weights_of(preset);
    const State s0 = random_state(w.cfg, B, 51);
    const auto x = decode_inputs(52, T, B, w.cfg.d_model);
    const Decoded one = decode(*fused(w, true, "groups=1"), x, T, s0);
    for (const char* kernels : {"groups=2", "groups=3,chunk=40", "groups=8", "groups=4,down=bn64_st6_sk2_mc1"}) {
      const std::string what = std::string(preset) + " " + kernels;
      const Decoded base = std::string(kernels).find("sk2") == std::string::npos
                               ? one
                               : decode(*fused(w, true, "down=bn64_st6_sk2_mc1"), x, T, s0);
      SCOPED_TRACE(what);
      expect_bitwise_equal(base, decode(*fused(w, true, kernels), x, T, s0));
      expect_bitwise_equal(base, decode(*fused(w, false, kernels), x, T, s0));
    }
  }
}

// The L2 window over the FFN weights changes caching only: the same bits with and without it, in a
// graph and eagerly, with row groups on their own streams; and the engine gives the persisting L2
// carve-out back (the context's limit as it found it) when it goes away.
TEST(Fused, L2WeightWindowGivesTheSameBitsAndRestoresTheLimit) {
  SKIP_WITHOUT_HOPPER();
  size_t limit_before = 0;
  ASSERT_EQ(cudaDeviceGetLimit(&limit_before, cudaLimitPersistingL2CacheSize), cudaSuccess);
  for (const auto& [preset, B, T] : {std::tuple<const char*, int64_t, int64_t>{"tiny", 5, 3}, {"default", 1, 2}}) {
    const Weights& w = weights_of(preset);
    const State s0 = random_state(w.cfg, B, 61);
    const auto x = decode_inputs(62, T, B, w.cfg.d_model);
    const Decoded base = decode(*fused(w, true, "l2_weights=0"), x, T, s0);
    for (const char* kernels : {"l2_weights=1", "l2_weights=0.5,groups=2"}) {
      SCOPED_TRACE(std::string(preset) + " " + kernels);
      auto g = fused(w, true, kernels);
      expect_bitwise_equal(base, decode(*g, x, T, s0));
      size_t limit = 0;
      ASSERT_EQ(cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize), cudaSuccess);
      EXPECT_GT(limit, 0u) << "no persisting carve-out while the window's engine lives";
      expect_bitwise_equal(base, decode(*fused(w, false, kernels), x, T, s0));
    }
  }
  size_t limit_after = 0;
  ASSERT_EQ(cudaDeviceGetLimit(&limit_after, cudaLimitPersistingL2CacheSize), cudaSuccess);
  EXPECT_EQ(limit_after, limit_before);
}

TEST(Fused, BadInputIsRefusedAndStateLeftUnchanged) {
  SKIP_WITHOUT_HOPPER();
  const Weights& w = weights_of("tiny");
  auto e = fused(w);
  const int64_t B = 2, D = w.cfg.d_model;
  State s = random_state(w.cfg, B, 41);
  const State before = s;
  auto x = decode_inputs(42, 1, B, D);
  x[static_cast<size_t>(D + 5)] = std::numeric_limits<float>::infinity();
  std::vector<float> delta(x.size(), 7.f);
  try {
    e->step(x.data(), delta.data(), s);
    ADD_FAILURE() << "non-finite x accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(std::to_string(D + 5)), std::string::npos) << err.what();
  }
  EXPECT_TRUE(s == before);
  EXPECT_EQ(delta[0], 7.f);

  x[static_cast<size_t>(D + 5)] = 0.5f;
  s.stream_map[1] = 0x00;  // lanes (0,0,0,0): not a permutation
  const State bad = s;
  EXPECT_THROW(e->step(x.data(), delta.data(), s), Error);
  EXPECT_TRUE(s == bad);

  State other_model = random_state(Config::preset("default"), B, 43);  // wrong C and D for this engine
  const State other_before = other_model;
  EXPECT_THROW(e->step(x.data(), delta.data(), other_model), Error);
  EXPECT_TRUE(other_model == other_before);
}

}  // namespace
}  // namespace swapffn

// Spec units of SPEC section 4 as the reference computes them (src/reference/reference_math.hpp)
// and the stream-map lane algebra of SPEC section 3.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/reference/reference_math.hpp"
#include "swapffn/random.hpp"
#include "swapffn/state.hpp"

namespace swapffn::reference {
namespace {

TEST(ReferenceMath, RmsNormMatchesDefinition) {
  // v = (3, -4, 0, 12): mean(v^2) = (9 + 16 + 0 + 144) / 4 = 42.25, rsqrt(42.25) = 1/6.5.
  const float v[4] = {3, -4, 0, 12};
  const float gain[4] = {1, 2, -1, 0.5f};
  float out[4];
  rms_norm(v, gain, 4, 0.0, out);
  EXPECT_FLOAT_EQ(out[0], 3 / 6.5f);
  EXPECT_FLOAT_EQ(out[1], -8 / 6.5f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_FLOAT_EQ(out[3], 6 / 6.5f);
  // eps enters under the root: mean 42.25 + eps 6 = 48.25.
  rms_norm(v, gain, 4, 6.0, out);
  EXPECT_FLOAT_EQ(out[0], static_cast<float>(3 / std::sqrt(48.25)));
}

TEST(ReferenceMath, RmsNormOfZeroIsZeroAndEpsKeepsItFinite) {
  const float v[3] = {0, 0, 0}, gain[3] = {1, 1, 1};
  float out[3] = {1, 1, 1};
  rms_norm(v, gain, 3, 1e-6, out);
  for (float o : out) EXPECT_EQ(o, 0.0f);
}

TEST(ReferenceMath, Silu) {
  EXPECT_EQ(silu(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(silu(1.0f), static_cast<float>(1.0 / (1.0 + std::exp(-1.0))));
  EXPECT_FLOAT_EQ(silu(-2.0f), static_cast<float>(-2.0 / (1.0 + std::exp(2.0))));
  EXPECT_FLOAT_EQ(silu(30.0f), 30.0f);              // sigmoid saturates to 1
  EXPECT_EQ(silu(-1000.0f), 0.0f);                  // exp overflow gives -0, never NaN
  EXPECT_FALSE(std::isnan(silu(-1000.0f)));
}

TEST(ReferenceMath, DotIsExactForSmallIntegersAndHandlesTails) {
  for (int n : {0, 1, 7, 8, 9, 17, 64}) {
    std::vector<float> a(n), b(n);
    double want = 0;
    for (int i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i % 5 - 2);
      b[i] = static_cast<float>(3 - i % 7);
      want += static_cast<double>(a[i]) * b[i];
    }
    EXPECT_EQ(dot(a.data(), b.data(), n), want) << "n = " << n;
  }
}

TEST(ReferenceMath, ArgmaxTiesGoToTheLowestSlot) {
  const float all_equal[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  EXPECT_EQ(choose_slot(all_equal).slot, 0);
  EXPECT_EQ(choose_slot(all_equal).gap, 0.0f);
  const float tie_12[4] = {-1, 2, 2, 1};
  EXPECT_EQ(choose_slot(tie_12).slot, 1);
  EXPECT_EQ(choose_slot(tie_12).gap, 0.0f);
  const float tie_3[4] = {-1, 0, 1, 3};
  EXPECT_EQ(choose_slot(tie_3).slot, 3);
  EXPECT_EQ(choose_slot(tie_3).gap, 2.0f);
  const float first[4] = {4, 1, 3.5f, -2};
  EXPECT_EQ(choose_slot(first).slot, 0);
  EXPECT_EQ(choose_slot(first).gap, 0.5f);
}

TEST(ReferenceMath, GateAtZeroIsClosed) {
  EXPECT_FALSE(gate_open(0.0f));
  EXPECT_FALSE(gate_open(-0.0f));
  EXPECT_FALSE(gate_open(-1e-30f));
  EXPECT_TRUE(gate_open(1e-30f));
  EXPECT_TRUE(gate_open(std::nextafter(0.0f, 1.0f)));
}

TEST(ReferenceMath, ExchangeRoundsToBf16OnWriteAndWidensOnRead) {
  // 0.3f = 0x3E99999A rounds to bf16 0x3E9A; 1 + 2^-8 is a tie that goes to even (1.0);
  // 1 + 3*2^-9 rounds up to 1 + 2^-7.
  float h[3] = {0.3f, 1.0f + 0x1.0p-8f, 1.0f + 3 * 0x1.0p-9f};
  bf16 bank[3] = {bf16{0x4049}, bf16{0xC000}, bf16{0x0000}};  // 3.140625, -2, 0
  exchange_with_bank(h, bank, 3);
  EXPECT_EQ(h[0], 3.140625f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], 0.0f);
  EXPECT_EQ(bank[0].bits, 0x3E9A);
  EXPECT_EQ(bank[1].bits, 0x3F80);
  EXPECT_EQ(bank[2].bits, 0x3F81);
}

TEST(StreamMap, LaneExchange) {
  // identity (0,1,2,3); swapping slot 0 with j puts bank j in lane 0 and bank 0 in lane j.
  EXPECT_EQ(swap_lanes(kIdentityStreamMap, 0), kIdentityStreamMap);
  EXPECT_EQ(swap_lanes(kIdentityStreamMap, 1), 0xE1);  // (1,0,2,3)
  EXPECT_EQ(swap_lanes(kIdentityStreamMap, 2), 0xC6);  // (2,1,0,3)
  EXPECT_EQ(swap_lanes(kIdentityStreamMap, 3), 0x27);  // (3,1,2,0)
  const uint8_t m = 0x4B;  // lanes (3,2,0,1)
  EXPECT_EQ(swap_lanes(m, 0), m);
  EXPECT_EQ(lane_of(swap_lanes(m, 2), 0), 0);
  EXPECT_EQ(lane_of(swap_lanes(m, 2), 2), 3);
  EXPECT_EQ(lane_of(swap_lanes(m, 2), 1), 2);
  EXPECT_EQ(lane_of(swap_lanes(m, 2), 3), 1);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(swap_lanes(swap_lanes(m, j), j), m);  // an involution
}

TEST(StreamMap, StaysAPermutationOverManyRandomSwaps) {
  int valid = 0;
  for (int v = 0; v < 256; ++v) valid += is_valid_stream_map(static_cast<uint8_t>(v)) ? 1 : 0;
  EXPECT_EQ(valid, 24);  // 4! permutations
  Rng rng(7);
  uint8_t m = kIdentityStreamMap;
  int seen[256] = {};
  for (int i = 0; i < 100000; ++i) {
    m = swap_lanes(m, static_cast<int>(rng.next_u64() % 4));
    ASSERT_TRUE(is_valid_stream_map(m)) << "after " << i << " swaps: " << int(m);
    seen[m] = 1;
  }
  int reached = 0;
  for (int s : seen) reached += s;
  EXPECT_EQ(reached, 24);  // transpositions (0 j) generate every permutation
}

}  // namespace
}  // namespace swapffn::reference

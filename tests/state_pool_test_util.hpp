// The state-pool contract (SPEC section 7) checked on any engine: a slot step gives each sequence
// the bits of a dense step of that sequence alone, whatever its slot, its batch-mates and padding;
// padding rows give zero delta; unnamed slots never change; bad slot ids and x are refused with the
// pool unchanged.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "swapffn/engine.hpp"
#include "swapffn/error.hpp"
#include "swapffn/random.hpp"

namespace swapffn::testing {

inline std::vector<State> pool_contents(const StatePool& pool) {
  std::vector<State> out;
  for (int64_t s = 0; s < pool.slots(); ++s) out.push_back(pool.get(int32_t(s)));
  return out;
}

// Sequence k: a random mid-decode state and T tokens of random x.
inline void expect_pool_contract(Engine& e, int64_t T) {
  const Config& cfg = e.config();
  const int64_t D = cfg.d_model, K = 3, S = 7;
  const State seqs = State::random(cfg, K, 71);
  const std::vector<float> xs = decode_inputs(72, T, K, D);  // [T, K, D]

  // Each token's rows in another order, with padding rows; sequences 0 and 2 sit token 2 out.
  const auto rows_of = [](int64_t t) {
    if (t == 2) return std::vector<int64_t>{-1, 1};
    return t % 2 ? std::vector<int64_t>{2, -1, 0, 1} : std::vector<int64_t>{1, 0, -1, -1, 2};
  };
  const auto present = [&](int64_t k, int64_t t) {
    for (int64_t r : rows_of(t))
      if (r == k) return true;
    return false;
  };

  // Dense: each sequence alone, over the tokens it takes part in.
  std::vector<std::vector<float>> want_delta(K);
  std::vector<State> want_state;
  for (int64_t k = 0; k < K; ++k) {
    State one = State::init(cfg, 1);
    seqs.copy_sequence_to(k, one, 0);
    for (int64_t t = 0; t < T; ++t) {
      if (!present(k, t)) continue;
      std::vector<float> d(static_cast<size_t>(D), std::numeric_limits<float>::quiet_NaN());
      e.step(&xs[size_t((t * K + k) * D)], d.data(), one);
      want_delta[size_t(k)].insert(want_delta[size_t(k)].end(), d.begin(), d.end());
    }
    want_state.push_back(one);
  }

  // Slots 5, 0, 3 hold sequences 0, 1, 2.
  auto pool = e.make_pool(S);
  const int32_t slot_of[K] = {5, 0, 3};
  for (int64_t k = 0; k < K; ++k) {
    State one = State::init(cfg, 1);
    seqs.copy_sequence_to(k, one, 0);
    pool->set(slot_of[k], one);
  }
  const std::vector<State> before = pool_contents(*pool);
  std::vector<std::vector<float>> got_delta(K);
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<int64_t> order = rows_of(t);
    std::vector<int32_t> ids;
    std::vector<float> x;
    for (int64_t k : order) {
      ids.push_back(k < 0 ? kPaddingSlot : slot_of[k]);
      for (int64_t i = 0; i < D; ++i) x.push_back(k < 0 ? 1e3f : xs[size_t((t * K + k) * D + i)]);
    }
    std::vector<float> delta(x.size(), std::numeric_limits<float>::quiet_NaN());
    e.step_slots(x.data(), ids, delta.data(), *pool);
    for (size_t r = 0; r < order.size(); ++r) {
      const float* row = &delta[r * size_t(D)];
      if (order[r] < 0) {
        for (int64_t i = 0; i < D; ++i) ASSERT_EQ(row[i], 0.f) << "padding row " << r << " token " << t;
      } else {
        got_delta[size_t(order[r])].insert(got_delta[size_t(order[r])].end(), row, row + D);
      }
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    ASSERT_EQ(got_delta[size_t(k)].size(), want_delta[size_t(k)].size()) << "sequence " << k;
    EXPECT_EQ(0, std::memcmp(got_delta[size_t(k)].data(), want_delta[size_t(k)].data(),
                             got_delta[size_t(k)].size() * sizeof(float)))
        << "sequence " << k << ": delta differs from the dense step";
    EXPECT_TRUE(pool->get(slot_of[k]) == want_state[size_t(k)]) << "sequence " << k << ": state differs";
  }
  for (int32_t s : {1, 2, 4, 6}) EXPECT_TRUE(pool->get(s) == before[size_t(s)]) << "unnamed slot " << s << " changed";

  // Bad input: refused naming the problem, the pool unchanged.
  const std::vector<State> held = pool_contents(*pool);
  std::vector<float> x2 = decode_inputs(73, 1, 2, D), d2(x2.size());
  const auto refused = [&](const std::vector<int32_t>& ids, const std::vector<float>& x, const std::string& needle) {
    try {
      e.step_slots(x.data(), ids, d2.data(), *pool);
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
    const std::vector<State> after = pool_contents(*pool);
    for (size_t s = 0; s < after.size(); ++s) EXPECT_TRUE(after[s] == held[s]) << needle << ": slot " << s << " changed";
  };
  refused({1, 7}, x2, "slot_ids[1] = 7 is not a slot of this pool (0..6");
  refused({4, 4}, x2, "slot_ids[1] = 4 is named twice");
  refused({-2, 1}, x2, "slot_ids[0] = -2");
  std::vector<float> bad = x2;
  bad[size_t(D + 3)] = std::numeric_limits<float>::infinity();
  refused({1, 2}, bad, "non-finite value in x at index " + std::to_string(D + 3));
  try {
    pool->set(2, State::init(cfg, 2));
    ADD_FAILURE() << "a two-sequence state was set into one slot";
  } catch (const Error&) {
  }
  EXPECT_TRUE(pool->get(2) == held[2]);
  pool->reset({5});
  EXPECT_TRUE(pool->get(5) == State::init(cfg, 1));
  EXPECT_THROW(pool->reset({9}), Error);
}

}  // namespace swapffn::testing

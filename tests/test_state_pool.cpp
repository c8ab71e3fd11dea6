// The state pool (SPEC section 7) on the reference backend: state_pool_test_util.hpp's contract.
#include <gtest/gtest.h>

#include "engine_test_options.hpp"
#include "state_pool_test_util.hpp"

namespace swapffn {
namespace {

TEST(StatePool, ReferenceKeepsTheSlotContract) {
  const Weights w = Weights::random(Config::preset("tiny"), 81);
  auto e = make_engine("reference", w, testing::threads(2));
  testing::expect_pool_contract(*e, 4);
}

TEST(StatePool, APoolServesOnlyItsEngineKind) {
  const Weights w = Weights::random(Config::preset("tiny"), 82);
  auto e = make_engine("reference", w);
  EXPECT_THROW(e->make_pool(0), Error);
  auto pool = e->make_pool(2);
  EXPECT_EQ(pool->slots(), 2);
  EXPECT_TRUE(pool->get(1) == State::init(w.cfg, 1));
}

}  // namespace
}  // namespace swapffn

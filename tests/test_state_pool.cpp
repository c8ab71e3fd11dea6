// The state pool (SPEC section 7) on the reference backend: state_pool_test_util.hpp's contract.
#include <gtest/gtest.h>

#include "engine_test_options.hpp"
#include "state_pool_test_util.hpp"
#include "swapffn/torn_slots.hpp"

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

// A pool refuses RAM the engines refuse (its save would write a file that load refuses), unchanged.
TEST(StatePool, SetRefusesRamTheEnginesRefuse) {
  const Weights w = Weights::random(Config::preset("tiny"), 83);
  auto e = make_engine("reference", w);
  auto pool = e->make_pool(2);
  State one = State::random(w.cfg, 1, 5);
  pool->set(1, one);
  State bad = one;
  bad.ram[40] = bf16{0xFF80};  // -inf
  EXPECT_THROW(pool->set(1, bad), Error);
  bad.ram[40] = float_to_bf16(1e20f);  // past 2^48
  EXPECT_THROW(pool->set(1, bad), Error);
  EXPECT_TRUE(pool->get(1) == one);
}

// The GPU pools' record of slots a failed step may have left partly advanced (they step in place).
TEST(TornSlots, RefuseTheTornSlotsUntilMendedNamingSlotAndFault) {
  TornSlots t(4);
  const std::vector<int32_t> step{2, -1, 0}, other{1, 3};
  t.require_whole(&step);
  t.require_whole(nullptr);
  t.tear(&step, "cudaErrorLaunchFailure");
  t.require_whole(&other);  // slots the failed step did not name stay usable
  try {
    t.require_whole(&step);
    ADD_FAILURE() << "a torn slot was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("slot 2 may be partly advanced"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaErrorLaunchFailure"), std::string::npos) << m;
  }
  EXPECT_THROW(t.require_whole(nullptr), Error);  // a step whose ids are on the device
  t.mend(2);
  EXPECT_THROW(t.require_whole(&step), Error);  // slot 0 still torn
  t.mend(0);
  t.require_whole(&step);
  t.require_whole(nullptr);
  t.tear(nullptr, "a device step failed");  // device ids: every slot
  EXPECT_THROW(t.require_whole(&other), Error);
}

}  // namespace
}  // namespace swapffn

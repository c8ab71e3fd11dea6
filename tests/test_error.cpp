// The two kinds of error (swapffn/error.hpp): a user-facing one is its message alone; an internal
// one starts with the source location a bug report needs.
#include <gtest/gtest.h>

#include <string>

#include "swapffn/error.hpp"

namespace swapffn {
namespace {

std::string message_of(void (*raise)(int), int v) {
  try {
    raise(v);
  } catch (const Error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST(Error, UserErrorsCarryNoSourceLocation) {
  const auto require = [](int v) { SWAPFFN_REQUIRE(v > 0, "--batch must be > 0, got " + std::to_string(v)); };
  EXPECT_EQ(message_of(require, -3), "--batch must be > 0, got -3");
  EXPECT_EQ(message_of(require, 1), "(nothing thrown)");
  const auto fail = [](int v) { SWAPFFN_FAIL("unknown backend '" + std::to_string(v) + "'"); };
  EXPECT_EQ(message_of(fail, 7), "unknown backend '7'");
}

TEST(Error, InternalErrorsStartWithTheirSourceLocation) {
  const auto assert_ = [](int v) { SWAPFFN_ASSERT(v == 0, "rows " + std::to_string(v) + " were never prepared"); };
  const std::string m = message_of(assert_, 5);
  const std::string loc = "tests/test_error.cpp:";
  ASSERT_EQ(m.rfind(loc, 0), 0u) << m;  // relative to the source tree, not an absolute path
  const size_t colon = m.find(": ", loc.size());
  ASSERT_NE(colon, std::string::npos) << m;
  EXPECT_GT(std::stoi(m.substr(loc.size(), colon - loc.size())), 0) << m;
  EXPECT_EQ(m.substr(colon + 2), "rows 5 were never prepared");
  EXPECT_EQ(message_of(assert_, 0), "(nothing thrown)");
  const auto internal = [](int) { SWAPFFN_INTERNAL("unreachable"); };
  EXPECT_NE(message_of(internal, 0).find("tests/test_error.cpp:"), std::string::npos);
}

}  // namespace
}  // namespace swapffn

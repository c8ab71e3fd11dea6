// The `swapffn-nvfp4` tool on a Hopper GPU, run as a separate process.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"

namespace swapffn::nvfp4 {
namespace {

// The engine tests' CLI fixture, named for this tool's tests.
using Nvfp4Cli = swapffn::testing::Cli;
using swapffn::testing::Result;

// `swapffn-nvfp4 bench --no-search` times each shape's default config alone: one candidate line per shape
// on stderr, the best config reported is the default, and the result still matches cuBLAS.
TEST_F(Nvfp4Cli, BenchWithoutSearchTimesTheDefaultAlone) {
  const std::string json = path("bench.json");
  const Result r = cli("bench --op dual --shape 256x512x512 --shape 128x384x768 --no-search --reps 3 --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  size_t candidates = 0;
  for (size_t at = r.err.find("candidate"); at != std::string::npos; at = r.err.find("candidate", at + 1)) ++candidates;
  EXPECT_EQ(candidates, 2u) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_NE(j["method"].get<std::string>().find("--no-search"), std::string::npos) << j["method"];
  ASSERT_EQ(j["results"].size(), 2u);
  for (const auto& row : j["results"]) {
    EXPECT_EQ(row["best_config"], row["default_config"]) << row;
    EXPECT_EQ(row["us"], row["default_us"]) << row;
    EXPECT_EQ(row["mismatches_vs_cublas"], 0) << row;
  }
}

}  // namespace
}  // namespace swapffn::nvfp4

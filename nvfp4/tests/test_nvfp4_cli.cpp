// The `swapffn-nvfp4` tool's command line on any machine, run as a separate process: what the parser
// refuses is a usage error (exit 2, one line naming it and where the help is); --help and --version
// are not errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cli_test_util.hpp"

namespace swapffn::nvfp4 {
namespace {

// The engine tests' CLI fixture, named for this tool's tests.
using Nvfp4Cli = swapffn::testing::Cli;
using swapffn::testing::Result;

TEST_F(Nvfp4Cli, UsageErrorsExitTwoWithOneLine) {
  const struct {
    std::string args, what, help;
  } cases[] = {
      {"", "subcommand", "'swapffn-nvfp4 --help'"},
      {"bench --reps 1000", "1000", "'swapffn-nvfp4 bench --help'"},
      {"bench --op nope", "nope", "'swapffn-nvfp4 bench --help'"},
  };
  for (const auto& c : cases) {
    const Result r = cli(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(r.err.rfind("swapffn-nvfp4: usage error: ", 0), 0u) << c.args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(c.what), std::string::npos) << c.args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(c.help), std::string::npos) << c.args << "\nstderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << "\nstdout: " << r.out;
  }
  for (const std::string args : {"--help", "bench --help", "--version"}) {
    const Result r = cli(args);
    EXPECT_EQ(r.code, 0) << args << "\nstderr: " << r.err;
    EXPECT_FALSE(r.out.empty()) << args;
    EXPECT_TRUE(r.err.empty()) << args << "\nstderr: " << r.err;
  }
}

}  // namespace
}  // namespace swapffn::nvfp4

// The `swapffn` command line run as a separate process, for the CLI tests of both binaries: a
// fixture with a scratch directory, the run's exit code and output, and the one-line-error check.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace swapffn::testing {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("swapffn_cli_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  static std::string slurp(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  Result cli(const std::string& args) {
    const std::string cmd = std::string("'") + SWAPFFN_CLI_PATH + "' " + args + " >'" + (dir / "out").string() +
                            "' 2>'" + (dir / "err").string() + "'";
    const int st = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = slurp(dir / "out");
    r.err = slurp(dir / "err");
    return r;
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  // A failure: non-zero exit, exactly one line on stderr that contains `what`.
  void expect_error(const std::string& args, const std::string& what) {
    const Result r = cli(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << args << "\nstderr: " << r.err;
  }

  fs::path dir;
};

inline std::string line_with(const std::string& text, const std::string& key) {
  std::istringstream s(text);
  for (std::string l; std::getline(s, l);)
    if (l.find(key) != std::string::npos) return l;
  return "";
}

}  // namespace swapffn::testing

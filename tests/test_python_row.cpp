// The runner of `swapffn bench --python`'s row (bench/python_row.hpp) against stand-in interpreters:
// the child's arguments, the row read from the last JSON line of its output, and every way it can
// fail to give one coming back as a reason, never as an exception. No GPU or torch needed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "bench/python_row.hpp"

namespace swapffn {
namespace {

namespace fs = std::filesystem;

class PythonRow : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("swapffn_python_row_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  // An interpreter that records its arguments (one a line) in args.txt and runs `body` (sh).
  std::string fake_python(const std::string& body) const {
    const fs::path p = dir / "python";
    std::ofstream(p) << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > '" << (dir / "args.txt").string()
                     << "'\n" << body << "\n";
    chmod(p.c_str(), 0755);
    return p.string();
  }
  std::string recorded_args() const {
    std::ifstream f(dir / "args.txt");
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  PythonRowRequest request(const std::string& python) const {
    PythonRowRequest r;
    r.python = python;
    r.model = (dir / "a model's file.safetensors").string();
    r.kernels = "up=bn256_st4_sk1_mc1_p";
    r.batch = 16;
    r.tokens = 8;
    r.warmup = 1;
    r.repeats = 3;
    return r;
  }

  fs::path dir;
};

TEST_F(PythonRow, ReadsTheRowFromTheLastJsonLineAndPassesTheRequest) {
  const PythonRowRequest req = request(fake_python(
      "echo 'loading'\necho '{\"not\": \"the row\"}'\n"
      "echo '{\"backend\": \"python[slots]\", \"batch\": 16, \"ms_per_step\": 0.5, \"min_ms_per_step\": 0.49, "
      "\"max_ms_per_step\": 0.52}'"));
  const PythonRowResult r = run_python_row(req);
  ASSERT_TRUE(r.ran) << r.why_not;
  EXPECT_DOUBLE_EQ(r.median_ms, 0.5);
  EXPECT_DOUBLE_EQ(r.min_ms, 0.49);
  EXPECT_DOUBLE_EQ(r.max_ms, 0.52);
  EXPECT_EQ(recorded_args(), "-m\nswapffn.bench_row\n--model\n" + req.model +
                                 "\n--backend\nfused\n--kernels\nup=bn256_st4_sk1_mc1_p\n--batches\n16\n--tokens\n8\n"
                                 "--warmup\n1\n--repeats\n3\n");
}

TEST_F(PythonRow, EveryWayOfGivingNoRowComesBackAsAReason) {
  EXPECT_EQ(run_python_row(request(fake_python("echo '{\"unavailable\": \"torch is not installed\"}'"))).why_not,
            "torch is not installed");
  const PythonRowResult failed = run_python_row(request(fake_python("echo 'Traceback' >&2\nexit 1")));
  EXPECT_FALSE(failed.ran);
  EXPECT_NE(failed.why_not.find("gave no row (exit status 1"), std::string::npos) << failed.why_not;
  const PythonRowResult no_time = run_python_row(request(fake_python("echo '{\"ms_per_step\": 0}'")));
  EXPECT_FALSE(no_time.ran);
  const std::string missing = (dir / "no-such-python").string();
  const PythonRowResult absent = run_python_row(request(missing));
  EXPECT_FALSE(absent.ran);
  EXPECT_EQ(absent.why_not, missing + " not found");
}

TEST_F(PythonRow, InterpreterIsSwapffnPythonOrPython3) {
  const char* before = std::getenv("SWAPFFN_PYTHON");
  const std::string saved = before ? before : "";
  ASSERT_EQ(unsetenv("SWAPFFN_PYTHON"), 0);
  EXPECT_EQ(python_interpreter(), "python3");
  ASSERT_EQ(setenv("SWAPFFN_PYTHON", "/opt/py/bin/python", 1), 0);
  EXPECT_EQ(python_interpreter(), "/opt/py/bin/python");
  if (before)
    setenv("SWAPFFN_PYTHON", saved.c_str(), 1);
  else
    unsetenv("SWAPFFN_PYTHON");
}

}  // namespace
}  // namespace swapffn

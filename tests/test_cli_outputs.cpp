// The `swapffn` command line and the files it writes: every output path is checked before any work
// starts, a killed write leaves nothing behind, and a state file is used only with the model it
// belongs to unless --allow-foreign-state says otherwise.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <random>
#include <string>

#include "cli_test_util.hpp"
#include "swapffn/safetensors.hpp"
#include "swapffn/state.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {
namespace {

using testing::Cli;
using testing::Result;
namespace fs = std::filesystem;

std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

// An output that names an input would destroy it: refused before any work, the input unchanged.
TEST_F(Cli, AnOutputOverAnInputIsRefused) {
  const std::string m = path("tiny.safetensors"), s = path("s.safetensors");
  ASSERT_EQ(cli("init --config tiny --out " + m).code, 0);
  ASSERT_EQ(cli("run --model " + m + " --batch 1 --tokens 1 --state-out " + s).code, 0);
  fs::create_symlink(m, path("link.safetensors"));
  const std::string model = slurp(m), state = slurp(s);
  const std::string run = "run --model " + m + " --batch 1 --tokens 1";
  const struct {
    std::string args, what;
  } cases[] = {
      {run + " --state-out " + m, "--state-out " + m + " is the --model file"},
      {run + " --state-out " + path("link.safetensors"), "is the --model file"},
      {run + " --state-out " + dir.string() + "/./tiny.safetensors", "is the --model file"},
      {run + " --dump " + m, "--dump " + m + " is the --model file"},
      {"run --model " + m + " --state-in " + s + " --tokens 1 --dump " + s, "is the --state-in file"},
      {run + " --state-out " + path("t.safetensors") + " --dump " + path("t.safetensors"), "is the --state-out file"},
  };
  for (const auto& c : cases) expect_error(c.args, c.what);
  EXPECT_EQ(slurp(m), model);
  EXPECT_EQ(slurp(s), state);
  EXPECT_FALSE(fs::exists(path("t.safetensors")));
}

// A FIFO as an input file is refused at once (the reader opened it and waited for a writer).
TEST_F(Cli, AFifoAsAnInputIsRefusedWithoutBlocking) {
  const std::string m = path("tiny.safetensors"), fifo = path("fifo");
  ASSERT_EQ(cli("init --config tiny --out " + m).code, 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& args : {"run --model " + fifo, "run --model " + m + " --state-in " + fifo,
                                  "quantize --format fp8 --out " + path("q.safetensors") + " --in " + fifo}) {
    const std::string cmd = "timeout 20 '" + std::string(SWAPFFN_CLI_PATH) + "' " + args + " 2>'" + path("err") + "'";
    const int st = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(st)) << args;
    EXPECT_EQ(WEXITSTATUS(st), 1) << args << " (124: it blocked)\nstderr: " << slurp(path("err"));
    EXPECT_NE(slurp(path("err")).find("not a regular file (a FIFO)"), std::string::npos) << slurp(path("err"));
  }
}

// Each command would decode, build a model or time a bench before writing; a path it cannot write
// is refused first, so nothing is printed but the one error line.
TEST_F(Cli, OutputPathsAreCheckedBeforeAnyWork) {
  const std::string m = path("tiny.safetensors");
  ASSERT_EQ(cli("init --config tiny --out " + m).code, 0);
  const std::string missing = path("no_such_dir") + "/out.safetensors";
  const std::string run = "run --model " + m + " --batch 2 --tokens 3";
  const struct {
    std::string args, what;
  } cases[] = {
      {run + " --state-out " + missing, "does not exist"},
      {run + " --dump " + missing, "does not exist"},
      {run + " --state-out " + path("s.safetensors") + " --dump " + dir.string(), "is a directory"},
      {"init --config tiny --out " + missing, "does not exist"},
      {"quantize --in " + m + " --format fp8 --out " + missing, "does not exist"},
      {"bench --config tiny --backends reference --batches 1 --tokens 1 --warmup 0 --repeats 1 --json " + missing,
       "does not exist"},
  };
  for (const auto& c : cases) {
    const Result r = cli(c.args);
    EXPECT_EQ(r.code, 1) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(lines(r.err), 1u) << c.args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(c.what), std::string::npos) << c.args << "\nstderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << "\nstdout: " << r.out;  // no decode, no bench
  }
  EXPECT_FALSE(fs::exists(path("s.safetensors")));
}

// A write killed in the middle (SIGXFSZ at the file size limit) leaves the old file as it was and
// no temporary file beside it.
TEST_F(Cli, KilledWriteLeavesTheOldFileAndNothingElse) {
  const std::string m = path("m.safetensors");
  ASSERT_EQ(cli("init --config tiny --seed 1 --out " + m).code, 0);
  const std::string before = slurp(m);
  ASSERT_GT(before.size(), 64u * 1024);
  fs::remove(path("out"));
  fs::remove(path("err"));
  const std::string cmd = "ulimit -c 0; ulimit -f 64; exec '" + std::string(SWAPFFN_CLI_PATH) +
                          "' init --config tiny --seed 2 --out '" + m + "' >/dev/null 2>&1";
  const int st = std::system(cmd.c_str());
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGXFSZ) << "status " << st;
  EXPECT_EQ(slurp(m), before);
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path().filename());
  EXPECT_EQ(entries, std::vector<std::string>{"m.safetensors"});
}

class ForeignState : public Cli {
 protected:
  void SetUp() override {
    Cli::SetUp();
    // The paths lie in the test's own directory, known only after Cli::SetUp (tests run in parallel).
    a = path("a.safetensors");
    b = path("b.safetensors");
    s = path("s.safetensors");
    const uint64_t seed = std::random_device{}();
    ASSERT_EQ(cli("init --config tiny --seed " + std::to_string(seed) + " --out " + a).code, 0);
    ASSERT_EQ(cli("init --config tiny --seed " + std::to_string(seed + 1) + " --out " + b).code, 0);
    fa = Weights::load(a).fingerprint();
    fb = Weights::load(b).fingerprint();
    ASSERT_NE(fa, fb) << "seed " << seed;
  }
  std::string a, b, s;
  uint64_t fa = 0, fb = 0;
};

// A state saved by model a, continued with model b of the same shapes (another seed): refused
// naming both fingerprints and b's path; accepted with a warning under --allow-foreign-state.
TEST_F(ForeignState, IsRefusedNamingBothModelsUnlessAllowed) {
  Result r = cli("run --model " + a + " --batch 2 --tokens 2 --state-out " + s);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(State::load(s, fa, a), State::load(s));

  r = cli("run --model " + b + " --tokens 1 --state-in " + s);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  for (const std::string& what : {s, hex(fa), hex(fb), b, std::string("--allow-foreign-state")})
    EXPECT_NE(r.err.find(what), std::string::npos) << what << "\nstderr: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;

  r = cli("run --model " + b + " --tokens 1 --state-in " + s + " --allow-foreign-state");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("swapffn: warning: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(hex(fa)), std::string::npos) << r.err;

  r = cli("run --model " + a + " --tokens 1 --state-in " + s + " --state-out " + s);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

// A state file from before fingerprints: refused for any model, usable with --allow-foreign-state.
TEST_F(ForeignState, WithoutAFingerprintIsRefusedUnlessAllowed) {
  const State st = State::random(Weights::load(a).cfg, 2, std::random_device{}());
  safetensors::Writer wr;
  wr.add_bf16("ram", {st.batch, st.cores, 4, st.d_model}, st.ram);
  wr.add_u8("stream_map", {st.batch, st.cores}, st.stream_map);
  wr.write(s);
  Result r = cli("run --model " + a + " --tokens 1 --state-in " + s);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("records no model fingerprint"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(hex(fa)), std::string::npos) << r.err;
  r = cli("run --model " + a + " --tokens 1 --state-in " + s + " --allow-foreign-state --state-out " + s);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  r = cli("run --model " + a + " --tokens 1 --state-in " + s);  // saved again: now it records a
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
}  // namespace swapffn

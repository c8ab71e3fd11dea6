// The `swapffn` command line, run as a separate process: init / run / check round trip on the tiny
// config, and errors as one line on stderr with a non-zero exit.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "swapffn/device.hpp"
#include "swapffn/dump.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/random.hpp"
#include "swapffn/weights.hpp"
#include "cli_test_util.hpp"

namespace swapffn {
namespace {

using testing::Cli;
using testing::line_with;
using testing::Result;
namespace fs = std::filesystem;

TEST_F(Cli, InitRunCheckRoundTrip) {
  const std::string m = path("tiny.safetensors");
  Result r = cli("init --config tiny --seed 3 --out " + m);
  ASSERT_EQ(r.code, 0) << r.err;
  const Weights w = Weights::load(m);
  EXPECT_EQ(w.cfg, Config::preset("tiny"));

  const std::string run_args = "run --model " + m + " --backend reference --batch 2 --tokens 3 --seed 5";
  r = cli(run_args + " --threads 2 --state-out " + path("s.safetensors") + " --dump " + path("d.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("tok/s"), std::string::npos) << r.out;
  const std::string checksum = line_with(r.out, "checksum");
  ASSERT_FALSE(checksum.empty()) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;  // no progress bar: stderr is not a terminal

  // Same arguments, another process: bitwise the same results.
  r = cli(run_args + " --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(line_with(r.out, "checksum"), checksum);

  // The dump holds what an in-process run of the same inputs gives.
  const Dump d = read_dump(path("d.safetensors"));
  ASSERT_EQ(d.tokens, 3);
  ASSERT_EQ(d.batch, 2);
  EXPECT_EQ(d.x, decode_inputs(5, 3, 2, w.cfg.d_model));
  EXPECT_FALSE(d.initial_state.has_value());
  auto eng = make_engine("reference", w);
  State st = State::init(w.cfg, 2);
  std::vector<float> delta(d.x.size());
  std::vector<Trace> traces;
  eng->decode(d.x.data(), delta.data(), 3, st, &traces);
  EXPECT_EQ(d.delta, delta);
  EXPECT_EQ(d.traces(), traces);
  EXPECT_EQ(d.final_state, st);
  EXPECT_EQ(State::load(path("s.safetensors")), st);

  // Continue from the saved state: batch comes from the state file; the dump records ram0.
  r = cli("run --model " + m + " --backend reference --tokens 1 --state-in " + path("s.safetensors") + " --dump " +
          path("d2.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  const Dump d2 = read_dump(path("d2.safetensors"));
  EXPECT_EQ(d2.batch, 2);
  ASSERT_TRUE(d2.initial_state.has_value());
  EXPECT_EQ(*d2.initial_state, st);

  r = cli("check --model " + m + " --backend reference --batch 2 --tokens 2");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("decisions checked"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

// Kernel choices (--kernels, --tune) exist only in the fused backend: any other backend refuses
// them rather than running without them.
// run's default backend is "auto": what the registry picks here, said on stdout with the results.
TEST_F(Cli, RunPicksTheAutoBackendAndSaysWhich) {
  const std::string m = path("tiny.safetensors");
  ASSERT_EQ(cli("init --config tiny --seed 3 --out " + m).code, 0);
  const std::string picked = resolve_backend(kAutoBackend, query_gpu()).name;
  const Result r = cli("run --model " + m + " --tokens 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("backend auto: " + picked), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("with backend " + picked + " "), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
  expect_error("run --model " + m + " --backend automatic", "unknown backend 'automatic'");
}

TEST_F(Cli, KernelChoicesAreRefusedOutsideTheFusedBackend) {
  const std::string m = path("tiny.safetensors");
  ASSERT_EQ(cli("init --config tiny --out " + m).code, 0);
  const std::string cache = path("tune.json");
  std::ofstream(cache) << "{}";
  expect_error("run --model " + m + " --backend reference --kernels up=bn256_st4_sk1_mc1",
               "kernel choices (up=bn256_st4_sk1_mc1) apply to the fused backends only, not 'reference'");
  expect_error("run --model " + m + " --backend unfused --kernels groups=3", "apply to the fused backends only");
  expect_error("run --model " + m + " --backend reference --kernels up=bn128", "no such dual GEMM tile");
  expect_error("run --model " + m + " --backend reference --tune " + cache,
               "--tune applies to the fused backend only, not 'reference'");
  expect_error("check --model " + m + " --backend reference --tune " + cache, "applies to the fused backend only");
  expect_error("bench --config tiny --backends reference --tune " + cache,
               "--tune applies to the fused backend, which this bench does not run");
  expect_error("bench --config tiny --backends reference --fp8-kernels fp8up=sm90",
               "--fp8-kernels applies to the fused-fp8 backend, which this bench does not run");
}


TEST_F(Cli, InitAppliesSettings) {
  const std::string m = path("m.safetensors");
  const Result r = cli("init --config tiny --set d_model=96 --set n_events=1 --out " + m);
  ASSERT_EQ(r.code, 0) << r.err;
  const Weights w = Weights::load(m);
  EXPECT_EQ(w.cfg.d_model, 96);
  EXPECT_EQ(w.cfg.n_events, 1);
  EXPECT_EQ(w.cfg.d_ff, Config::preset("tiny").d_ff);
}

TEST_F(Cli, ErrorsAreOneLineAndNonZero) {
  const std::string m = path("tiny.safetensors");
  ASSERT_EQ(cli("init --config tiny --out " + m).code, 0);
  expect_error("run --model " + path("missing.safetensors"), "missing.safetensors");
  expect_error("run --model " + m + " --backend nope", "unknown backend 'nope'");
  expect_error("check --model " + m + " --backend nope", "unknown backend 'nope'");
  expect_error("run --model " + m + " --tokens 0", "--tokens");
  expect_error("run --model " + m + " --state-in " + path("missing_state.safetensors"), "missing_state");
  expect_error("init --config tiny --set d_model=abc --out " + path("x.safetensors"), "d_model");
  expect_error("init --config tiny --set nope=1 --out " + path("x.safetensors"), "nope");
  expect_error("init --config tiny --set d_model=0 --out " + path("x.safetensors"), "d_model");
  expect_error("init --config huge --out " + path("x.safetensors"), "huge");
  EXPECT_FALSE(fs::exists(path("x.safetensors")));
  // A model file that is not a safetensors file.
  std::ofstream(path("junk.safetensors")) << "not a model";
  expect_error("run --model " + path("junk.safetensors"), "junk.safetensors");
}

// What the command-line parser refuses is a usage error: exit 2, one line naming the problem and
// where the help is. --help and --version are not errors.
TEST_F(Cli, UsageErrorsExitTwoWithOneLine) {
  const std::string m = path("tiny.safetensors");
  ASSERT_EQ(cli("init --config tiny --out " + m).code, 0);
  const struct {
    std::string args, what, help;
  } cases[] = {
      {"", "subcommand", "'swapffn --help'"},
      {"frobnicate", "frobnicate", "'swapffn --help'"},
      {"run --model " + m + " --no-such-flag", "--no-such-flag", "'swapffn run --help'"},
      {"run --model " + m + " --batch abc", "abc", "'swapffn run --help'"},
      {"run --batch 2", "--model", "'swapffn run --help'"},
      {"init --config tiny --out", "--out", "'swapffn init --help'"},
  };
  for (const auto& c : cases) {
    const Result r = cli(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(r.err.rfind("swapffn: usage error: ", 0), 0u) << c.args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(c.what), std::string::npos) << c.args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(c.help), std::string::npos) << c.args << "\nstderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << "\nstdout: " << r.out;
  }
  for (const std::string args : {"--help", "run --help", "--version"}) {
    const Result r = cli(args);
    EXPECT_EQ(r.code, 0) << args << "\nstderr: " << r.err;
    EXPECT_FALSE(r.out.empty()) << args;
    EXPECT_TRUE(r.err.empty()) << args << "\nstderr: " << r.err;
  }
}

// Every other error exits 1 with one line that speaks of the input, not of our source files.
TEST_F(Cli, RuntimeErrorsExitOneWithoutSourceLocations) {
  const std::string m = path("tiny.safetensors");
  ASSERT_EQ(cli("init --config tiny --out " + m).code, 0);
  std::ofstream(path("junk.safetensors")) << "not a model";
  for (const std::string& args :
       {"run --model " + path("missing.safetensors"), "run --model " + path("junk.safetensors"),
        "run --model " + m + " --backend nope",
        "init --config tiny --set d_model=0 --out " + path("x.safetensors"), "init --config huge --out " + path("x.safetensors"),
        "run --model " + m + " --state-in " + path("junk.safetensors")}) {
    const Result r = cli(args);
    EXPECT_EQ(r.code, 1) << args << "\nstderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\nstderr: " << r.err;
    EXPECT_EQ(r.err.rfind("swapffn: error: ", 0), 0u) << args << "\nstderr: " << r.err;
    for (const char* location : {"src/", "apps/", "include/", ".cpp:", ".hpp:", ".cu:"})
      EXPECT_EQ(r.err.find(location), std::string::npos) << args << "\nstderr: " << r.err;
  }
}

// Without a usable Hopper GPU (no CUDA build, no driver, no GPU, another architecture) the GPU
// backends refuse in one plain sentence, never with the CUDA runtime's error names.
TEST_F(Cli, GpuBackendsWithoutAHopperGpuSaySoPlainly) {
  const GpuInfo gpu = query_gpu();
  if (gpu.is_hopper()) GTEST_SKIP() << "this machine has a Hopper GPU";
  const std::string why = gpu.why_not_hopper();
  ASSERT_FALSE(why.empty());
  EXPECT_EQ(why.find("insufficient"), std::string::npos) << why;
  const std::string m = path("tiny.safetensors");
  ASSERT_EQ(cli("init --config tiny --out " + m).code, 0);
#ifdef SWAPFFN_WITH_CUDA
  const std::string expected = why;
#else
  const std::string expected = "needs a CUDA build";
#endif
  for (const char* backend : {"unfused", "fused"}) {
    for (const std::string command : {"run", "check"}) {
      const std::string args = command + " --model " + m + " --batch 1 --tokens 1 --backend " + backend;
      const Result r = cli(args);
      EXPECT_EQ(r.code, 1) << args << "\nstderr: " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\nstderr: " << r.err;
      EXPECT_NE(r.err.find("backend '" + std::string(backend) + "' needs"), std::string::npos) << args << "\n" << r.err;
      EXPECT_NE(r.err.find(expected), std::string::npos) << args << "\nstderr: " << r.err;
      for (const char* raw : {"cudaError", "insufficient", "src/", ".cu:"})
        EXPECT_EQ(r.err.find(raw), std::string::npos) << args << "\nstderr: " << r.err;
    }
  }
  const Result r = cli("info");
  ASSERT_EQ(r.code, 0) << r.err;
  if (!gpu.present) {
    EXPECT_NE(line_with(r.out, "GPU: none (" + why + ")"), "") << r.out;
  }
}

TEST_F(Cli, Info) {
  Result r = cli("info");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(SWAPFFN_VERSION), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU"), std::string::npos) << r.out;
#ifdef SWAPFFN_WITH_CUDA
  const bool cuda = true;
#else
  const bool cuda = false;
#endif
  EXPECT_NE(r.out.find(cuda ? "CUDA backends on" : "CUDA backends off"), std::string::npos) << r.out;
  r = cli("info --has-gpu");
  if (cuda && query_gpu().is_hopper()) {
    EXPECT_EQ(r.code, 0) << r.err;
  } else {
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("no usable GPU"), std::string::npos) << r.err;
  }
}


// `bench` of the CPU reference on tiny: one row per batch size with a positive time; no floor GEMM
// and no anchor (both are GPU measurements, taken only beside GPU backends), no matched floor.
TEST_F(Cli, BenchReferenceRowsHaveTimesAndNoFloor) {
  const std::string json = path("bench.json");
  const Result r = cli("bench --config tiny --backends reference --batches 1,2 --tokens 1 --warmup 0 --repeats 1 --json " +
                       json);
  expect_error("bench --config tiny --backends reference --cooldown=-1", "--cooldown must be 0 to 600 seconds");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(j["rows"].size(), 2u) << j.dump();
  EXPECT_FALSE(j.contains("gemms_alone"));  // the anchor is timed only beside GPU backends
  const double peak = j["peak_tflops"].get<double>();
  EXPECT_EQ(peak, 0.0);
  for (size_t i = 0; i < 2; ++i) {
    const auto& row = j["rows"][i];
    EXPECT_EQ(row["backend"], "reference");
    EXPECT_EQ(row["batch"], int64_t(i + 1));
    EXPECT_GT(row["ms_per_step"].get<double>(), 0.0);
    const double tflops = row["tflops"].get<double>();
    EXPECT_NEAR(row["pct_of_floor"].get<double>(), peak > 0 ? 100 * tflops / peak : 0.0, 1e-12) << row;
    EXPECT_EQ(row["matched_floor_tflops"].get<double>(), 0.0);
    EXPECT_EQ(row["pct_of_matched_floor"].get<double>(), 0.0);
    EXPECT_TRUE(row["telemetry"].is_null()) << row;  // host points have no GPU telemetry
    EXPECT_TRUE(row["matched_floor_telemetry"].is_null()) << row;
  }
}


// `bench --python` times the fused slot step through the Python API: without the fused backend it
// says so in one line and benches the rest.
TEST_F(Cli, BenchPythonRowWithoutFusedIsSkippedInOneLine) {
  const std::string json = path("bench.json");
  const Result r = cli("bench --config tiny --backends reference --batches 1 --tokens 1 --warmup 0 --repeats 1 --python "
                       "--json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(line_with(r.out, "skipped: python").find("the fused backend's slot step"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(j["rows"].size(), 1u) << j.dump();
  EXPECT_NE(j["python_unavailable"].get<std::string>().find("fused"), std::string::npos) << j.dump();
}

// `bench --fp8-headroom` times cuBLASLt's fp8 GEMMs beside the GPU backends: with none it says so in
// one line, adds no row, and benches the rest.
TEST_F(Cli, BenchFp8HeadroomWithoutAGpuBackendIsSkippedInOneLine) {
  const std::string json = path("bench.json");
  const Result r = cli("bench --config tiny --backends reference --batches 1 --tokens 1 --warmup 0 --repeats 1 "
                       "--fp8-headroom --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(line_with(r.out, "skipped: --fp8-headroom").find("on a GPU"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(j["rows"].size(), 1u) << j.dump();
  EXPECT_EQ(j["rows"][0]["backend"], "reference");
  EXPECT_FALSE(j.contains("fp8_headroom"));
}

}  // namespace
}  // namespace swapffn

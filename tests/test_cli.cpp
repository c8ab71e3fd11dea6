// The `swapffn` command line, run as a separate process: init / run / check round trip on the tiny
// config, and errors as one line on stderr with a non-zero exit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "swapffn/device.hpp"
#include "swapffn/dump.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/random.hpp"
#include "swapffn/weights.hpp"
#include "gpu_backend_test_util.hpp"

namespace swapffn {
namespace {

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

std::string line_with(const std::string& text, const std::string& key) {
  std::istringstream s(text);
  for (std::string l; std::getline(s, l);)
    if (l.find(key) != std::string::npos) return l;
  return "";
}

TEST_F(Cli, InitRunCheckRoundTrip) {
  const std::string m = path("tiny.safetensors");
  Result r = cli("init --config tiny --seed 3 --out " + m);
  ASSERT_EQ(r.code, 0) << r.err;
  const Weights w = Weights::load(m);
  EXPECT_EQ(w.cfg, Config::preset("tiny"));

  const std::string run_args = "run --model " + m + " --batch 2 --tokens 3 --seed 5";
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
  r = cli("run --model " + m + " --tokens 1 --state-in " + path("s.safetensors") + " --dump " + path("d2.safetensors"));
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

// Kernel choices (--kernel-config, --tune) exist only in the fused backend: any other backend refuses
// them rather than running without them.
TEST_F(Cli, KernelChoicesAreRefusedOutsideTheFusedBackend) {
  const std::string m = path("tiny.safetensors");
  ASSERT_EQ(cli("init --config tiny --out " + m).code, 0);
  const std::string cache = path("tune.json");
  std::ofstream(cache) << "{}";
  expect_error("run --model " + m + " --backend reference --kernel-config up=bn256_st4_sk1_mc1",
               "a kernel config ('up=bn256_st4_sk1_mc1') applies to the fused backend only, not 'reference'");
  expect_error("run --model " + m + " --backend reference --tune " + cache,
               "a tuning cache (" + cache + ") applies to the fused backend only, not 'reference'");
  expect_error("check --model " + m + " --backend reference --tune " + cache, "applies to the fused backend only");
  expect_error("bench --config tiny --backends reference --tune " + cache,
               "--tune applies to the fused backend, which this bench does not run");
}

// `tune` writes a cache that run, check and bench take with --tune; a cache that is not one is refused
// with its name and the reason.
TEST_F(Cli, TuneWritesACacheThatTheFusedBackendRuns) {
  SKIP_WITHOUT_HOPPER();
  const std::string m = path("tiny.safetensors"), cache = path("tune.json");
  ASSERT_EQ(cli("init --config tiny --seed 2 --out " + m).code, 0);
  Result r = cli("tune --model " + m + " --batches 1,2 --tokens 1 --repeats 1 --out " + cache);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("chosen: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("anchor_gate "), std::string::npos) << r.out;  // the anchor's GEMMs beside ours
  EXPECT_NE(r.out.find("anchor_down "), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(slurp(cache));
  EXPECT_EQ(j["d_model"].get<int64_t>(), 128);
  EXPECT_EQ(j["d_ff"].get<int64_t>(), 384);
  ASSERT_EQ(j["entries"].size(), 2u) << j.dump();
  for (size_t i = 0; i < 2; ++i) {
    const auto& e = j["entries"][i];
    EXPECT_EQ(e["batch"].get<int64_t>(), int64_t(i + 1)) << e;
    EXPECT_GT(e["ms_per_step"].get<double>(), 0.0) << e;
    EXPECT_TRUE(e.contains("sm_clock_mhz")) << e;  // 0 where NVML is unavailable
    // One summation order for every batch size (batch invariance): the same router at both.
    EXPECT_EQ(e["router"], j["entries"][0]["router"]) << j.dump();
  }
  r = cli("check --model " + m + " --backend fused --batch 2 --tokens 2 --tune " + cache);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;

  const std::string broken = path("broken.json");
  std::ofstream(broken) << "{";
  expect_error("run --model " + m + " --backend fused --tune " + broken, "tuning cache " + broken + " is not valid JSON");
  expect_error("run --model " + m + " --backend fused --tune " + path("missing.json"),
               "cannot open tuning cache " + path("missing.json"));
  expect_error("bench --config tiny --backends fused --batches 1 --tune " + broken,
               "tuning cache " + broken + " is not valid JSON");
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

// `nvfp4 bench --no-search` times each shape's default config alone: one candidate line per shape
// on stderr, the best config reported is the default, and the result still matches cuBLAS.
TEST_F(Cli, Nvfp4BenchWithoutSearchTimesTheDefaultAlone) {
  SKIP_WITHOUT_HOPPER();  // without CUDA in the build, query_gpu() finds no GPU
  const std::string json = path("bench.json");
  const Result r = cli("nvfp4 bench --op dual --shape 256x512x512 --shape 128x384x768 --no-search --reps 3 --json " + json);
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

// `bench` of the CPU reference on tiny: one row per batch size with a positive time; a "% floor"
// only against a floor measured on a GPU (none without one), and never a matched floor (host points).
TEST_F(Cli, BenchReferenceRowsHaveTimesAndNoFloor) {
  const std::string json = path("bench.json");
  const Result r = cli("bench --config tiny --backends reference --batches 1,2 --tokens 1 --warmup 0 --repeats 1 --json " +
                       json);
  expect_error("bench --config tiny --backends reference --cooldown=-1", "--cooldown must be 0 to 600 seconds");
  expect_error("bench --config tiny --backends reference --telemetry-ms=-1", "--telemetry-ms must be 0 (off) to 1000");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(j["rows"].size(), 2u) << j.dump();
  EXPECT_FALSE(j.contains("gemms_alone"));  // the anchor is timed only beside GPU backends
  const double peak = j["peak_tflops"].get<double>();
  EXPECT_EQ(peak > 0, query_gpu().present);
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

// On a GPU the points run batch by batch (the anchor, then every backend at one batch size
// back to back); "% floor" is against the floor measured at the start, and each row also has its own
// matched floor and its ratio to the anchor.
TEST_F(Cli, BenchRunsBatchByBatchWithAMatchedFloorPerPoint) {
  SKIP_WITHOUT_HOPPER();  // without CUDA in the build, query_gpu() finds no GPU
  const std::string json = path("bench.json");
  const Result r = cli("bench --config tiny --backends unfused,fused --batches 1,2 --tokens 2 --warmup 1 --repeats 3 "
                       "--peak-n 2048 --cooldown 0.1 --breakdown --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  // At each batch size the anchor (cuBLAS's FFN GEMMs alone) first, then the backends.
  ASSERT_EQ(j["rows"].size(), 6u) << j.dump();
  const char* order[6][2] = {{"cublas-ffn-gemms", "1"}, {"unfused", "1"}, {"fused", "1"},
                             {"cublas-ffn-gemms", "2"}, {"unfused", "2"}, {"fused", "2"}};
  for (size_t i = 0; i < 6; ++i) {
    const auto& row = j["rows"][i];
    EXPECT_EQ(row["backend"], order[i][0]) << row;
    EXPECT_EQ(row["batch"], std::stoll(order[i][1])) << row;
    const double matched = row["matched_floor_tflops"].get<double>(), tflops = row["tflops"].get<double>();
    const double peak = j["peak_tflops"].get<double>();
    EXPECT_GT(matched, 0.0) << row;
    EXPECT_GT(peak, 0.0);
    EXPECT_NEAR(row["pct_of_floor"].get<double>(), 100 * tflops / peak, 1e-9 * (1 + tflops)) << row;
    EXPECT_NEAR(row["pct_of_matched_floor"].get<double>(), 100 * tflops / matched, 1e-9 * (1 + tflops)) << row;
    EXPECT_GE(row["spread"].get<double>(), 0.0) << row;
    // NVML telemetry over the point and over its matched floor; "per clock" rescales % matched by the
    // floor's clock over the point's.
    const auto& tp = row["telemetry"];
    const auto& tf = row["matched_floor_telemetry"];
    ASSERT_TRUE(tp.is_object() && tf.is_object()) << row;
    EXPECT_GE(tp["samples"].get<int>(), 1) << row;
    EXPECT_GT(tp["sm_clock_mhz_median"].get<double>(), 0.0) << row;
    EXPECT_GT(tf["sm_clock_mhz_median"].get<double>(), 0.0) << row;
    EXPECT_NEAR(row["pct_of_matched_floor_per_clock"].get<double>(),
                row["pct_of_matched_floor"].get<double>() * tf["sm_clock_mhz_median"].get<double>() /
                    tp["sm_clock_mhz_median"].get<double>(),
                1e-9 * (1 + tflops))
        << row;
    // "vs GEMMs": the anchor's time at this batch size over the row's.
    const double anchor_ms = j["rows"][i - i % 3]["ms_per_step"].get<double>();
    EXPECT_NEAR(row["speedup_vs_gemms_alone"].get<double>(), anchor_ms / row["ms_per_step"].get<double>(), 1e-9) << row;
  }
  // The anchor's rate counts the FFN's GEMM FLOPs only: tiny has E = 3, k_ffn = 2, so 18 GEMMs per step
  // of 2 * C * D * F * 3 FLOPs per FFN step and sequence (C = 40, D = 128, F = 384).
  const double ffn_flops = 3 * 2 * 3 * 2.0 * 40 * 128 * 384;
  EXPECT_NEAR(j["rows"][0]["tflops"].get<double>(), ffn_flops / (j["rows"][0]["ms_per_step"].get<double>() * 1e-3) / 1e12,
              1e-9);
  EXPECT_EQ(j["gemms_alone"]["gemms_per_step"].get<int>(), 18) << j["gemms_alone"];
  for (const char* b : {"1", "2"})
    EXPECT_NE(j["gemms_alone"]["algorithms"][b].get<std::string>().find("gate/up algo="), std::string::npos)
        << j["gemms_alone"];
  EXPECT_NE(r.out.find("cublas-ffn-gemms: the issue's anchor"), std::string::npos) << r.out;
  EXPECT_NE(line_with(r.out, "backend              B").find("vs GEMMs"), std::string::npos) << r.out;
  EXPECT_GT(j["floor_telemetry"]["samples"].get<int>(), 0) << j["floor_telemetry"];
  EXPECT_EQ(j["telemetry_period_ms"].get<double>(), 5.0);
  EXPECT_FALSE(j.contains("telemetry_unavailable")) << j["telemetry_unavailable"];
  EXPECT_FALSE(j.contains("power_unavailable")) << j["power_unavailable"];  // an H100/H200 reads its power
  EXPECT_NE(r.out.find("GPU telemetry over each measurement's timed part"), std::string::npos) << r.out;
  // The breakdown gives the FFN GEMM phase's rate and the clock of its steps.
  const std::string b = line_with(r.out, "fused      B=2");
  EXPECT_NE(b.find("[FFN GEMMs "), std::string::npos) << r.out;
  EXPECT_NE(b.find(" TF/s]  SM clock "), std::string::npos) << r.out;
  EXPECT_GT(j["rows"][2]["speedup_vs_unfused"].get<double>(), 0.0);  // against the unfused row of its batch
}

// Without NVML the bench still times every point, says why it has no telemetry, and writes none.
TEST_F(Cli, BenchWithoutNvmlSaysWhyAndStillTimes) {
  SKIP_WITHOUT_HOPPER();
  const std::string json = path("bench.json");
  ASSERT_EQ(setenv("SWAPFFN_NVML_LIBRARY", "libswapffn-no-such-nvml.so", 1), 0);
  const Result r = cli("bench --config tiny --backends fused --batches 1 --tokens 1 --warmup 0 --repeats 1 --peak-n 1024 "
                       "--cooldown 0 --no-gemms-alone --json " + json);
  unsetenv("SWAPFFN_NVML_LIBRARY");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU telemetry: unavailable: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("libswapffn-no-such-nvml.so"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("GPU telemetry over"), std::string::npos) << r.out;  // no table of readings
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_NE(j["telemetry_unavailable"].get<std::string>().find("libswapffn-no-such-nvml.so"), std::string::npos);
  EXPECT_TRUE(j["floor_telemetry"].is_null());
  ASSERT_EQ(j["rows"].size(), 1u);  // --no-gemms-alone: no anchor row
  EXPECT_FALSE(j.contains("gemms_alone"));
  EXPECT_EQ(j["rows"][0]["speedup_vs_gemms_alone"].get<double>(), 0.0);
  EXPECT_GT(j["rows"][0]["ms_per_step"].get<double>(), 0.0);
  EXPECT_TRUE(j["rows"][0]["telemetry"].is_null());
  EXPECT_EQ(j["rows"][0]["pct_of_matched_floor_per_clock"].get<double>(), 0.0);
}

}  // namespace
}  // namespace swapffn

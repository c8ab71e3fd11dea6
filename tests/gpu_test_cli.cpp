// The `swapffn` command line on a Hopper GPU, run as a separate process: tune, bench with its
// anchor, matched floors and Python row.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"

namespace swapffn {
namespace {

using testing::Cli;
using testing::line_with;
using testing::Result;

// `tune` writes a cache that run, check and bench take with --tune; a cache that is not one is refused
// with its name and the reason.
TEST_F(Cli, TuneWritesACacheThatTheFusedBackendRuns) {
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
               "tuning cache " + path("missing.json") + ": cannot open");
  expect_error("bench --config tiny --backends fused --batches 1 --tune " + broken,
               "tuning cache " + broken + " is not valid JSON");
}

// On a GPU the points run batch by batch (the anchor, then every backend at one batch size
// back to back); "% floor" is against the floor measured at the start, and each row also has its own
// matched floor and its ratio to the anchor.
TEST_F(Cli, BenchRunsBatchByBatchWithAMatchedFloorPerPoint) {
  const std::string json = path("bench.json");
  const Result r = cli("bench --config tiny --backends unfused,fused --batches 1,2 --tokens 2 --warmup 1 --repeats 3 "
                       "--cooldown 0.1 --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  // At each batch size the anchor (cuBLAS's FFN GEMMs alone) first, then the backends.
  // The fused row is followed by the same step through a state pool (fused[slots]).
  ASSERT_EQ(j["rows"].size(), 8u) << j.dump();
  const char* order[8][2] = {{"cublas-ffn-gemms", "1"}, {"unfused", "1"}, {"fused", "1"}, {"fused[slots]", "1"},
                             {"cublas-ffn-gemms", "2"}, {"unfused", "2"}, {"fused", "2"}, {"fused[slots]", "2"}};
  for (size_t i = 0; i < 8; ++i) {
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
    const double anchor_ms = j["rows"][i - i % 4]["ms_per_step"].get<double>();
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
  EXPECT_NE(r.out.find("cublas-ffn-gemms: cuBLAS's FFN GEMMs alone"), std::string::npos) << r.out;
  EXPECT_NE(line_with(r.out, "backend              B").find("vs GEMMs"), std::string::npos) << r.out;
  EXPECT_GT(j["floor_telemetry"]["samples"].get<int>(), 0) << j["floor_telemetry"];
  EXPECT_EQ(j["telemetry_period_ms"].get<double>(), 5.0);
  EXPECT_FALSE(j.contains("telemetry_unavailable")) << j["telemetry_unavailable"];
  EXPECT_FALSE(j.contains("power_unavailable")) << j["power_unavailable"];  // an H100/H200 reads its power
  EXPECT_NE(r.out.find("GPU telemetry over each timed part"), std::string::npos) << r.out;
  EXPECT_GT(j["rows"][2]["speedup_vs_unfused"].get<double>(), 0.0);  // against the unfused row of its batch
  // The slot row's ratio to the dense step of its batch.
  EXPECT_NEAR(j["rows"][3]["slot_step_over_dense"].get<double>(),
              j["rows"][3]["ms_per_step"].get<double>() / j["rows"][2]["ms_per_step"].get<double>(), 1e-9);
}

// An fp8 backend brings the fp8 anchor (cuBLAS's block-scaled fp8 FFN GEMMs) after the bf16 one; its
// "vs GEMMs" is against the fp8 anchor, and its fp8/bf16 ratio against fused's time in the same run.
// --fp8-kernels pins fused-fp8's choices (here its own up projection kernel).
TEST_F(Cli, BenchSetsTheFp8BackendAgainstTheFp8AnchorAndFused) {
  const std::string json = path("bench.json");
  const Result r = cli("bench --config tiny --backends fused,fused-fp8 --batches 2 --tokens 2 --warmup 1 --repeats 3 "
                       "--cooldown 0 --fp8-kernels fp8up=sm90 --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  // fused-fp8 runs once per scaling of a bf16 model, each against its own anchor.
  ASSERT_EQ(j["rows"].size(), 7u) << j.dump();
  const char* order[7] = {"cublas-ffn-gemms", "cublas-fp8-gemms", "cublas-fp8-rows", "fused",
                          "fused[slots]", "fused-fp8", "fused-fp8[rows]"};
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(j["rows"][i]["backend"], order[i]) << j["rows"][i];
  const auto ms = [&](size_t i) { return j["rows"][i]["ms_per_step"].get<double>(); };
  for (const size_t i : {size_t(5), size_t(6)}) {
    const auto& fp8 = j["rows"][i];
    EXPECT_EQ(fp8["precision"], "fp8");
    EXPECT_NEAR(fp8["speedup_vs_gemms_alone"].get<double>(), ms(i - 4) / ms(i), 1e-9) << fp8;  // its anchor
    EXPECT_NEAR(fp8["fp8_over_bf16"].get<double>(), ms(3) / ms(i), 1e-9) << fp8;
  }
  EXPECT_NEAR(j["rows"][1]["fp8_over_bf16"].get<double>(), ms(0) / ms(1), 1e-9) << j["rows"][1];
  EXPECT_EQ(j["rows"][3]["fp8_over_bf16"].get<double>(), 0.0);  // a bf16 row has no twin
  EXPECT_NEAR(j["rows"][3]["speedup_vs_gemms_alone"].get<double>(), ms(0) / ms(3), 1e-9);
  EXPECT_NE(j["fp8_gemms_alone"]["algorithms"]["2"].get<std::string>().find("gate/up algo="), std::string::npos)
      << j["fp8_gemms_alone"];
  EXPECT_NE(r.out.find("fp8 over bf16"), std::string::npos) << r.out;
  EXPECT_NE(line_with(r.out, "fp8 over bf16").find("fused-fp8 B=2: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flip rate of fused-fp8 vs fused (bf16), per token over 16 tokens at B=4: "), std::string::npos)
      << r.out;
  ASSERT_EQ(j["flip_rate"].size(), 2u) << j.dump();  // one per fp8 row
  for (size_t i = 0; i < 2; ++i) {
    const auto& f = j["flip_rate"][i];
    EXPECT_EQ(f["engine"], order[5 + i]);
    EXPECT_EQ(f["baseline"], "fused");
    ASSERT_EQ(f["per_token"].size(), 16u) << f;
    for (const auto& rate : f["per_token"]) EXPECT_TRUE(rate.get<double>() >= 0 && rate.get<double>() <= 1);
  }
}

// An fp8 model written by `quantize` runs on fused-fp8 end to end: check passes under the fp8
// tolerance and prints the decision flip rate against fused (bf16); run decodes it; the bf16 model
// checks on fused-fp8 too (quantised at load), with its kernel choices.
TEST_F(Cli, Fp8ModelChecksAndRunsOnFusedFp8) {
  const std::string m = path("tiny.safetensors"), q = path("tiny-fp8.safetensors");
  ASSERT_EQ(cli("init --config tiny --seed 5 --out " + m).code, 0);
  ASSERT_EQ(cli("quantize --in " + m + " --out " + q + " --format fp8").code, 0);
  for (const std::string& args : {"--model " + q, "--model " + m + " --kernels groups=2,fp8up=sm90"}) {
    const Result r = cli("check " + args + " --backend fused-fp8 --batch 2 --tokens 2 --flip-tokens 3 --flip-batch 2");
    EXPECT_EQ(r.code, 0) << args << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("(tolerance 0.06)"), std::string::npos) << r.out;  // the fp8 preset's delta bound
    EXPECT_NE(line_with(r.out, "flip rate vs fused (bf16)").find("over 3 tokens at B=2"), std::string::npos) << r.out;
  }
  EXPECT_EQ(cli("run --model " + q + " --backend fused-fp8 --batch 2 --tokens 2").code, 0);
}

// Without NVML the bench still times every point, says why it has no telemetry, and writes none.
TEST_F(Cli, BenchWithoutNvmlSaysWhyAndStillTimes) {
  const std::string json = path("bench.json");
  ASSERT_EQ(setenv("SWAPFFN_NVML_LIBRARY", "libswapffn-no-such-nvml.so", 1), 0);
  const Result r = cli("bench --config tiny --backends fused --batches 1 --tokens 1 --warmup 0 --repeats 1 "
                       "--cooldown 0 --json " + json);
  unsetenv("SWAPFFN_NVML_LIBRARY");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU telemetry: unavailable: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("libswapffn-no-such-nvml.so"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("GPU telemetry over"), std::string::npos) << r.out;  // no table of readings
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_NE(j["telemetry_unavailable"].get<std::string>().find("libswapffn-no-such-nvml.so"), std::string::npos);
  EXPECT_TRUE(j["floor_telemetry"].is_null());
  ASSERT_EQ(j["rows"].size(), 3u);  // the anchor, fused, fused[slots]
  for (const auto& row : j["rows"]) {
    EXPECT_GT(row["ms_per_step"].get<double>(), 0.0) << row;
    EXPECT_TRUE(row["telemetry"].is_null()) << row;
    EXPECT_EQ(row["pct_of_matched_floor_per_clock"].get<double>(), 0.0) << row;
  }
}

// `bench --python` runs `$SWAPFFN_PYTHON -m swapffn.bench_row` at each batch size on a file of the
// bench's weights and prints its row after fused[slots], set against the dense step and the C++ slot
// step. A stand-in interpreter gives the row here (python/tests runs the package's own); one that is
// missing skips the row in one line.
TEST_F(Cli, BenchPythonRowFollowsTheFusedSlotRow) {
  const std::string fake = path("python"), json = path("bench.json");
  std::ofstream(fake) << "#!/bin/sh\n"
                         "while [ $# -gt 0 ]; do case \"$1\" in --model) m=$2;; --batches) b=$2;; esac; shift; done\n"
                         "[ -f \"$m\" ] || { echo '{\"unavailable\": \"no model file\"}'; exit 0; }\n"
                         "echo \"{\\\"backend\\\": \\\"python[slots]\\\", \\\"batch\\\": $b, \\\"ms_per_step\\\": 0.25, "
                         "\\\"min_ms_per_step\\\": 0.25, \\\"max_ms_per_step\\\": 0.25}\"\n";
  chmod(fake.c_str(), 0755);
  const std::string args = "bench --config tiny --backends fused --batches 1,2 --tokens 2 --warmup 1 --repeats 2 "
                           "--cooldown 0 --python --json " + json;
  ASSERT_EQ(setenv("SWAPFFN_PYTHON", fake.c_str(), 1), 0);
  const Result r = cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(j["rows"].size(), 8u) << j.dump();
  for (size_t b = 0; b < 2; ++b) {
    const auto& dense = j["rows"][4 * b + 1];
    const auto& slots = j["rows"][4 * b + 2];
    const auto& py = j["rows"][4 * b + 3];
    EXPECT_EQ(slots["backend"], "fused[slots]");
    EXPECT_EQ(py["backend"], "python[slots]");
    EXPECT_EQ(py["batch"], int64_t(b + 1));
    EXPECT_EQ(py["ms_per_step"].get<double>(), 0.25) << py;
    EXPECT_NEAR(py["slot_step_over_dense"].get<double>(), 0.25 / dense["ms_per_step"].get<double>(), 1e-9) << py;
    EXPECT_NEAR(py["over_cpp_slot_step"].get<double>(), 0.25 / slots["ms_per_step"].get<double>(), 1e-9) << py;
  }
  EXPECT_NE(line_with(r.out, "python[slots] B=1: ").find("the C++ slot step"), std::string::npos) << r.out;

  ASSERT_EQ(setenv("SWAPFFN_PYTHON", path("no-such-python").c_str(), 1), 0);
  const Result missing = cli(args);
  unsetenv("SWAPFFN_PYTHON");
  ASSERT_EQ(missing.code, 0) << missing.err;
  EXPECT_NE(line_with(missing.out, "skipped: python").find("no-such-python not found"), std::string::npos) << missing.out;
  const nlohmann::json jm = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(jm["rows"].size(), 6u) << jm.dump();
}

}  // namespace
}  // namespace swapffn

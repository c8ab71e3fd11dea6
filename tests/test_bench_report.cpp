// The bench's row model and report without a GPU: each row is set against the rows it names (the
// anchor of its precision, its bf16 twin, its dense step, the C++ slot step), and the text and the
// JSON carry those ratios.
#include <gtest/gtest.h>

#include <string>

#include "bench/bench_report.hpp"
#include "bench/bench_rows.hpp"

namespace swapffn::bench {
namespace {

BenchRow timed(BenchRow r, double ms) {
  r.ms = ms;
  return r;
}

BenchResults results() {
  BenchResults res;
  res.floor_tflops = 800;
  res.rows = {timed(anchor_row(kAnchors[0], 4), 1.0),      timed(anchor_row(kAnchors[1], 4), 0.8),
              timed(anchor_row(kAnchors[3], 4), 0.5),      timed(backend_row("unfused", "bf16", 4), 2.0),
              timed(backend_row("fused", "bf16", 4), 1.25), timed(slot_row("fused", 4), 1.3),
              timed(python_row(4), 1.43),                   timed(backend_row("fused-fp8", "fp8", 4), 1.0)};
  res.rows[6].same_process_cpp_ms = 1.1;
  res.anchor_algorithms["cublas-ffn-gemms"]["4"] = "algo a";
  res.anchor_algorithms["cublas-fp8-gemms"]["4"] = "algo b";
  res.anchor_algorithms["cublas-fp8-tensor"]["4"] = "algo c";
  return res;
}

TEST(BenchRows, EachRowNamesWhatItIsSetAgainst) {
  EXPECT_EQ(backend_row("fused", "bf16", 1).vs_gemms, "cublas-ffn-gemms");
  const BenchRow fp8 = backend_row("fused-fp8", "fp8", 1);
  EXPECT_EQ(fp8.vs_gemms, "cublas-fp8-gemms");
  EXPECT_EQ(fp8.bf16_twin, "fused");
  EXPECT_EQ(backend_row("unknown-fp8", "fp8", 1).bf16_twin, "");  // never guessed from the name
  // The rows scaling's row: its own anchor, the same bf16 twin.
  EXPECT_EQ(fp8_row_name("fused-fp8", fp8::Scaling::blocks), "fused-fp8");
  const BenchRow rows = backend_row(fp8_row_name("fused-fp8", fp8::Scaling::rows), "fp8", 1);
  EXPECT_EQ(rows.name, "fused-fp8[rows]");
  EXPECT_EQ(rows.vs_gemms, "cublas-fp8-rows");
  EXPECT_EQ(rows.bf16_twin, "fused");
  EXPECT_EQ(backend_row("unknown-fp8[rows]", "fp8", 1).vs_gemms, "cublas-fp8-gemms");
  const BenchRow headroom = anchor_row(kAnchors[2], 1);
  EXPECT_TRUE(headroom.gemms_alone);
  EXPECT_EQ(headroom.vs_gemms, "cublas-fp8-gemms");
  EXPECT_EQ(headroom.bf16_twin, "cublas-ffn-gemms");
  EXPECT_EQ(slot_row("fused", 1).name, "fused[slots]");
  EXPECT_EQ(slot_row("fused", 1).dense, "fused");
  EXPECT_EQ(python_row(1).cpp_slots, "fused[slots]");
}

TEST(BenchReport, FiguresAreTheRatiosOfTheNamedRows) {
  const BenchResults res = results();
  const Config cfg = Config::preset("default");
  const RowFigures fused = figures(res, res.rows[4], cfg);
  EXPECT_DOUBLE_EQ(fused.vs_gemms, 1.0 / 1.25);
  EXPECT_DOUBLE_EQ(fused.vs_unfused, 2.0 / 1.25);
  EXPECT_DOUBLE_EQ(fused.tok_s, 4 / 1.25e-3);
  EXPECT_DOUBLE_EQ(fused.pct_floor, 100 * cfg.flops_per_token() * 4 / 1.25e-3 / 1e12 / 800);
  const RowFigures fp8 = figures(res, res.rows[7], cfg);
  EXPECT_DOUBLE_EQ(fp8.vs_gemms, 0.8 / 1.0);
  EXPECT_DOUBLE_EQ(fp8.fp8_over_bf16, 1.25);
  const RowFigures anchor = figures(res, res.rows[0], cfg);  // TF/s of the FFN's FLOPs only
  EXPECT_DOUBLE_EQ(anchor.tflops, cfg.ffn_flops_per_token() * 4 / 1e-3 / 1e12);
  EXPECT_DOUBLE_EQ(figures(res, res.rows[5], cfg).slot_over_dense, 1.3 / 1.25);
  const RowFigures py = figures(res, res.rows[6], cfg);
  EXPECT_DOUBLE_EQ(py.over_cpp_slots, 1.43 / 1.3);
  EXPECT_DOUBLE_EQ(py.over_cpp_same_process, 1.43 / 1.1);
  EXPECT_DOUBLE_EQ(figures(res, res.rows[2], cfg).vs_gemms, 0.8 / 0.5);  // headroom: over the recipe's
}

TEST(BenchReport, TextAndJsonCarryTheRowsAndTheirPairs) {
  const BenchResults res = results();
  const Config cfg = Config::preset("default");
  const std::string text = report_text(res, cfg);
  for (const char* s : {"cublas-ffn-gemms: cuBLAS's FFN GEMMs alone", "fp8 over bf16", "fused-fp8 B=4: 1.250x",
                        "fused[slots] B=4: 1.040x", "python[slots] B=4: 1.144x (1.100x the C++ slot step, 1.300x in the same process)"})
    EXPECT_NE(text.find(s), std::string::npos) << s << "\n" << text;
  const BenchRunInfo info{"H100", "1", "2", "abc", "abc", "now", 16, 5, 2, 3};
  const nlohmann::json j = bench_json(res, info, cfg);
  EXPECT_EQ(j["gemms_alone"]["row"], "cublas-ffn-gemms");
  EXPECT_EQ(j["gemms_alone"]["algorithms"]["4"], "algo a");
  EXPECT_EQ(j["fp8_gemms_alone"]["row"], "cublas-fp8-gemms");
  EXPECT_EQ(j["fp8_headroom"]["cublas-fp8-tensor"]["algorithms"]["4"], "algo c");
  EXPECT_FALSE(j["fp8_headroom"].contains("cublas-fp8-rows"));
  ASSERT_EQ(j["rows"].size(), res.rows.size());
  EXPECT_EQ(j["rows"][7]["backend"], "fused-fp8");
  EXPECT_DOUBLE_EQ(j["rows"][7]["fp8_over_bf16"].get<double>(), 1.25);
  EXPECT_TRUE(j["rows"][6].contains("over_cpp_slot_step"));
  EXPECT_FALSE(j["rows"][4].contains("over_cpp_slot_step"));
  EXPECT_EQ(j["tokens"], 16);
  EXPECT_EQ(j["device"], "H100");
}

}  // namespace
}  // namespace swapffn::bench

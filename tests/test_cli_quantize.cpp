// `swapffn quantize` end to end: a bf16 model written as an fp8 one, what it prints, what it
// refuses, and what the other commands do with the result.
#include <gtest/gtest.h>

#include <string>

#include "cli_test_util.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {
namespace {

using testing::Cli;
using testing::line_with;
using testing::Result;
namespace fs = std::filesystem;

TEST_F(Cli, QuantizeWritesTheFp8ModelAndOtherCommandsUseIt) {
  const std::string m = path("tiny.safetensors"), q = path("tiny-fp8.safetensors");
  ASSERT_EQ(cli("init --config tiny --seed 4 --out " + m).code, 0);
  Result r = cli("quantize --in " + m + " --out " + q + " --format fp8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("wrote " + q), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(scaling blocks)"), std::string::npos) << r.out;  // the default
  // Each weight's error under both scalings, the written one marked.
  const size_t rows_at = r.out.find("scaling rows:"), blocks_at = r.out.find("scaling blocks (written):");
  ASSERT_NE(rows_at, std::string::npos) << r.out;
  ASSERT_NE(blocks_at, std::string::npos) << r.out;
  for (const size_t at : {rows_at, blocks_at})
    for (const char* w : {"w1.weight [384, 128]", "w3.weight [384, 128]", "w2.weight [128, 384]"})
      EXPECT_NE(line_with(r.out.substr(at), w).find("relative L2 error"), std::string::npos) << r.out;
  EXPECT_NE(line_with(r.out.substr(rows_at), "w2.weight").find("128 scales"), std::string::npos) << r.out;
  EXPECT_NE(line_with(r.out.substr(blocks_at), "w2.weight").find("3 scales"), std::string::npos) << r.out;

  const Weights original = Weights::load(m), fp8 = Weights::load(q);
  ASSERT_TRUE(fp8.fp8_ffn.has_value());
  const Weights want = original.quantized_fp8(fp8::Scaling::blocks);
  EXPECT_EQ(fp8.fp8_ffn->w2.data, want.fp8_ffn->w2.data);
  EXPECT_EQ(fp8.fingerprint(), want.fingerprint());
  EXPECT_NE(fp8.fingerprint(), original.fingerprint());
  // --scales rows writes the rows recipe.
  const std::string qr = path("tiny-fp8-rows.safetensors");
  r = cli("quantize --in " + m + " --out " + qr + " --format fp8 --scales rows");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("scaling rows (written):"), std::string::npos) << r.out;
  EXPECT_EQ(Weights::load(qr).fingerprint(), original.quantized_fp8(fp8::Scaling::rows).fingerprint());

  // The reference runs it (its dequantised weights) and passes its check; bf16 backends refuse it.
  r = cli("check --model " + q + " --backend reference --batch 2 --tokens 2 --threads 2");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
  EXPECT_EQ(cli("run --model " + q + " --batch 1 --tokens 1 --threads 2").code, 0);
  for (const char* backend : {"fused", "unfused"})
    for (const char* command : {"run", "check"})
      expect_error(std::string(command) + " --model " + q + " --batch 1 --tokens 1 --backend " + backend,
                   "stores its FFN in fp8; backend '" + std::string(backend) +
                       "' runs bf16 models: use backend 'fused-fp8'");
}

TEST_F(Cli, QuantizeRefusals) {
  const std::string m = path("tiny.safetensors"), q = path("q.safetensors");
  ASSERT_EQ(cli("init --config tiny --out " + m).code, 0);
  ASSERT_EQ(cli("quantize --in " + m + " --out " + q + " --format fp8").code, 0);
  expect_error("quantize --in " + q + " --out " + path("qq.safetensors") + " --format fp8",
               "already stores its FFN in fp8");
  expect_error("quantize --in " + m + " --out " + m + " --format fp8", "is the --in file");
  expect_error("quantize --in " + path("missing.safetensors") + " --out " + path("x.safetensors") + " --format fp8",
               "missing.safetensors");
  EXPECT_FALSE(fs::exists(path("qq.safetensors")));
  EXPECT_FALSE(fs::exists(path("x.safetensors")));
  EXPECT_EQ(Weights::load(m).fp8_ffn.has_value(), false);  // the input is as it was
  for (const std::string& args : {"quantize --in " + m + " --out " + path("x.safetensors") + " --format int4",
                                 "quantize --in " + m + " --out " + path("x.safetensors")}) {
    const Result r = cli(args);
    EXPECT_EQ(r.code, 2) << args << "\nstderr: " << r.err;  // a usage error
    EXPECT_NE(r.err.find("--format"), std::string::npos) << r.err;
  }
  const Result bad_scales = cli("quantize --in " + m + " --out " + path("x.safetensors") + " --format fp8 --scales tensor");
  EXPECT_EQ(bad_scales.code, 2) << bad_scales.err;
  EXPECT_NE(bad_scales.err.find("--scales"), std::string::npos) << bad_scales.err;
  EXPECT_FALSE(fs::exists(path("x.safetensors")));
  const Result help = cli("quantize --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("Example:"), std::string::npos) << help.out;
}

}  // namespace
}  // namespace swapffn

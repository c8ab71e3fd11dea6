// swapffn quantize: writes a bf16 model's FFN in fp8 (e4m3, 128x128 block scales; docs/FORMATS.md,
// "fp8 models"), the rest unchanged, and says how far each weight moved.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#include "swapffn/error.hpp"
#include "swapffn/file_output.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::cli {

namespace {
struct QuantizeArgs {
  std::string in, out, format;
};

// One line on a weight's quantisation error: relative L2 over the weight, and the largest error as
// a share of its block's largest magnitude (at most half an e4m3 step at 448, 16/448 = 3.6%).
void print_error(const char* name, const std::vector<bf16>& original, const fp8::BlockScaledWeight& q) {
  double num = 0, den = 0, worst = 0;
  const int64_t bc = fp8::blocks(q.cols);
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) {
      const double w = bf16_to_float(original[size_t(r * q.cols + c)]), e = q.dequant(r, c) - w;
      const double amax = double(q.scale[size_t((r / fp8::kBlock) * bc + c / fp8::kBlock)]) * fp8::kE4m3Max;
      num += e * e;
      den += w * w;
      worst = std::max(worst, std::fabs(e) / amax);
    }
  std::printf("  %s [%lld, %lld], %lld block scales: relative L2 error %.2f%%, max error %.2f%% of its block's amax\n",
              name, static_cast<long long>(q.rows), static_cast<long long>(q.cols),
              static_cast<long long>(q.scale.size()), den > 0 ? 100.0 * std::sqrt(num / den) : 0.0, 100.0 * worst);
}
}  // namespace

void add_quantize_command(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  auto* cmd = add_command(app, "quantize", "write a model's FFN in fp8 (e4m3 with 128x128 block scales)",
                          "swapffn quantize --in m.safetensors --out m-fp8.safetensors --format fp8");
  cmd->add_option("--in", a->in, "bf16 model file (safetensors)")->required();
  cmd->add_option("--out", a->out, "output model file")->required();
  cmd->add_option("--format", a->format, "storage of the FFN weights: fp8 (e4m3)")
      ->required()
      ->check(CLI::IsMember({"fp8"}));
  cmd->callback([a] {
    check_writable(a->out);
    require_not_input(a->out, "--out", a->in, "--in");
    const Weights w = Weights::load(a->in);
    SWAPFFN_REQUIRE(!w.fp8_ffn, "model " + a->in + " already stores its FFN in fp8");
    const Weights q = w.quantized_fp8();
    q.save(a->out);
    std::printf("wrote %s: w1.weight, w3.weight, w2.weight in F8_E4M3 with F32 block scales, every other tensor "
                "as in %s\n",
                a->out.c_str(), a->in.c_str());
    print_error("w1.weight", w.w1, q.fp8_ffn->w1);
    print_error("w3.weight", w.w3, q.fp8_ffn->w3);
    print_error("w2.weight", w.w2, q.fp8_ffn->w2);
  });
}

}  // namespace swapffn::cli

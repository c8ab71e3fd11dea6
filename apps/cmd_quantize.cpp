// swapffn quantize: writes a bf16 model's FFN in fp8 (e4m3 in a scaling, rows or blocks; docs/FORMATS.md,
// "fp8 models"), the rest unchanged, and says how far each weight moved under each scaling.
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
  // blocks by default: as accurate as rows on the random default model (2.64% both), and fused-fp8
  // runs it faster today (rows takes cuBLASLt's GEMMs: docs/PERFORMANCE.md, "The fp8 path").
  std::string in, out, format, scales = "blocks";
};

// A weight's quantisation error: relative L2 over the weight, and the largest error as a share of
// its group's largest magnitude (at most half an e4m3 step at 448, 16/448 = 3.6%).
struct QuantError {
  double rel_l2 = 0, worst = 0;
};
QuantError error_of(const std::vector<bf16>& original, const fp8::ScaledWeight& q) {
  double num = 0, den = 0, worst = 0;
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) {
      const double w = bf16_to_float(original[size_t(r * q.cols + c)]), e = q.dequant(r, c) - w;
      num += e * e;
      den += w * w;
      worst = std::max(worst, std::fabs(e) / (double(q.scale_at(r, c)) * fp8::kE4m3Max));
    }
  return {den > 0 ? std::sqrt(num / den) : 0.0, worst};
}

// Each weight's error under each scaling, the written one marked: a user with a trained model (whose
// outlier channels can favour one scaling) sees what the other would have given.
void print_errors(const Weights& w, const Weights& written) {
  const fp8::Scaling chosen = written.fp8_ffn->scaling();
  for (const fp8::Scaling s : {fp8::Scaling::rows, fp8::Scaling::blocks}) {
    const fp8::FfnWeights other =
        s == chosen ? *written.fp8_ffn : fp8::quantize_ffn(s, w.w1, w.w3, w.w2, w.cfg.d_model, w.cfg.d_ff);
    std::printf("  scaling %s%s:\n", fp8::scaling_name(s), s == chosen ? " (written)" : "");
    const auto line = [](const char* name, const std::vector<bf16>& original, const fp8::ScaledWeight& q) {
      const QuantError e = error_of(original, q);
      std::printf("    %s [%lld, %lld], %zu scales: relative L2 error %.3f%%, max error %.2f%% of its %s's amax\n",
                  name, static_cast<long long>(q.rows), static_cast<long long>(q.cols), q.scale.size(),
                  100.0 * e.rel_l2, 100.0 * e.worst, q.scaling == fp8::Scaling::rows ? "channel" : "block");
    };
    line("w1.weight", w.w1, other.w1);
    line("w3.weight", w.w3, other.w3);
    line("w2.weight", w.w2, other.w2);
  }
}
}  // namespace

void add_quantize_command(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  auto* cmd = add_command(app, "quantize", "write a model's FFN in fp8 (e4m3 with per-channel or 128x128 block scales)",
                          "swapffn quantize --in m.safetensors --out m-fp8.safetensors --format fp8 --scales blocks");
  cmd->add_option("--in", a->in, "bf16 model file (safetensors)")->required();
  cmd->add_option("--out", a->out, "output model file")->required();
  cmd->add_option("--format", a->format, "storage of the FFN weights: fp8 (e4m3)")
      ->required()
      ->check(CLI::IsMember({"fp8"}));
  cmd->add_option("--scales", a->scales,
                  "fp8 scaling (SPEC section 5): rows (one scale per weight channel and per activation row) or "
                  "blocks (128x128 weight blocks, 1x128 activation blocks)")
      ->capture_default_str()
      ->check(CLI::IsMember({"rows", "blocks"}));
  cmd->callback([a] {
    check_writable(a->out);
    require_not_input(a->out, "--out", a->in, "--in");
    const fp8::Scaling scaling = fp8::parse_scaling(a->scales);
    const Weights w = Weights::load(a->in);
    SWAPFFN_REQUIRE(!w.fp8_ffn, "model " + a->in + " already stores its FFN in fp8");
    const Weights q = w.quantized_fp8(scaling);
    q.save(a->out);
    std::printf("wrote %s: w1.weight, w3.weight, w2.weight in F8_E4M3 with F32 scales (scaling %s), every other "
                "tensor as in %s\n",
                a->out.c_str(), fp8::scaling_name(scaling), a->in.c_str());
    print_errors(w, q);
  });
}

}  // namespace swapffn::cli

#include "commands.hpp"

#include <cstdlib>

#include "swapffn/device.hpp"
#include "swapffn/error.hpp"
#include "swapffn/file_input.hpp"

namespace swapffn::cli {

CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& what, const std::string& example) {
  CLI::App* cmd = app.add_subcommand(name, what);
  cmd->footer("Example:\n  " + example);
  return cmd;
}

void require_not_input(const std::string& out, const std::string& out_flag, const std::string& in,
                       const std::string& in_flag) {
  SWAPFFN_REQUIRE(!same_file(out, in), out_flag + " " + out + " is the " + in_flag + " file; write it to another file");
}

ResolvedBackend chosen_backend(const std::string& backend, const Weights& w) {
  return resolve_backend(backend, query_gpu(), w.fp8_ffn.has_value());
}

void FusedFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--kernels", kernels,
                  "fused backends: pin kernel choices, e.g. 'up=bn256_st4_sk1_mc1_p,router=folded,groups=2' "
                  "(fused-fp8: router=, groups=, fp8up=cublas|sm90, scales=rows|blocks for a bf16 model)");
  cmd->add_option("--tune", tune_file,
                  "fused backend: tuning cache written by `swapffn tune` (default: $SWAPFFN_TUNE_FILE, else the "
                  "built-in choices)");
}

FusedOptions FusedFlags::resolve(const Config& cfg, const std::string& backend) const {
  FusedOptions o;
  o.pinned = parse_fused_choice(kernels);
  if (!backend_facts(backend).takes_tuning) {  // the registry refuses pinned choices where not taken
    SWAPFFN_REQUIRE(tune_file.empty(), "--tune applies to the fused backend only, not '" + backend + "'");
    return o;
  }
  std::string file = tune_file;
  if (const char* env = std::getenv("SWAPFFN_TUNE_FILE"); file.empty() && env) file = env;
  if (!file.empty()) o.tuned = load_tuning(file, query_gpu().name, cfg.d_model, cfg.d_ff);
  return o;
}

}  // namespace swapffn::cli

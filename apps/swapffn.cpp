// The `swapffn` command line: init, quantize, run, check, info, bench, tune. (The NVFP4 kernels have
// their own tool, `swapffn-nvfp4`: nvfp4/tools.)
// Exit codes and errors: swapffn/command_line.hpp.
#include "commands.hpp"
#include "swapffn/command_line.hpp"
#include "swapffn_commit.hpp"

int main(int argc, char** argv) {
  CLI::App app{"swapffn: Swap-FFN decode on Hopper GPUs, with a CPU reference", "swapffn"};
  app.require_subcommand(1);
  app.set_version_flag("--version", SWAPFFN_VERSION " (" SWAPFFN_GIT_COMMIT ")");
  swapffn::cli::add_init_command(app);
  swapffn::cli::add_quantize_command(app);
  swapffn::cli::add_run_command(app);
  swapffn::cli::add_check_command(app);
  swapffn::cli::add_info_command(app);
  swapffn::cli::add_bench_command(app);
  swapffn::cli::add_tune_command(app);
  return swapffn::cli::run_command_line(app, argc, argv);
}

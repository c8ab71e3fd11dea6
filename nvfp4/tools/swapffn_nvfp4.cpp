// The `swapffn-nvfp4` command line: the NVFP4 kernels' own tool, apart from the engine's `swapffn`.
// Exit codes and errors as `swapffn`'s (swapffn/command_line.hpp).
#include "nvfp4_bench.hpp"
#include "swapffn/command_line.hpp"
#include "swapffn_commit.hpp"

int main(int argc, char** argv) {
  CLI::App app{"swapffn-nvfp4: the NVFP4 block-scaled kernels on Hopper (GEMV, GEMM, dual GEMM, grouped GEMM)",
               "swapffn-nvfp4"};
  app.require_subcommand(1);
  app.set_version_flag("--version", SWAPFFN_VERSION " (" SWAPFFN_GIT_COMMIT ")");
  swapffn::nvfp4::tool::add_bench_command(app);
  return swapffn::cli::run_command_line(app, argc, argv);
}

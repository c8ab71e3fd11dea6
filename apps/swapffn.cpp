// The `swapffn` command line: init, run, check, info, bench, tune, nvfp4.
// Any error becomes one line on stderr and exit code 1 (2 for usage errors); never a stack dump.
#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "swapffn_commit.hpp"

int main(int argc, char** argv) {
  CLI::App app{"swapffn: Swap-FFN decode on Hopper GPUs, with a CPU reference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", SWAPFFN_VERSION " (" SWAPFFN_GIT_COMMIT ")");
  swapffn::cli::add_init_command(app);
  swapffn::cli::add_run_command(app);
  swapffn::cli::add_check_command(app);
  swapffn::cli::add_info_command(app);
  swapffn::cli::add_bench_command(app);
  swapffn::cli::add_tune_command(app);
  swapffn::cli::add_nvfp4_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "swapffn: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

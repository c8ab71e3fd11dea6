// swapffn run (placeholder until its issue lands)
#include "commands.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cli {

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "not built yet");
  cmd->callback([] { SWAPFFN_FAIL("swapffn run is not implemented yet"); });
}

}  // namespace swapffn::cli

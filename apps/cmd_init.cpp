// swapffn init (placeholder until its issue lands)
#include "commands.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cli {

void add_init_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "not built yet");
  cmd->callback([] { SWAPFFN_FAIL("swapffn init is not implemented yet"); });
}

}  // namespace swapffn::cli

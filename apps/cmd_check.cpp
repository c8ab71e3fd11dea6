// swapffn check (placeholder until its issue lands)
#include "commands.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cli {

void add_check_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("check", "not built yet");
  cmd->callback([] { SWAPFFN_FAIL("swapffn check is not implemented yet"); });
}

}  // namespace swapffn::cli

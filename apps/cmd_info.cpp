// swapffn info (placeholder until its issue lands)
#include "commands.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cli {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "not built yet");
  cmd->callback([] { SWAPFFN_FAIL("swapffn info is not implemented yet"); });
}

}  // namespace swapffn::cli

// swapffn tune (placeholder until its issue lands)
#include "commands.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cli {

void add_tune_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tune", "not built yet");
  cmd->callback([] { SWAPFFN_FAIL("swapffn tune is not implemented yet"); });
}

}  // namespace swapffn::cli

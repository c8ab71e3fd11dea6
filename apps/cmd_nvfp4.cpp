// swapffn nvfp4 (placeholder until its issue lands)
#include "commands.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cli {

void add_nvfp4_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("nvfp4", "not built yet");
  cmd->callback([] { SWAPFFN_FAIL("swapffn nvfp4 is not implemented yet"); });
}

}  // namespace swapffn::cli

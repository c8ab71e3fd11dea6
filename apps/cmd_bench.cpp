// swapffn bench (placeholder until its issue lands)
#include "commands.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cli {

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "not built yet");
  cmd->callback([] { SWAPFFN_FAIL("swapffn bench is not implemented yet"); });
}

}  // namespace swapffn::cli

// Each `swapffn` sub-command lives in its own cmd_<name>.cpp and registers itself on the app.
#pragma once
#include <CLI/CLI.hpp>

namespace swapffn::cli {

void add_init_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_check_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_nvfp4_command(CLI::App& app);

}  // namespace swapffn::cli

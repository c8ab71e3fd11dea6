// Each `swapffn` sub-command lives in its own cmd_<name>.cpp and registers itself on the app;
// what several of them share (the fused backend's kernel choices, the help text) is here.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

#include "swapffn/backends.hpp"
#include "swapffn/engine.hpp"

namespace swapffn::cli {

void add_init_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_check_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_quantize_command(CLI::App& app);

// A sub-command whose --help says what it does in one line and shows one example.
CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& what, const std::string& example);

// Throws unless output `out` (flag out_flag) is another file than input `in` (flag in_flag): an
// output written over an input would destroy it (a state written over the model, say).
void require_not_input(const std::string& out, const std::string& out_flag, const std::string& in,
                       const std::string& in_flag);

// The backend a --backend names: itself, or what "auto" picks here (`why` says which; the
// commands print it on stdout with their results).
ResolvedBackend chosen_backend(const std::string& backend, const Weights& w);

// --kernels and --tune of the fused backend, parsed once here into typed FusedOptions.
struct FusedFlags {
  std::string kernels, tune_file;
  void add_to(CLI::App* cmd);
  // The pinned choices and, for the fused backend with `cfg` on this process's GPU, the tuning
  // cache's entries (--tune, else $SWAPFFN_TUNE_FILE); throws naming a bad choice or cache.
  FusedOptions resolve(const Config& cfg, const std::string& backend) const;
};

}  // namespace swapffn::cli

// The `swapffn` command line: init, quantize, run, check, info, bench, tune. (The NVFP4 kernels have
// their own tool, `swapffn-nvfp4`: nvfp4/tools.)
// Exit codes: 0 on success (--help and --version included); 2 for a usage error, which is what the
// command-line parser refuses (an unknown sub-command or option, a missing or malformed value, a
// value outside its allowed set); 1 for every other error. An error is one line on stderr, never a
// stack dump.
#include <cstdio>
#include <exception>
#include <string>

#include "commands.hpp"
#include "swapffn_commit.hpp"

namespace {

// Messages that quote input (a file's text, a parser's list of options) may hold line breaks.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"swapffn: Swap-FFN decode on Hopper GPUs, with a CPU reference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", SWAPFFN_VERSION " (" SWAPFFN_GIT_COMMIT ")");
  swapffn::cli::add_init_command(app);
  swapffn::cli::add_quantize_command(app);
  swapffn::cli::add_run_command(app);
  swapffn::cli::add_check_command(app);
  swapffn::cli::add_info_command(app);
  swapffn::cli::add_bench_command(app);
  swapffn::cli::add_tune_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    std::string command = "swapffn", what = e.what();
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().back();
      command += " " + sub->get_name();
    }
    if (app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-') {  // CLI11 says "A subcommand is required"
      std::string known;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        known += (known.empty() ? "" : ", ") + sub->get_name();
      what = "unknown command '" + std::string(argv[1]) + "' (commands: " + known + ")";
    }
    std::fprintf(stderr, "swapffn: usage error: %s (see '%s --help')\n", one_line(what).c_str(), command.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "swapffn: error: %s\n", one_line(e.what()).c_str());
    return 1;
  }
  return 0;
}

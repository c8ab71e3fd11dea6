// The `swapffn-nvfp4` command line: the NVFP4 kernels' own tool, apart from the engine's `swapffn`.
// Exit codes as `swapffn`'s: 0 on success (--help and --version included), 2 for what the parser
// refuses (one line naming it and where the help is), 1 for every other error (one line).
#include <cstdio>
#include <exception>
#include <string>

#include "nvfp4_bench.hpp"
#include "swapffn_commit.hpp"

namespace {

// Messages that quote input (a parser's list of options) may hold line breaks.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"swapffn-nvfp4: the NVFP4 block-scaled kernels on Hopper (GEMV, GEMM, dual GEMM, grouped GEMM)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", SWAPFFN_VERSION " (" SWAPFFN_GIT_COMMIT ")");
  swapffn::nvfp4::tool::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    std::string command = "swapffn-nvfp4";
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().back();
      command += " " + sub->get_name();
    }
    std::fprintf(stderr, "swapffn-nvfp4: usage error: %s (see '%s --help')\n", one_line(e.what()).c_str(),
                 command.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "swapffn-nvfp4: error: %s\n", one_line(e.what()).c_str());
    return 1;
  }
  return 0;
}

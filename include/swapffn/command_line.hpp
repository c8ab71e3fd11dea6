// The exit-code convention of the project's command lines (`swapffn`, `swapffn-nvfp4`): 0 on success
// (--help and --version included); 2 for a usage error, what the parser refuses (an unknown command or
// option, a missing or malformed value), one line naming it and where the help is; 1 for every other
// error, one line on stderr, never a stack dump. Header-only: only the tools include it (CLI11).
#pragma once
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

namespace swapffn::cli {

// Messages that quote input (a file's text, a parser's list of options) may hold line breaks.
inline std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// Parses argv into `app` (its sub-commands run from their callbacks) and returns the exit code.
inline int run_command_line(CLI::App& app, int argc, char** argv) {
  const std::string name = app.get_name();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    std::string command = name, what = e.what();
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
    std::fprintf(stderr, "%s: usage error: %s (see '%s --help')\n", name.c_str(), one_line(what).c_str(),
                 command.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), one_line(e.what()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace swapffn::cli

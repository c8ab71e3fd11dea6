#include "bench/python_row.hpp"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace swapffn {
namespace {

// A word for /bin/sh: single-quoted, each ' written as '\''.
std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The last line of `text` that is a JSON object (the row; what the child printed before is not).
nlohmann::json last_json_object(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    nlohmann::json j = nlohmann::json::parse(*it, nullptr, false);
    if (j.is_object()) return j;
  }
  return nullptr;
}

}  // namespace

std::string python_interpreter() {
  const char* p = std::getenv("SWAPFFN_PYTHON");
  return p && *p ? p : "python3";
}

PythonRowResult run_python_row(const PythonRowRequest& r) {
  const std::string module = "swapffn.bench_row";
  const std::string cmd = shell_quoted(r.python) + " -m " + module + " --model " + shell_quoted(r.model) +
                          " --backend " + shell_quoted(r.backend) + " --kernels " + shell_quoted(r.kernels) +
                          " --batches " + std::to_string(r.batch) +
                          " --tokens " + std::to_string(r.tokens) + " --warmup " + std::to_string(r.warmup) +
                          " --repeats " + std::to_string(r.repeats);
  PythonRowResult res;
  std::fflush(stdout);  // the child writes to the same terminal
  FILE* child = popen(cmd.c_str(), "r");
  if (!child) {
    res.why_not = "cannot start " + r.python;
    return res;
  }
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), child)) > 0;) out.append(buf.data(), n);
  const int status = pclose(child);
  const nlohmann::json j = last_json_object(out);
  if (j.is_object() && j.contains("unavailable") && j["unavailable"].is_string()) {
    res.why_not = j["unavailable"].get<std::string>();
  } else if (j.is_object() && j.value("ms_per_step", 0.0) > 0) {
    res.ran = true;
    res.median_ms = j["ms_per_step"].get<double>();
    res.min_ms = j.value("min_ms_per_step", res.median_ms);
    res.max_ms = j.value("max_ms_per_step", res.median_ms);
    res.engine_decode_ms = j.value("engine_decode_ms_per_step", 0.0);
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    res.why_not = r.python + " not found";
  } else {
    res.why_not = r.python + " -m " + module + " gave no row (exit status " +
                  std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                  "; is the swapffn package installed for it? its error is above)";
  }
  return res;
}

}  // namespace swapffn

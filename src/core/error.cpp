#include "swapffn/error.hpp"

namespace swapffn {

void throw_error(const std::string& msg) { throw Error(msg); }

void throw_internal_error(const char* file, int line, const std::string& msg) {
  std::string f(file);
  for (const char* root : {"/src/", "/apps/", "/include/", "/tests/"})
    if (auto pos = f.rfind(root); pos != std::string::npos) {
      f = f.substr(pos + 1);
      break;
    }
  throw Error(f + ":" + std::to_string(line) + ": " + msg);
}

}  // namespace swapffn

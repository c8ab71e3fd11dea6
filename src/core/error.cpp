#include "swapffn/error.hpp"

namespace swapffn {

void throw_error(const char* file, int line, const std::string& msg) {
  std::string f(file);
  for (const char* root : {"/src/", "/apps/"})
    if (auto pos = f.rfind(root); pos != std::string::npos) {
      f = f.substr(pos + 1);
      break;
    }
  throw Error(f + ":" + std::to_string(line) + ": " + msg);
}

}  // namespace swapffn

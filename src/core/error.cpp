#include "swapffn/error.hpp"

namespace swapffn {

void throw_error(const char* file, int line, const std::string& msg) {
  std::string f(file);
  if (auto pos = f.rfind("/src/"); pos != std::string::npos) f = f.substr(pos + 1);
  throw Error(f + ":" + std::to_string(line) + ": " + msg);
}

}  // namespace swapffn

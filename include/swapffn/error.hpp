// Error handling: every host-side failure throws swapffn::Error carrying file:line and what failed.
// Library code never calls exit(); the CLI turns an Error into one line on stderr and a non-zero exit.
#pragma once
#include <stdexcept>
#include <string>

namespace swapffn {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);

}  // namespace swapffn

// Throws swapffn::Error("<file>:<line>: <msg>") unless cond holds. msg may use operator+ on strings.
#define SWAPFFN_REQUIRE(cond, msg)                                                   \
  do {                                                                               \
    if (!(cond)) ::swapffn::throw_error(__FILE__, __LINE__, std::string(msg));       \
  } while (0)

#define SWAPFFN_FAIL(msg) ::swapffn::throw_error(__FILE__, __LINE__, std::string(msg))

// Error handling: every host-side failure throws swapffn::Error. Library code never calls exit();
// the CLI turns an Error into one line on stderr and a non-zero exit.
//
// Two kinds of failure, one exception type, told apart by the macro that raises them:
// - SWAPFFN_REQUIRE / SWAPFFN_FAIL: what the caller caused and can fix (a bad file, flag, size or
//   state; no usable GPU; a batch too large for the GPU's memory). The message is the whole story,
//   with no source location: it is read by users.
// - SWAPFFN_ASSERT / SWAPFFN_INTERNAL (and CUDA_CHECK / CUBLAS_CHECK): a broken invariant or a failed
//   library call that the caller cannot fix from the message. The message starts with
//   "<file>:<line>: ", the place a bug report needs.
#pragma once
#include <stdexcept>
#include <string>

namespace swapffn {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Errors of the environment rather than of the input, for callers that handle them apart (the
// Python layer raises them as swapffn.FileError, also an OSError, and swapffn.NoGpuError): a file
// that cannot be opened, read or written, and no GPU that can run what was asked.
class FileError : public Error {
 public:
  using Error::Error;
};
class NoGpuError : public Error {
 public:
  using Error::Error;
};

// A user-facing error: throws Error(msg).
[[noreturn]] void throw_error(const std::string& msg);
// An internal error: throws Error("<file>:<line>: <msg>"), file relative to the source tree.
[[noreturn]] void throw_internal_error(const char* file, int line, const std::string& msg);

}  // namespace swapffn

// Throws swapffn::Error(msg) unless cond holds. msg (built only on failure) may use operator+ on strings.
#define SWAPFFN_REQUIRE(cond, msg)                                 \
  do {                                                             \
    if (!(cond)) ::swapffn::throw_error(std::string(msg));         \
  } while (0)

#define SWAPFFN_FAIL(msg) ::swapffn::throw_error(std::string(msg))

// As SWAPFFN_REQUIRE, throwing the Error subclass `type` (FileError, NoGpuError).
#define SWAPFFN_REQUIRE_AS(type, cond, msg)                \
  do {                                                     \
    if (!(cond)) throw ::swapffn::type(std::string(msg));  \
  } while (0)

// Throws swapffn::Error("<file>:<line>: <msg>") unless the invariant cond holds.
#define SWAPFFN_ASSERT(cond, msg)                                                        \
  do {                                                                                   \
    if (!(cond)) ::swapffn::throw_internal_error(__FILE__, __LINE__, std::string(msg));  \
  } while (0)

#define SWAPFFN_INTERNAL(msg) ::swapffn::throw_internal_error(__FILE__, __LINE__, std::string(msg))

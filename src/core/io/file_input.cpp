// check_path, read_regular_file and same_file: input files that cannot hang, crash or be overwritten.
#include "swapffn/file_input.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"

namespace swapffn {
namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

void check_path(const std::string& path, const std::string& what) {
  SWAPFFN_REQUIRE(!path.empty(), what + ": the path is empty");
  const size_t nul = path.find('\0');
  if (nul == std::string::npos) return;
  std::string shown;  // `what` may hold the path: its NULs shown as \0, not ending the message
  for (const char c : what) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
  SWAPFFN_FAIL(shown + ": the path holds a NUL byte at offset " + std::to_string(nul));
}

std::vector<std::byte> read_regular_file(const std::string& path, const std::string& what, size_t max_bytes) {
  check_path(path, what);
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  SWAPFFN_REQUIRE_AS(FileError, fd >= 0, what + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  SWAPFFN_REQUIRE_AS(FileError, ::fstat(fd, &st) == 0, what + ": cannot stat: " + std::strerror(errno));
  SWAPFFN_REQUIRE_AS(FileError, S_ISREG(st.st_mode), what + ": not a regular file (" + kind_of(st.st_mode) + ")");
  const auto size = static_cast<uint64_t>(st.st_size);
  SWAPFFN_REQUIRE(size <= max_bytes, what + ": " + std::to_string(size) + " bytes, more than the " +
                                         std::to_string(max_bytes) + "-byte limit");
  std::vector<std::byte> bytes;
  allocate(bytes, static_cast<int64_t>(size), std::byte{0}, what);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, bytes.data() + got, std::min<size_t>(size - got, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    SWAPFFN_REQUIRE_AS(FileError, n >= 0, what + ": read failed: " + std::strerror(errno));
    SWAPFFN_REQUIRE_AS(FileError, n > 0, what + ": the file shrank while it was read (" + std::to_string(got) + " of " +
                               std::to_string(size) + " bytes; is another process writing it?)");
    got += static_cast<size_t>(n);
  }
  std::byte extra{};
  ssize_t more = 0;
  do more = ::read(fd, &extra, 1);
  while (more < 0 && errno == EINTR);
  SWAPFFN_REQUIRE_AS(FileError, more == 0, what + ": the file grew while it was read (past " + std::to_string(size) +
                                 " bytes; is another process writing it?)");
  return bytes;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const auto pa = std::filesystem::weakly_canonical(a, ea), pb = std::filesystem::weakly_canonical(b, eb);
  return !ea && !eb && pa == pb;
}

}  // namespace swapffn

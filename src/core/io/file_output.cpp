// check_writable and write_file_atomically: output files that are replaced whole or not at all.
#include "swapffn/file_output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include "swapffn/error.hpp"
#include "swapffn/file_input.hpp"

namespace swapffn {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

// path's directory ("." when it has none) and its last component.
std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

bool names_a_directory(const std::string& name) { return name.empty() || name == "." || name == ".."; }

// An unpredictable temporary name beside `name`: a planted file or link cannot be at it in advance.
std::string temp_name(const std::string& name) {
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  return "." + name.substr(0, 200) + ".tmp-" + hex;  // 200: stays under NAME_MAX (255)
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// The file being written. Unnamed (O_TMPFILE) where the filesystem allows it, so a kill at any
// point leaves nothing behind. Otherwise it has a temporary name from creation until the rename;
// the destructor unlinks that name on every error path, but a process killed meanwhile (SIGKILL,
// or SIGINT/SIGTERM, which a library cannot safely catch for its caller) leaves the dot-file
// `.<name>.tmp-<random>` in the directory. The O_TMPFILE path has the same residue only if killed
// in the microseconds between linkat and renameat.
class TempFile {
 public:
  TempFile(int dir_fd, const std::string& name, mode_t mode, const std::string& what) : dir_fd_(dir_fd) {
    // linkat needs /proc/self/fd to give an unnamed file a name without CAP_DAC_READ_SEARCH.
    if (::access("/proc/self/fd", X_OK) == 0) {
      fd_ = ::openat(dir_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
      if (fd_ >= 0) return;
      // EISDIR: a kernel without O_TMPFILE; EOPNOTSUPP: a filesystem without it.
      SWAPFFN_REQUIRE_AS(FileError, errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL,
                         what + ": " + errno_text(errno));
    }
    for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
      temp_ = temp_name(name);
      fd_ = ::openat(dir_fd, temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
      if (fd_ < 0 && errno != EEXIST) {
        temp_.clear();
        throw FileError(what + ": " + errno_text(errno));
      }
    }
    if (fd_ < 0) {
      temp_.clear();
      throw FileError(what + ": no free temporary name in its directory");
    }
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!temp_.empty()) ::unlinkat(dir_fd_, temp_.c_str(), 0);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }

  // Puts the file at `name` in the directory, atomically replacing whatever entry is there.
  void rename_to(const std::string& name, const std::string& what) {
    if (temp_.empty()) {  // unnamed: link it under a temporary name first (linkat never replaces)
      const std::string self = "/proc/self/fd/" + std::to_string(fd_);
      for (int attempt = 0; attempt < 16 && temp_.empty(); ++attempt) {
        const std::string t = temp_name(name);
        if (::linkat(AT_FDCWD, self.c_str(), dir_fd_, t.c_str(), AT_SYMLINK_FOLLOW) == 0)
          temp_ = t;
        else
          SWAPFFN_REQUIRE_AS(FileError, errno == EEXIST, what + ": " + errno_text(errno));
      }
      SWAPFFN_REQUIRE_AS(FileError, !temp_.empty(), what + ": no free temporary name in its directory");
    }
    SWAPFFN_REQUIRE_AS(FileError, ::renameat(dir_fd_, temp_.c_str(), dir_fd_, name.c_str()) == 0,
                       what + ": " + errno_text(errno));
    temp_.clear();
  }

 private:
  int dir_fd_;
  int fd_ = -1;
  std::string temp_;  // the file's temporary name in the directory; empty while it has none
};

void write_all(int fd, std::span<const std::span<const std::byte>> parts, const std::string& what) {
  for (const auto& part : parts) {
    const std::byte* p = part.data();
    size_t left = part.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, std::min(left, size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      SWAPFFN_REQUIRE_AS(FileError, n > 0,
                         what + ": " + (n < 0 ? errno_text(errno) : std::string("the write made no progress")));
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
}

}  // namespace

void check_writable(const std::string& path) {
  SWAPFFN_REQUIRE(!path.empty(), "output path is empty");  // input, not environment
  const std::string what = "cannot write " + path;
  check_path(path, what);
  const auto [dir, name] = split_path(path);
  struct stat st {};
  SWAPFFN_REQUIRE_AS(FileError, !names_a_directory(name) && !(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)),
                  what + ": it is a directory");
  if (::stat(dir.c_str(), &st) != 0)
    throw FileError(what + ": directory " + dir + (errno == ENOENT ? " does not exist" : ": " + errno_text(errno)));
  SWAPFFN_REQUIRE_AS(FileError, S_ISDIR(st.st_mode), what + ": " + dir + " is not a directory");
  SWAPFFN_REQUIRE_AS(FileError, ::access(dir.c_str(), W_OK | X_OK) == 0,
                  what + ": directory " + dir + " is not writable (" + errno_text(errno) + ")");
}

void write_file_atomically(const std::string& path, std::span<const std::span<const std::byte>> parts) {
  const std::string what = "cannot write " + path;
  check_path(path, what);
  const auto [dir, name] = split_path(path);
  SWAPFFN_REQUIRE_AS(FileError, !names_a_directory(name), what + ": it is a directory");
  const Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  SWAPFFN_REQUIRE_AS(FileError, dir_fd.get() >= 0, what + ": directory " + dir + ": " + errno_text(errno));

  // A replaced file keeps its mode, so a private file stays private; the temporary file is 0600
  // until it gets that mode, never readable by others in between. A new file gets 0666 - umask.
  struct stat old {};
  const bool replacing = ::fstatat(dir_fd.get(), name.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(old.st_mode);
  TempFile tmp(dir_fd.get(), name, replacing ? 0600 : 0666, what);
  write_all(tmp.fd(), parts, what);
  if (replacing)
    SWAPFFN_REQUIRE_AS(FileError, ::fchmod(tmp.fd(), old.st_mode & 07777) == 0, what + ": " + errno_text(errno));
  SWAPFFN_REQUIRE_AS(FileError, ::fsync(tmp.fd()) == 0, what + ": " + errno_text(errno));
  tmp.rename_to(name, what);
  // The rename is durable only once the directory is; EINVAL: a filesystem that cannot sync one.
  SWAPFFN_REQUIRE_AS(FileError, ::fsync(dir_fd.get()) == 0 || errno == EINVAL,
                  path + " was replaced, but syncing its directory failed: " + errno_text(errno));
}

void write_file_atomically(const std::string& path, std::string_view text) {
  const std::span<const std::byte> part = std::as_bytes(std::span(text));
  write_file_atomically(path, {&part, 1});
}

}  // namespace swapffn

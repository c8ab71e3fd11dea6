// What the atomic writer asks of the kernel, seen by interposing two libc calls in this test binary
// (swapffn_core is linked statically, so its calls resolve here first): the file and then its
// directory are fsynced, and with O_TMPFILE unavailable (no /proc/self/fd, as in some containers)
// the named-temporary-file path keeps every promise of the unnamed one.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>

#include "io_test_util.hpp"
#include "swapffn/file_output.hpp"

namespace {
std::atomic<int> g_file_syncs{0}, g_dir_syncs{0};
std::atomic<bool> g_hide_proc_fd{false};
}  // namespace

extern "C" int fsync(int fd) {
  struct stat s {};
  if (::fstat(fd, &s) == 0) (S_ISDIR(s.st_mode) ? g_dir_syncs : g_file_syncs)++;
  return static_cast<int>(::syscall(SYS_fsync, fd));
}

extern "C" int access(const char* path, int mode) {
  if (g_hide_proc_fd && std::strcmp(path, "/proc/self/fd") == 0) {
    errno = ENOENT;
    return -1;
  }
  return ::faccessat(AT_FDCWD, path, mode, 0);
}

namespace swapffn {
namespace {

using testing::expect_error;
using testing::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct HideProcFd {
  HideProcFd() { g_hide_proc_fd = true; }
  ~HideProcFd() { g_hide_proc_fd = false; }
};

void expect_synced_write(const std::string& path, const std::string& text) {
  g_file_syncs = 0;
  g_dir_syncs = 0;
  write_file_atomically(path, text);
  EXPECT_EQ(slurp(path), text);
  EXPECT_EQ(g_file_syncs.load(), 1) << "the file's data must reach the disk before the rename";
  EXPECT_EQ(g_dir_syncs.load(), 1) << "the rename is durable only once the directory is synced";
}

TEST(FileOutputSyscalls, FileThenDirectoryAreSynced) {
  TempDir dir;
  expect_synced_write(dir.file("a.json"), "{\"a\": 1}\n");
  expect_synced_write(dir.file("a.json"), "{}\n");  // replacing too
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.json"});
}

TEST(FileOutputSyscalls, NamedTemporaryFallbackKeepsEveryPromise) {
  HideProcFd hide;
  TempDir dir;
  const std::string path = dir.file("s.json");
  expect_synced_write(path, std::string(50000, 'x'));
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  expect_synced_write(path, "second\n");
  struct stat s {};
  ASSERT_EQ(::stat(path.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0600u) << "the replaced file's mode is kept";
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"s.json"}) << "no temporary file is left";
}

TEST(FileOutputSyscalls, NamedTemporaryFallbackLeavesNothingAfterAFailedWrite) {
  HideProcFd hide;
  TempDir dir;
  const std::string path = dir.file("s.json");
  write_file_atomically(path, "old\n");
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  expect_error([&] { write_file_atomically(path, std::string(1 << 20, 'y')); }, {"cannot write", path});
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(slurp(path), "old\n");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"s.json"});
}

}  // namespace
}  // namespace swapffn

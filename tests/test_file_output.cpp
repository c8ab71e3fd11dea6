// Output files: check_writable names what stops a write before any work is done, and a write
// replaces its file whole or not at all, follows no planted link, keeps the replaced file's mode and
// leaves no temporary file behind when it fails.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "io_test_util.hpp"
#include "swapffn/file_output.hpp"
#include "swapffn/safetensors.hpp"

namespace swapffn {
namespace {

namespace fs = std::filesystem;
namespace st = safetensors;
using testing::expect_error;
using testing::TempDir;
using testing::write_bytes;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

mode_t mode_of(const std::string& path) {
  struct stat s {};
  EXPECT_EQ(::stat(path.c_str(), &s), 0) << path;
  return s.st_mode & 07777;
}

st::Writer random_file(size_t bytes) {
  std::mt19937 rng(std::random_device{}());
  std::vector<uint8_t> v(bytes);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  st::Writer w;
  w.add_u8("u", {static_cast<int64_t>(bytes)}, v);
  return w;
}

// Links at the target and at every temporary name a writer could predict (the old scheme:
// "<path>.tmp-<pid>-<n>") point at another file, which must stay untouched.
TEST(FileOutput, PlantedSymlinksAreNeverFollowed) {
  TempDir dir;
  const std::string victim = dir.file("victim"), path = dir.file("s.safetensors");
  write_bytes(victim, "precious");
  fs::create_symlink(victim, path);
  for (int n = 0; n < 256; ++n)
    fs::create_symlink(victim, path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(n));
  random_file(4096).write(path);
  EXPECT_TRUE(slurp(victim) == "precious") << "a planted link was followed";
  EXPECT_FALSE(fs::is_symlink(path));
  EXPECT_EQ(st::Reader(path).at("u").shape, (std::vector<int64_t>{4096}));
}

TEST(FileOutput, ReplacingKeepsTheFileMode) {
  TempDir dir;
  const std::string path = dir.file("s.safetensors");
  const mode_t umask_now = ::umask(0);
  ::umask(umask_now);
  random_file(100).write(path);
  EXPECT_EQ(mode_of(path), 0666 & ~umask_now);  // a new file: as any file the user creates
  for (const mode_t mode : {0600, 0640, 0444}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    random_file(100).write(path);
    EXPECT_EQ(mode_of(path), mode);
  }
}

TEST(FileOutput, TextIsWrittenWhole) {
  TempDir dir;
  const std::string path = dir.file("bench.json");
  write_file_atomically(path, std::string(100000, 'a'));
  write_file_atomically(path, "{}\n");
  EXPECT_EQ(slurp(path), "{}\n");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"bench.json"});
}

// A write that fails in the middle (the file size limit, as a full disk would) leaves the old file
// and no temporary file.
TEST(FileOutput, FailedWriteLeavesTheOldFileAndNothingElse) {
  TempDir dir;
  const std::string path = dir.file("s.safetensors");
  random_file(1000).write(path);
  const std::string before = slurp(path);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  expect_error([&] { random_file(1 << 20).write(path); }, {"cannot write", path});
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(slurp(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"s.safetensors"});
}

TEST(FileOutput, CheckWritableNamesTheProblem) {
  TempDir dir;
  const std::string file = dir.file("f");
  write_bytes(file, "x");
  expect_error([&] { check_writable(""); }, {"output path is empty"});
  expect_error([&] { check_writable(dir.file("no_such_dir/s.safetensors")); },
               {dir.file("no_such_dir/s.safetensors"), "directory " + dir.file("no_such_dir") + " does not exist"});
  expect_error([&] { check_writable(file + "/s.safetensors"); }, {file + "/s.safetensors", file + " is not a directory"});
  expect_error([&] { check_writable(dir.path().string()); }, {"is a directory"});
  expect_error([&] { check_writable(dir.file("sub/")); }, {"is a directory"});
  check_writable(file);                   // replacing a file
  check_writable(dir.file("new.json"));  // creating one
  if (::geteuid() != 0) {                 // root writes anywhere
    const std::string ro = dir.file("ro");
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    expect_error([&] { check_writable(ro + "/s.safetensors"); }, {"directory " + ro + " is not writable"});
    fs::permissions(ro, fs::perms::owner_all);
  }
  EXPECT_EQ(dir.entries().size(), 1u + (::geteuid() != 0));  // checking creates nothing
}

}  // namespace
}  // namespace swapffn

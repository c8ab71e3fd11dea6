// Input files: a FIFO or other non-regular file is refused at once (never waited on), a file read
// whole cannot fault the reader when it changes afterwards, a path with a NUL byte is refused
// instead of cut short, and same_file tells an output that would overwrite an input.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "io_test_util.hpp"
#include "swapffn/config.hpp"
#include "swapffn/file_input.hpp"
#include "swapffn/file_output.hpp"
#include "swapffn/fused_options.hpp"
#include "swapffn/safetensors.hpp"
#include "swapffn/state.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {
namespace {

namespace fs = std::filesystem;
namespace st = safetensors;
using testing::expect_error;
using testing::TempDir;
using testing::write_bytes;

// Runs f in a child process, which must end within 20 s by an Error whose message holds `needle`:
// a reader that blocks on a FIFO fails the test instead of hanging it.
template <class F>
void refuses_without_blocking(F&& f, const std::string& needle) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 3;  // no error
    try {
      f();
    } catch (const Error& e) {
      code = std::string(e.what()).find(needle) != std::string::npos ? 0 : 4;
    }
    ::_exit(code);
  }
  int status = 0;
  for (int i = 0; i < 2000 && ::waitpid(pid, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "the reader blocked (killed after 20 s)";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: no error, 4: an error without '" << needle << "'";
}

TEST(FileInput, AFifoIsRefusedByEveryReaderWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.file("f.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  refuses_without_blocking([&] { read_regular_file(fifo, "input", 1 << 20); }, "not a regular file (a FIFO)");
  refuses_without_blocking([&] { Weights::load(fifo); }, "not a regular file");
  refuses_without_blocking([&] { State::load(fifo); }, "not a regular file");
  refuses_without_blocking([&] { load_tuning(fifo, "H100", 1024, 4096); }, "tuning cache");
}

TEST(FileInput, DirectoriesAndDevicesAreRefusedByKind) {
  TempDir dir;
  expect_error([&] { read_regular_file(dir.path().string(), "input", 1 << 20); }, {"input: ", "a directory"});
  expect_error([&] { read_regular_file("/dev/null", "input", 1 << 20); }, {"a character device"});
}

TEST(FileInput, ReadsWholeFilesAndRefusesOnesOverTheLimit) {
  TempDir dir;
  const std::string f = dir.file("a");
  write_bytes(f, "hello");
  const auto bytes = read_regular_file(f, "input", 5);
  ASSERT_EQ(bytes.size(), 5u);
  EXPECT_EQ(static_cast<char>(bytes[4]), 'o');
  expect_error([&] { read_regular_file(f, "input", 4); }, {"5 bytes, more than the 4-byte limit"});
  expect_error([&] { read_regular_file(dir.file("missing"), "input", 4); }, {"cannot open", "No such file"});
}

// Errors of the environment are FileErrors (the Python layer raises them as OSErrors too); a
// malformed file's content is a plain Error.
TEST(FileInput, FilesThatCannotBeReadOrWrittenAreFileErrors) {
  TempDir dir;
  EXPECT_THROW(read_regular_file(dir.file("missing"), "input", 4), FileError);
  EXPECT_THROW(read_regular_file(dir.path().string(), "input", 4), FileError);
  EXPECT_THROW(check_writable(dir.file("no_dir") + "/x"), FileError);
  EXPECT_THROW(Weights::load(dir.file("missing")), FileError);
  write_bytes(dir.file("junk"), "not safetensors at all");
  try {
    Weights::load(dir.file("junk"));
    ADD_FAILURE() << "junk loaded";
  } catch (const FileError&) {
    ADD_FAILURE() << "a malformed file is no FileError";
  } catch (const Error&) {
  }
}

// The mapped reader faulted (SIGBUS) when the file shrank under it; the reader now holds a copy.
TEST(FileInput, AReaderSurvivesItsFileBeingTruncated) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  std::vector<float> v(1 << 16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  st::Writer w;
  w.add_f32("v", {int64_t(v.size())}, v);
  w.write(path);
  const st::Reader r(path);
  fs::resize_file(path, 0);
  EXPECT_EQ(r.to_float("v"), v);
}

TEST(FileInput, APathWithANulByteIsRefusedNotCut) {
  TempDir dir;
  const std::string cut = dir.file("x"), nul = cut + std::string(1, '\0') + ".safetensors";
  write_bytes(cut, "not a model");
  expect_error([&] { st::Reader r(nul); }, {"NUL byte at offset " + std::to_string(cut.size())});
  expect_error([&] { write_file_atomically(nul, "data"); }, {"NUL byte"});
  expect_error([&] { check_writable(nul); }, {"NUL byte"});
  EXPECT_EQ(testing::read_bytes(cut), "not a model");
  expect_error([&] { check_path("", "model"); }, {"model: the path is empty"});
}

TEST(FileInput, SameFileSeesLinksAndSpellingsOfOnePath) {
  TempDir dir;
  const std::string a = dir.file("a"), b = dir.file("b");
  write_bytes(a, "1");
  write_bytes(b, "2");
  fs::create_hard_link(a, dir.file("hard"));
  fs::create_symlink(a, dir.file("soft"));
  EXPECT_TRUE(same_file(a, a));
  EXPECT_TRUE(same_file(a, dir.file("hard")));
  EXPECT_TRUE(same_file(dir.file("soft"), a));
  EXPECT_TRUE(same_file(a, (dir.path() / "." / "a").string()));
  EXPECT_FALSE(same_file(a, b));
  EXPECT_TRUE(same_file(dir.file("new"), (dir.path() / ".." / dir.path().filename() / "new").string()));
  EXPECT_FALSE(same_file(dir.file("new"), a));
}

}  // namespace
}  // namespace swapffn

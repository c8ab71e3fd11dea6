// Helpers for the file-format tests: a self-cleaning temporary directory, raw safetensors bytes for
// malformed-input cases, and an expectation that a call throws swapffn::Error naming a problem.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "swapffn/error.hpp"

namespace swapffn::testing {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "swapffn_test_" + std::to_string(::getpid()) + "_" +
                       std::to_string(counter++) + "_" + std::to_string(std::random_device{}());
    if (info) name += std::string("_") + info->name();
    dir_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  const std::filesystem::path& path() const { return dir_; }
  // Names of the entries in the directory (to check that no temporary file is left behind).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) out.push_back(e.path().filename());
    return out;
  }

 private:
  std::filesystem::path dir_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline std::string le_u64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// A safetensors file from a header text and a data section, with the header length as it is.
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  return le_u64(header.size()) + header + data;
}

// Runs f and expects swapffn::Error whose message contains every one of the given substrings.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string_view> substrings) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning '" << *substrings.begin() << "', got none";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (auto s : substrings)
      EXPECT_NE(msg.find(s), std::string::npos) << "message lacks '" << s << "': " << msg;
  }
}

}  // namespace swapffn::testing

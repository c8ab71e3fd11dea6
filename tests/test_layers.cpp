// Who may include whom (docs/ARCHITECTURE.md): every quoted include of every source file, checked
// against its folder's allowed prefixes. Core knows no backend, no backend includes a sibling, the
// engine never includes bench code, the NVFP4 library stands on the CUDA runtime layer alone, and
// the CLI and the Python extension reach the engine through the public headers only.
// (The CMake configure step checks the same of the libraries' link lines.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace swapffn {
namespace {

namespace fs = std::filesystem;

struct Layer {
  std::string folder;                // relative to the source tree
  std::vector<std::string> allowed;  // prefixes of quoted includes
};

const std::vector<Layer>& layers() {
  static const std::vector<Layer> l = {
      {"include/swapffn/nvfp4", {"swapffn/"}},
      {"include/swapffn", {"swapffn/"}},
      {"src/core", {"swapffn/", "core/"}},
      {"src/cuda/runtime", {"swapffn/", "cuda/runtime/"}},
      {"src/cuda/kernels", {"swapffn/", "cuda/runtime/", "cuda/kernels/"}},
      {"src/cuda/common", {"swapffn/", "cuda/runtime/", "cuda/kernels/", "cuda/common/"}},
      {"src/cuda/unfused", {"swapffn/", "cuda/runtime/", "cuda/kernels/", "cuda/common/", "cuda/backends.hpp", "cuda/unfused/"}},
      {"src/cuda/fused", {"swapffn/", "cuda/runtime/", "cuda/kernels/", "cuda/common/", "cuda/backends.hpp", "cuda/fused/"}},
      {"src/cuda", {"swapffn/"}},  // cuda/backends.hpp: the factories the registry calls
      {"src/nvfp4", {"swapffn/error.hpp", "swapffn/bf16.hpp", "swapffn/device.hpp", "swapffn/nvfp4/", "cuda/runtime/", "nvfp4/"}},
      {"src/engine", {"swapffn/", "core/", "cuda/backends.hpp"}},
      {"src/bench", {"swapffn/", "cuda/", "bench/"}},
      // The front ends stand on the public headers (the engine's device face included) and the bench;
      // cmd_nvfp4 times the NVFP4 kernels with the runtime's checks until NVFP4 has its own tool.
      {"apps", {"swapffn/", "bench/", "commands.hpp", "swapffn_commit.hpp", "cmd_nvfp4.cpp:cuda/runtime/"}},
      {"python/src", {"swapffn/", "nvfp4_module.hpp"}},
  };
  return l;
}

const Layer* layer_of(const std::string& rel) {
  const Layer* best = nullptr;  // the deepest folder holding the file
  for (const Layer& l : layers())
    if (rel.rfind(l.folder + "/", 0) == 0 && (!best || l.folder.size() > best->folder.size())) best = &l;
  return best;
}

TEST(Layers, EveryIncludeRunsDownTheLayers) {
  const fs::path root = SWAPFFN_SOURCE_DIR;
  const std::regex include_re(R"(^\s*#\s*include\s+"([^"]+)\")");
  int files = 0;
  for (const char* top : {"include", "src", "apps", "python/src"})
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      if (!entry.is_regular_file()) continue;
      const std::string ext = entry.path().extension().string();
      if (ext != ".hpp" && ext != ".cpp" && ext != ".cu" && ext != ".cuh") continue;
      const std::string rel = fs::relative(entry.path(), root).string();
      const Layer* layer = layer_of(rel);
      ASSERT_NE(layer, nullptr) << rel << " lies in no layer of this test: add its folder";
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (!std::regex_search(line, m, include_re)) continue;
        const std::string inc = m[1];
        bool ok = false;
        for (std::string prefix : layer->allowed) {
          // "<file>:<prefix>": a prefix allowed to that one file only
          if (const size_t colon = prefix.find(':'); colon != std::string::npos) {
            if (entry.path().filename() != prefix.substr(0, colon)) continue;
            prefix = prefix.substr(colon + 1);
          }
          ok = ok || inc.rfind(prefix, 0) == 0;
        }
        EXPECT_TRUE(ok) << rel << ":" << n << " includes \"" << inc << "\", outside what " << layer->folder
                        << " may include";
      }
    }
  EXPECT_GT(files, 50);
}

}  // namespace
}  // namespace swapffn

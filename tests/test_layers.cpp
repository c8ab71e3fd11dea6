// Who may include whom (docs/ARCHITECTURE.md): every quoted include of every source file, checked
// against its folder's allowed prefixes. Core knows no backend, no backend includes a sibling, the
// engine never includes bench code, the CLI and the Python extension reach the engine through the
// public headers only, and NVFP4 (nvfp4/) stands apart: it includes no engine internals (only core's
// error type and device face, the CUDA runtime layer and its own headers), and nothing outside it
// includes NVFP4. (The CMake configure step checks the same of the link lines.)
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
      {"include/swapffn", {"swapffn/"}},
      {"src/core", {"swapffn/", "core/"}},
      {"src/cuda/runtime", {"swapffn/", "cuda/runtime/"}},
      {"src/cuda/kernels", {"swapffn/", "cuda/runtime/", "cuda/kernels/"}},
      {"src/cuda/common", {"swapffn/", "cuda/runtime/", "cuda/kernels/", "cuda/common/"}},
      {"src/cuda/unfused", {"swapffn/", "cuda/runtime/", "cuda/kernels/", "cuda/common/", "cuda/backends.hpp", "cuda/unfused/"}},
      {"src/cuda/fused", {"swapffn/", "cuda/runtime/", "cuda/kernels/", "cuda/common/", "cuda/backends.hpp", "cuda/fused/"}},
      {"src/cuda", {"swapffn/"}},  // cuda/backends.hpp: the factories the registry calls
      {"src/engine", {"swapffn/", "core/", "cuda/backends.hpp"}},
      {"src/bench", {"swapffn/", "cuda/", "bench/"}},
      // The front ends stand on the public headers (the engine's device face included) and the bench.
      {"apps", {"swapffn/", "bench/", "commands.hpp", "swapffn_commit.hpp"}},
      {"python/src", {"swapffn/"}},
      // NVFP4: the library's internal headers are its nvfp4_*; the tool writes its results as the CLI does.
      {"nvfp4/include/swapffn/nvfp4", {"swapffn/nvfp4/"}},
      {"nvfp4/src", {"swapffn/error.hpp", "swapffn/nvfp4/", "cuda/runtime/", "nvfp4_"}},
      {"nvfp4/tools", {"swapffn/error.hpp", "swapffn/device.hpp", "swapffn/file_output.hpp", "swapffn/nvfp4/",
                       "swapffn/command_line.hpp", "cuda/runtime/cuda_check.hpp", "nvfp4_bench.hpp",
                       "swapffn_commit.hpp"}},
      {"nvfp4/python", {"swapffn/error.hpp", "swapffn/device.hpp", "swapffn/nvfp4/", "cuda/runtime/cuda_check.hpp",
                        "torch_tensors.hpp", "nvfp4_arguments.hpp", "workspaces.hpp"}},
      {"nvfp4/tests", {"swapffn/error.hpp", "swapffn/device.hpp", "swapffn/nvfp4/", "cli_test_util.hpp"}},
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
  for (const char* top : {"include", "src", "apps", "python/src", "nvfp4"})
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
        // "swapffn/" lets the engine's folders include any public header, but NVFP4's only in nvfp4/.
        const bool nvfp4 = rel.rfind("nvfp4/", 0) == 0;
        EXPECT_TRUE(nvfp4 || inc.rfind("swapffn/nvfp4/", 0) != 0)
            << rel << ":" << n << " includes \"" << inc << "\": only nvfp4/ includes NVFP4";
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

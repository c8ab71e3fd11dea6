// swapffn info: version, build options, backends and the GPU found (or why none).
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "commands.hpp"
#include "swapffn_commit.hpp"
#include "swapffn/device.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cli {

void add_info_command(CLI::App& app) {
  auto has_gpu = std::make_shared<bool>(false);
  auto* cmd = add_command(app, "info", "version, build options, backends and the GPU found", "swapffn info");
  cmd->add_flag("--has-gpu", *has_gpu,
                "exit 0 only when a Hopper GPU is present and the CUDA backends are built");
  cmd->callback([has_gpu] {
#ifdef SWAPFFN_WITH_CUDA
    const bool cuda_built = true;
#else
    const bool cuda_built = false;
#endif
    const GpuInfo g = query_gpu();
    if (*has_gpu) {
      SWAPFFN_REQUIRE(cuda_built, "no usable GPU: this build has no CUDA backends");
      SWAPFFN_REQUIRE(g.is_hopper(), "no usable GPU: " + g.why_not_hopper());
      std::printf("Hopper GPU present: %s\n", g.name.c_str());
      return;
    }
    std::string backends;
    for (const auto& b : backend_names()) backends += (backends.empty() ? "" : ", ") + b;
    std::printf("swapffn %s (commit %s)\n", SWAPFFN_VERSION, SWAPFFN_GIT_COMMIT);
    std::printf("build: CUDA backends %s, backends: %s, CPU threads: %u\n", cuda_built ? "on" : "off",
                backends.c_str(), std::thread::hardware_concurrency());
    if (!g.present) {
      std::printf("GPU: none (%s)\n", g.why_absent.c_str());
      return;
    }
    std::printf("GPU: %s, compute capability %d.%d, %d SMs, L2 %.1f MiB, smem/block opt-in %zu KiB, "
                "memory %.1f GiB, driver %d, runtime %d%s\n",
                g.name.c_str(), g.cc_major, g.cc_minor, g.sm_count, g.l2_bytes / 1048576.0,
                g.smem_per_block_optin / 1024, g.global_mem_bytes / 1073741824.0, g.driver_version,
                g.runtime_version, g.is_hopper() ? "" : " (not Hopper: CUDA backends unavailable)");
  });
}

}  // namespace swapffn::cli

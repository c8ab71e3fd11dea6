// `swapffn-nvfp4 bench` (nvfp4_bench.cpp): the NVFP4 kernels timed on the competition's shapes.
#pragma once
#include <CLI/CLI.hpp>

namespace swapffn::nvfp4::tool {

void add_bench_command(CLI::App& app);

}  // namespace swapffn::nvfp4::tool

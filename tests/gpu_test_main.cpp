// The GPU test binary's main: without a Hopper GPU it fails, so that a device run that lost its GPU
// cannot pass by skipping every test.
#include <cstdio>

#include <gtest/gtest.h>

#include "swapffn/device.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const swapffn::GpuInfo gpu = swapffn::query_gpu();
  if (!gpu.is_hopper()) {
    std::fprintf(stderr, "%s: no Hopper GPU (%s): these tests need one\n", argv[0], gpu.why_not_hopper().c_str());
    return 1;
  }
  return RUN_ALL_TESTS();
}

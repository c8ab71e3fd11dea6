// The quantisers' division by the block scale (fp8_block_quantize.cuh: div_by_scale, the quotient
// refined by fused multiply-adds) against IEEE division (__fdiv_rn) on the device, over the
// quotients that matter and the ones that decide a code:
// - random blocks over 2^-89..2^100 of amax, values anywhere in the block (zeros of both signs,
//   the block maximum, tiny values);
// - values placed within a few ulps of every e4m3 rounding midpoint (where one ulp of the quotient
//   flips the code), for scales with many significand bits.
// The codes must be identical everywhere; the quotients bit for bit wherever |x / scale| >= 2^-10
// (the smallest quotient that can round to a nonzero code). The scales below kMinRefinedScale
// divide, and are covered by the quantiser tests' tiny blocks (gpu_test_fp8_quantize.cpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/kernels/fp8_block_quantize.cuh"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn::cuda {
namespace {

// Per pair i: mismatch[i] bit 0 when the codes differ, bit 1 when quotients that matter differ.
__global__ void compare_divisions(const float* x, const float* scale, int64_t n, uint8_t* mismatch) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float s = scale[i];
  const float fast = div_by_scale(x[i], s, __frcp_rn(s)), ieee = __fdiv_rn(x[i], s);
  const auto code = [](float q) { return __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3); };
  uint8_t m = code(fast) != code(ieee) ? 1 : 0;
  if (fabsf(ieee) >= 0x1p-10f && __float_as_uint(fast) != __float_as_uint(ieee)) m |= 2;
  mismatch[i] = m;
}

TEST(Fp8BlockQuantize, DivisionByTheScaleIsIeeeDivision) {
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<float> u(-1.f, 1.f), sig(1.f, 2.f);
  std::uniform_int_distribution<int> ex(-89, 100), pick(0, 9);
  std::vector<float> x, scale;
  const auto add = [&](float xv, float amax) {
    const float s = fp8::block_scale(amax);
    if (!(s >= kMinRefinedScale) || !std::isfinite(xv) || std::fabs(xv) > amax) return;
    x.push_back(xv);
    scale.push_back(s);
  };
  // Random blocks.
  for (int i = 0; i < (1 << 22); ++i) {
    const float amax = std::ldexp(sig(rng), ex(rng));
    const int k = pick(rng);
    const float t = k == 0 ? 0.f : k == 1 ? -0.f : k == 2 ? (i % 2 ? 1.f : -1.f) : k == 3 ? u(rng) * 0x1p-12f : u(rng);
    add(amax * t, amax);
  }
  // Values near the e4m3 rounding midpoints: m * scale rounded, and the floats a few ulps around it.
  std::vector<float> midpoints;
  for (int c = 0; c < 0x7E; ++c) midpoints.push_back(0.5f * (fp8::e4m3_to_float(uint8_t(c)) + fp8::e4m3_to_float(uint8_t(c + 1))));
  for (int i = 0; i < (1 << 14); ++i) {
    const float amax = std::ldexp(sig(rng), ex(rng)), s = fp8::block_scale(amax);
    for (const float mid : midpoints) {
      const float at = mid * s;
      for (int d = -3; d <= 3; ++d) {
        float v = at;
        for (int j = 0; j < std::abs(d); ++j) v = std::nextafter(v, d > 0 ? INFINITY : 0.f);
        add(i % 2 ? v : -v, amax);
      }
    }
  }
  const int64_t n = int64_t(x.size());
  ASSERT_GT(n, int64_t{10'000'000});
  DeviceBuffer<float> xd, sd;
  xd.upload(x);
  sd.upload(scale);
  DeviceBuffer<uint8_t> mismatch;
  mismatch.upload(std::vector<uint8_t>(size_t(n), 0xFF));  // poison: every pair must be written
  compare_divisions<<<unsigned((n + 255) / 256), 256>>>(xd.get(), sd.get(), n, mismatch.get());
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> got(static_cast<size_t>(n));
  CUDA_CHECK(cudaMemcpy(got.data(), mismatch.get(), got.size(), cudaMemcpyDeviceToHost));
  int64_t codes = 0, quotients = 0, shown = 0;
  for (int64_t i = 0; i < n; ++i) {
    codes += got[size_t(i)] & 1;
    quotients += (got[size_t(i)] >> 1) & 1;
    if (got[size_t(i)] && shown++ < 5)
      ADD_FAILURE() << "x = " << x[size_t(i)] << " (" << std::hexfloat << x[size_t(i)] << "), scale = " << scale[size_t(i)]
                    << std::defaultfloat << ": mismatch " << int(got[size_t(i)]);
  }
  EXPECT_EQ(codes, 0) << "codes differ from IEEE division's of " << n;
  EXPECT_EQ(quotients, 0) << "quotients >= 2^-10 differ from IEEE division's of " << n;
}

}  // namespace
}  // namespace swapffn::cuda

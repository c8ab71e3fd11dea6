// Deterministic pseudo-random device data for benchmarks and tuning (never zeros: a matrix
// product on zeros runs faster than on real data). Uniform in [-scale, scale), from a hash of
// (seed, index), so no host generation or transfer of large buffers is needed.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace swapffn::cuda {

void fill_random_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_random_f32(float* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
// e4m3 codes (OCP E4M3FN, as bytes) of uniform values in [-scale, scale), saturated to +-448: never NaN.
void fill_random_e4m3(uint8_t* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace swapffn::cuda

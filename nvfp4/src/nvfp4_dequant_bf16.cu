// Dequantize an NVFP4 operand to a dense bf16 matrix (rows x K per batch).
//
// Why it exists: the bench compares every NVFP4 kernel with cuBLAS bf16 on the same product, and
// checks the large shapes (too big for the CPU reference) against that cuBLAS result; both need
// the operands in bf16. Not on any hot path: one thread per byte, written for clarity.
#include <cuda_bf16.h>

#include "cuda/runtime/cuda_check.hpp"
#include "nvfp4_launch.hpp"
#include "swapffn/nvfp4/device.hpp"

namespace swapffn::cuda::nvfp4 {

namespace {

__device__ float e2m1_value(uint32_t code) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (code & 8) ? -mag[code & 7] : mag[code & 7];
}

__device__ float e4m3_value(uint32_t bits) {
  const uint32_t e = (bits >> 3) & 15, m = bits & 7;
  if (e == 15 && m == 7) return __int_as_float(0x7fc00000);
  const float mag = e == 0 ? ldexpf(static_cast<float>(m), -9) : ldexpf(1.0f + m / 8.0f, static_cast<int>(e) - 7);
  return (bits & 0x80) ? -mag : mag;
}

__global__ void dequant_bf16_kernel(const OperandArgs op, int64_t rows, int64_t k, int64_t batches, __nv_bfloat16* out) {
  const int64_t bytes_per_batch = rows * (k / 2);
  const int64_t total = bytes_per_batch * batches;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / bytes_per_batch, rem = i % bytes_per_batch, r = rem / (k / 2), kb = rem % (k / 2);
    const int64_t j = (2 * kb) / 16;
    const int64_t soff = op.rk_blocks == 0
                             ? r * (k / 16) + j
                             : (r / 128) * op.rk_blocks * 512 + (j / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (j % 4);
    const uint32_t byte = op.data[b * op.data_batch + r * (k / 2) + kb];
    const float s = e4m3_value(op.scales[b * op.scale_batch + soff]);
    out[(b * rows + r) * k + 2 * kb] = __float2bfloat16_rn(e2m1_value(byte & 15) * s);
    out[(b * rows + r) * k + 2 * kb + 1] = __float2bfloat16_rn(e2m1_value(byte >> 4) * s);
  }
}

}  // namespace

}  // namespace swapffn::cuda::nvfp4

namespace swapffn::nvfp4 {

void dequantize_to_bf16(const Operand& op, int64_t rows, int64_t k, int64_t batches, void* out, Stream stream) {
  SWAPFFN_REQUIRE(op.data && op.scales && out && rows > 0 && batches > 0 && k > 0 && k % 16 == 0,
                  "dequantize_to_bf16: null pointer or bad shape rows=" + std::to_string(rows) + " K=" + std::to_string(k));
  const auto args = swapffn::cuda::nvfp4::operand_args(op, rows, k);
  swapffn::cuda::nvfp4::dequant_bf16_kernel<<<1024, 256, 0, stream>>>(args, rows, k, batches,
                                                                      static_cast<__nv_bfloat16*>(out));
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::nvfp4

// Owning device buffers and operand upload for the NVFP4 tests, CLI check and bench.
#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "cuda/runtime/cuda_check.hpp"
#include "swapffn/nvfp4/device.hpp"

namespace swapffn::nvfp4 {

DeviceBuffer::DeviceBuffer(size_t bytes) : n_(bytes) {
  if (bytes) CUDA_CHECK(cudaMalloc(&p_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}
void DeviceBuffer::upload(const void* src, size_t bytes) {
  SWAPFFN_REQUIRE(bytes <= n_, "DeviceBuffer::upload: " + std::to_string(bytes) + " bytes into " + std::to_string(n_));
  CUDA_CHECK(cudaMemcpy(p_, src, bytes, cudaMemcpyHostToDevice));
}
void DeviceBuffer::download(void* dst, size_t bytes) const {
  SWAPFFN_REQUIRE(bytes <= n_, "DeviceBuffer::download: " + std::to_string(bytes) + " bytes from " + std::to_string(n_));
  CUDA_CHECK(cudaMemcpy(dst, p_, bytes, cudaMemcpyDeviceToHost));
}
void DeviceBuffer::fill(uint8_t byte) {
  if (n_) CUDA_CHECK(cudaMemset(p_, byte, n_));
}

DeviceOperand upload(const HostOperand& op, ScaleLayout layout, int64_t batch_rows) {
  const int64_t rows = batch_rows > op.rows ? batch_rows : op.rows;
  const int64_t kb = op.k / 2, ks = op.k / 16;
  // Padded copy: real rows first in every batch, then random bytes and NaN scales.
  std::vector<uint8_t> data(rows * kb * op.batches), plain(rows * ks * op.batches, 0x7F);
  uint64_t x = 0x243F6A8885A308D3ull;
  for (auto& d : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    d = static_cast<uint8_t>(x);
  }
  for (int64_t b = 0; b < op.batches; ++b) {
    std::copy_n(op.data.begin() + b * op.rows * kb, op.rows * kb, data.begin() + b * rows * kb);
    std::copy_n(op.scales.begin() + b * op.rows * ks, op.rows * ks, plain.begin() + b * rows * ks);
  }
  std::vector<uint8_t> scales = plain;
  if (layout == ScaleLayout::blocked_128x4) {
    scales.assign(scale_bytes(layout, rows, ks, op.batches), 0x7F);
    for (int64_t b = 0; b < op.batches; ++b)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < ks; ++j)
          scales[scale_offset(layout, rows, ks, i, j, b)] = plain[scale_offset(ScaleLayout::plain, rows, ks, i, j, b)];
  }
  DeviceOperand d;
  d.data = DeviceBuffer(data.size());
  d.data.upload(data.data(), data.size());
  d.scales = DeviceBuffer(scales.size());
  d.scales.upload(scales.data(), scales.size());
  d.view.data = d.data.get();
  d.view.scales = d.scales.get();
  d.view.layout = layout;
  d.view.batch_rows = rows;
  return d;
}

DeviceBuffer make_workspace(size_t bytes) {
  DeviceBuffer w(bytes);
  w.fill(0);
  return w;
}

}  // namespace swapffn::nvfp4

// Device-side helpers around the NVFP4 kernels for the tests and the bench: owning
// device buffers, upload of a host operand in either scale layout (optionally padded to more rows
// per batch, with NaN scales in the padding so that any use of it shows), and dequantization of
// an operand to bf16 (for the cuBLAS baseline of the bench). CUDA builds only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "swapffn/nvfp4/nvfp4.hpp"
#include "swapffn/nvfp4/reference.hpp"

namespace swapffn::nvfp4 {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  size_t bytes() const { return n_; }
  void upload(const void* src, size_t bytes);
  void download(void* dst, size_t bytes) const;
  void fill(uint8_t byte);  // synchronous memset

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

struct DeviceOperand {
  DeviceBuffer data, scales;
  Operand view;  // pointers into data/scales, the layout and batch_rows
};

// Upload op with scales in `layout`; batch_rows > op.rows pads every batch with random data rows
// and NaN scales (0x7F); blocked padding bytes are NaN as well.
DeviceOperand upload(const HostOperand& op, ScaleLayout layout, int64_t batch_rows = 0);

// Workspace for a split-K config, zeroed (size 0 -> empty buffer).
DeviceBuffer make_workspace(size_t bytes);

// out[b][r][k] = bf16(value) for rows x K per batch (bf16 holds every e2m1 x e4m3 product).
void dequantize_to_bf16(const Operand& op, int64_t rows, int64_t k, int64_t batches, void* out, Stream stream);

}  // namespace swapffn::nvfp4

#include "cuda/runtime/tma.hpp"

#include <cudaTypedefs.h>

#include <string>

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    SWAPFFN_ASSERT(q == cudaDriverEntryPointSuccess && p != nullptr,
                   "the CUDA driver does not provide cuTensorMapEncodeTiled (driver too old?)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A 2-D row-major matrix of `elem_bytes`-byte elements in boxes one 128-byte swizzle atom wide.
CUtensorMap encode_2d_sw128(CUtensorMapDataType type, uint32_t elem_bytes, const char* type_name, const void* base,
                            uint64_t rows, uint64_t cols, uint32_t box_rows) {
  SWAPFFN_ASSERT(box_rows >= 1 && box_rows <= 256, "TMA box rows must be in [1, 256], got " +
                                                       std::to_string(box_rows));
  SWAPFFN_ASSERT(reinterpret_cast<uintptr_t>(base) % 16 == 0 && (cols * elem_bytes) % 16 == 0,
                 "TMA needs 16-byte aligned base and row pitch");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols * elem_bytes};
  const cuuint32_t box[2] = {128 / elem_bytes, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  CUresult r = encoder()(&map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SWAPFFN_ASSERT(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(r) +
                                        " for a " + std::to_string(rows) + "x" + std::to_string(cols) + " " +
                                        type_name + " matrix");
  return map;
}

}  // namespace

CUtensorMap make_tma_2d_bf16_sw128(const void* base, uint64_t rows, uint64_t cols, uint32_t box_rows,
                                   uint32_t box_cols) {
  SWAPFFN_ASSERT(box_cols * 2 == 128, "a 128-byte-swizzled box must be 64 bf16 wide, got " +
                                          std::to_string(box_cols));
  return encode_2d_sw128(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, "bf16", base, rows, cols, box_rows);
}

CUtensorMap make_tma_2d_f32_sw128(void* base, uint64_t rows, uint64_t cols, uint32_t box_rows) {
  return encode_2d_sw128(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, "fp32", base, rows, cols, box_rows);
}

CUtensorMap make_tma_3d_u8(const void* base, uint64_t cols, uint64_t rows, uint64_t batches, uint64_t row_pitch,
                           uint64_t batch_pitch, uint32_t box_cols, uint32_t box_rows, bool swizzle_128b,
                           uint32_t elem_bytes) {
  SWAPFFN_ASSERT(elem_bytes == 1 || elem_bytes == 8, "TMA byte tensors use 1- or 8-byte elements, not " +
                                                         std::to_string(elem_bytes));
  SWAPFFN_ASSERT(swizzle_128b ? box_cols == 128 && elem_bytes == 1
                              : (box_cols % 16 == 0 && box_cols >= 16 && box_cols <= 256 * elem_bytes),
                 "TMA byte box of " + std::to_string(box_cols) + " columns does not fit its swizzle mode");
  SWAPFFN_ASSERT(cols % elem_bytes == 0, "TMA tensor of " + std::to_string(cols) + " bytes per row is not a whole "
                                             "number of " + std::to_string(elem_bytes) + "-byte elements");
  SWAPFFN_ASSERT(box_rows >= 1 && box_rows <= 256, "TMA box rows must be in [1, 256], got " +
                                                       std::to_string(box_rows));
  SWAPFFN_ASSERT(reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_pitch % 16 == 0 && batch_pitch % 16 == 0,
                 "TMA needs a 16-byte aligned base and pitches");
  CUtensorMap map{};
  const cuuint64_t dims[3] = {cols / elem_bytes, rows, batches};
  const cuuint64_t strides[2] = {row_pitch, batch_pitch};
  const cuuint32_t box[3] = {box_cols / elem_bytes, box_rows, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  CUresult r = encoder()(&map, elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT64, 3,
                         const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                         swizzle_128b ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SWAPFFN_ASSERT(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(r) +
                                        " for a " + std::to_string(batches) + "x" + std::to_string(rows) + "x" +
                                        std::to_string(cols) + " byte tensor");
  return map;
}

}  // namespace swapffn::cuda

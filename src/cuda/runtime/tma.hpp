// Tensor maps for the bulk tensor copy engine (TMA). The driver's encoder is fetched at run time
// through the runtime's entry-point query, so the binaries don't link libcuda and still load (and
// skip GPU tests) on machines without a driver.
#pragma once
#include <cuda.h>

#include <cstdint>

namespace swapffn::cuda {

// A 2-D row-major bf16 matrix [rows, cols] (cols contiguous) read in boxes of
// box_rows x box_cols with 128-byte swizzle (box_cols * 2 must be 128: one swizzle atom wide).
// Out-of-range rows of a box read as zeros.
CUtensorMap make_tma_2d_bf16_sw128(const void* base, uint64_t rows, uint64_t cols, uint32_t box_rows,
                                   uint32_t box_cols);

// A 2-D row-major fp32 matrix [rows, cols] written (stored or reduce-added) in boxes of box_rows x 32
// columns with 128-byte swizzle (32 fp32 are one swizzle atom). Box rows past `rows` are not written.
CUtensorMap make_tma_2d_f32_sw128(void* base, uint64_t rows, uint64_t cols, uint32_t box_rows);

// A 3-D byte tensor [batches][rows][cols] (cols contiguous; row and batch pitches in bytes, multiples
// of 16) read in boxes of box_rows x box_cols bytes within one batch, with 128-byte swizzle when
// swizzle_128b (box_cols must then be 128) or none (box_cols a multiple of 16). Out-of-range rows
// of a box read as zeros. elem_bytes = 8 views the bytes as 8-byte elements, which lets an
// unswizzled box be up to 2 KB wide (TMA boxes have at most 256 elements per dimension); cols and
// box_cols stay in bytes. Keep a copy's innermost start coordinate 16-byte aligned: on the H100 a
// box started 8 bytes into a row trapped as an illegal instruction.
CUtensorMap make_tma_3d_u8(const void* base, uint64_t cols, uint64_t rows, uint64_t batches, uint64_t row_pitch,
                           uint64_t batch_pitch, uint32_t box_cols, uint32_t box_rows, bool swizzle_128b,
                           uint32_t elem_bytes = 1);

}  // namespace swapffn::cuda

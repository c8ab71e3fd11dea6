// Dequantize the A operand (the activations) of an NVFP4 GEMM / dual GEMM / grouped GEMM once, to
// fp16, for the register-operand (`*_rs`) tiles.
//
// Why it exists: every CTA of an M block would otherwise convert the same A tile (at M = 128 and
// N = 7168 the whole of A 56 times); converted once here, the tiles copy A by TMA straight into
// their stages and convert only the weights.
//
// Output layout: [L][M][K] fp16, each 64-wide k block's 128 bytes in a permuted k order (the values
// are exact, nvfp4_dequant.cuh): the order in which the weights' register fragments hold k
// (nvfp4_rs_mainloop.cuh; the grouped pre-pass writes each group's activations into the group's
// part of the workspace). Raw chunk t (0..3) of a 128-k step, elements 32t..32t+31, feeds the 64-k blocks
//   h = 0, 1 with its words (2h, 2h + 1); dequant8's pair s of word 2h + u sits at k16 step s,
//   columns 8u + 2t, 8u + 2t + 1 of block h (bytes 32 s + 16 u + 4 t), exactly where the wgmma finds
//   the weight thread t's fragment pair of the same k.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "cuda/runtime/cuda_check.hpp"
#include "nvfp4_dequant.cuh"
#include "nvfp4_launch.hpp"
#include "cuda/runtime/launch.hpp"
#include "cuda/runtime/tma.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda::nvfp4 {

namespace {

constexpr int kThreads = 256;
// A warp stages its output in shared memory, 8 groups of 4 chunks (one 128-k step
// of one row: 256 contiguous output bytes), each group padded to 272 bytes so that the 32 lanes'
// scattered 4-byte writes fall in 32 different banks; then each lane stores 64 contiguous bytes.
constexpr int kGroupPitch = 272;
constexpr int kWarpStaging = 8 * kGroupPitch;

// Chunk i (16 raw bytes: 32 elements, two scales) of an (m, k, l) operand, into `out` ([l][m][k]
// fp16 in fragment order), for i < total. Called by all 32 lanes of a warp for 32 consecutive
// chunks (i = a multiple of 32 + lane), with the warp's kWarpStaging bytes of shared memory.
// Consecutive lanes take consecutive chunks: a warp reads 512 contiguous bytes of a row and writes
// 2 KB of fp16. K % 256 == 0, so every 4-lane group is one whole 128-k step of one row, and
// total % 8 == 0, so a group's lanes are all in range or all past it. total < 2^31 (the launcher
// checks), so the index arithmetic is 32-bit: 64-bit divisions are long dependent chains in front
// of the one load each thread waits for.
//
// Why the staging: in fragment order each of a chunk's 16 result words lands 4 bytes from the
// neighbouring chunk's, so direct stores were 16 scattered 4-byte stores per lane, each warp
// store touching 8 half-written sectors. Staged, the 4 lanes of a group store its 256 bytes as
// 4 x 64 contiguous bytes, whole 32-byte sectors.
__device__ __forceinline__ void predequant_chunk(const OperandArgs& a, uint32_t m, uint32_t k, uint32_t i, uint32_t total,
                                                 uint8_t* out, uint8_t* staging) {
  const bool valid = i < total;
  const uint32_t chunks_per_row = k / 32;
  const uint32_t row = i / chunks_per_row, chunk = i - row * chunks_per_row;  // row over all batches: b * m + r
  const uint32_t b = row / m, r = row - b * m;
  uint32_t h[16];
  if (valid) {
    const uint4 raw = *reinterpret_cast<const uint4*>(a.data + b * a.data_batch + static_cast<int64_t>(r) * (k / 2) + chunk * 16);
    const uint32_t j = chunk * 2;  // first of the chunk's two scale columns (j % 4 == 2q)
    const int64_t soff = a.rk_blocks == 0
                             ? static_cast<int64_t>(r) * (k / 16) + j
                             : static_cast<int64_t>(r / 128) * a.rk_blocks * 512 + (j / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (j % 4);
    const uint32_t two_scales = *reinterpret_cast<const uint16_t*>(a.scales + b * a.scale_batch + soff);
    dequant32(raw, two_scales, h);
  }
  uint8_t* const row_out = out + static_cast<int64_t>(row) * k * 2;
  {
    const int lane = threadIdx.x & 31, t = lane & 3;  // t == chunk % 4
    uint8_t* group = staging + (lane >> 2) * kGroupPitch;
    __syncwarp();  // the previous chunks' reads of the staging buffer are done
    if (valid)
#pragma unroll
      for (int w = 0; w < 4; ++w)  // word w = 2 h + u of the chunk
#pragma unroll
        for (int s = 0; s < 4; ++s)
          *reinterpret_cast<uint32_t*>(group + (w / 2) * 128 + 32 * s + 16 * (w % 2) + 4 * t) = h[4 * w + s];
    __syncwarp();
    if (!valid) return;
    uint8_t* const step = row_out + (chunk / 4) * 256;
#pragma unroll
    for (int q = 0; q < 4; ++q)
      *reinterpret_cast<uint4*>(step + 64 * q + 16 * t) = *reinterpret_cast<const uint4*>(group + 64 * q + 16 * t);
  }
}

// Chunks [0, total) of an operand, warp by warp (a warp's chunks are consecutive).
__device__ __forceinline__ void predequant_all(const OperandArgs& a, uint32_t m, uint32_t k, uint32_t total, uint8_t* out,
                                               unsigned blocks, unsigned block) {
  __shared__ __align__(16) uint8_t staging[kThreads / 32][kWarpStaging];
  uint8_t* warp_staging = staging[threadIdx.x >> 5];
  const uint32_t lane = threadIdx.x & 31;
  for (uint32_t base = block * kThreads + (threadIdx.x & ~31u); base < total; base += blocks * kThreads)
    predequant_chunk(a, m, k, base + lane, total, out, warp_staging);
}

__global__ void __launch_bounds__(kThreads) predequant_a_kernel(const OperandArgs a, int64_t m, int64_t k, int64_t l,
                                                                uint8_t* out) {
  // The GEMM that reads `out` is launched as a programmatic dependent: its CTAs may start their
  // prologue and first B copies as soon as an SM has room (the rs CTAs need a whole SM's registers,
  // so in practice as this grid's blocks leave), and wait (griddepcontrol.wait) before their first
  // copy of A.
  pdl_launch_dependents();
  predequant_all(a, static_cast<uint32_t>(m), static_cast<uint32_t>(k), static_cast<uint32_t>(l * m * (k / 32)), out,
                         gridDim.x, blockIdx.x);
}

// The grouped GEMM's pre-pass: grid row y converts group y's activations into its g.a16.
template <int G>
__global__ void __launch_bounds__(kThreads) predequant_a_grouped_kernel(const __grid_constant__ GroupedArgsOf<G> args) {
  pdl_launch_dependents();
  const GroupArgs& g = args.g[blockIdx.y];
  predequant_all(g.a, static_cast<uint32_t>(g.m), static_cast<uint32_t>(g.k), static_cast<uint32_t>(static_cast<int64_t>(g.m) * (g.k / 32)),
                                     g.a16, gridDim.x, blockIdx.x);
}

}  // namespace

size_t predequant_a_bytes(int64_t m, int64_t k, int64_t l) { return static_cast<size_t>(l * m * k * 2); }

namespace {

// The kernels index chunks in 32 bits (predequant_chunk).
void check_chunk_count(int64_t chunks) {
  SWAPFFN_REQUIRE(chunks < (int64_t{1} << 31), "NVFP4 activations pre-pass: " + std::to_string(chunks) +
                                                   " 32-element chunks; at most 2^31 - 1 (an fp16 copy of 128 GiB)");
}

}  // namespace

void launch_predequant_a(const GemmArgs& args, cudaStream_t stream) {
  const int64_t threads = args.l * args.m * (args.k / 32);
  check_chunk_count(threads);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((threads + kThreads - 1) / kThreads, 4096));
  predequant_a_kernel<<<blocks, kThreads, 0, stream>>>(args.a, args.m, args.k, args.l, args.a16);
  SWAPFFN_CHECK_LAUNCH();
}

template <int G>
void launch_predequant_a_grouped(const GroupedArgsOf<G>& args, cudaStream_t stream) {
  int64_t most = 0;
  for (int g = 0; g < args.groups; ++g) most = std::max<int64_t>(most, static_cast<int64_t>(args.g[g].m) * (args.g[g].k / 32));
  check_chunk_count(most);
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>((most + kThreads - 1) / kThreads, 1, 4096 / args.groups));
  predequant_a_grouped_kernel<G><<<dim3(blocks, static_cast<unsigned>(args.groups)), kThreads, 0, stream>>>(args);
  SWAPFFN_CHECK_LAUNCH();
}
template void launch_predequant_a_grouped(const GroupedArgsOf<kFewGroups>&, cudaStream_t);
template void launch_predequant_a_grouped(const GroupedArgs&, cudaStream_t);

CUtensorMap make_tma_a16(uint8_t* a16, int64_t m, int64_t k, int64_t l, int tile_m) {
  const uint64_t row_bytes = static_cast<uint64_t>(k) * 2;
  return make_tma_3d_u8(a16, row_bytes, m, l, row_bytes, row_bytes * m, 128, tile_m, true);
}

}  // namespace swapffn::cuda::nvfp4

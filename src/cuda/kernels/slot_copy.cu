// Sequence rows copied by index in one launch: a slot step gathers B rows of up to 4 MB each (the
// default model) where B separate copies would each pay a launch.
#include "cuda/kernels/slot_copy.hpp"

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kThreads = 256;

// Block (x, r) copies chunk x of row r's RAM (16-byte vectors) and, from block x = 0, its map.
__global__ void __launch_bounds__(kThreads) slot_copy_kernel(SlotCopyArgs a) {
  const int64_t r = blockIdx.y;
  const int64_t src = a.src_rows ? a.src_rows[r] : r, dst = a.dst_rows ? a.dst_rows[r] : r;
  const int64_t vecs = a.row_ram * 2 / 16;
  const uint4* s = reinterpret_cast<const uint4*>(a.src_ram + src * a.row_ram);
  uint4* d = reinterpret_cast<uint4*>(a.dst_ram + dst * a.row_ram);
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < vecs; i += int64_t(gridDim.x) * kThreads) d[i] = s[i];
  if (blockIdx.x == 0)
    for (int64_t i = threadIdx.x; i < a.row_map; i += kThreads) a.dst_map[dst * a.row_map + i] = a.src_map[src * a.row_map + i];
}

}  // namespace

void launch_slot_copy(const SlotCopyArgs& a, cudaStream_t stream) {
  SWAPFFN_REQUIRE(a.rows >= 0 && a.rows <= 65535, "slot copy: " + std::to_string(a.rows) + " rows (at most 65535)");
  SWAPFFN_REQUIRE(a.row_ram * 2 % 16 == 0, "slot copy: a row's RAM must be whole 16-byte vectors");
  if (a.rows == 0) return;
  const int64_t vecs = a.row_ram * 2 / 16;
  const unsigned chunks = static_cast<unsigned>(std::min<int64_t>((vecs + kThreads * 8 - 1) / (kThreads * 8), 1024));
  slot_copy_kernel<<<dim3(chunks, static_cast<unsigned>(a.rows)), kThreads, 0, stream>>>(a);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda

// The initial state in a slot step's padding rows, one launch for the batch (see the header).
#include "cuda/kernels/slot_padding_rows.hpp"

#include <algorithm>

#include "cuda/runtime/cuda_check.hpp"
#include "swapffn/state.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kThreads = 256;

// Block (x, r) fills chunk x of row r's RAM (16-byte vectors) when row r is padding; block x = 0
// also its map.
__global__ void __launch_bounds__(kThreads) init_padding_rows_kernel(const StepIO* io, SlotRows a) {
  const int64_t r = blockIdx.y;
  if (!is_padding_row(io->pool, r)) return;
  const int64_t vecs = a.row_ram * 2 / 16;
  uint4* ram = reinterpret_cast<uint4*>(a.batch_ram + r * a.row_ram);
  const int64_t step = int64_t(gridDim.x) * kThreads;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < vecs; i += step) ram[i] = make_uint4(0, 0, 0, 0);
  if (blockIdx.x != 0) return;
  for (int64_t i = threadIdx.x; i < a.row_map; i += kThreads) a.batch_map[r * a.row_map + i] = kIdentityStreamMap;
}

}  // namespace

void launch_init_padding_rows(const StepIO* io, const SlotRows& a, cudaStream_t stream) {
  SWAPFFN_REQUIRE(a.rows >= 0 && a.rows <= 65535,
                  "slot padding rows: " + std::to_string(a.rows) + " rows (at most 65535)");
  SWAPFFN_REQUIRE(a.row_ram * 2 % 16 == 0, "slot padding rows: a row's RAM must be whole 16-byte vectors");
  if (a.rows == 0) return;
  const int64_t vecs = a.row_ram * 2 / 16;
  const auto chunks = static_cast<unsigned>(std::clamp<int64_t>((vecs + kThreads * 8 - 1) / (kThreads * 8), 1, 1024));
  init_padding_rows_kernel<<<dim3(chunks, static_cast<unsigned>(a.rows)), kThreads, 0, stream>>>(io, a);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda

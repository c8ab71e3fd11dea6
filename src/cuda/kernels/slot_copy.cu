// Sequence rows copied by slot id in one launch: a slot step moves B rows of up to 4 MB each (the
// default model), where B separate copies would each pay a launch.
#include "cuda/kernels/slot_copy.hpp"

#include <algorithm>

#include "cuda/runtime/cuda_check.hpp"
#include "swapffn/state.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kThreads = 256;

// Block (x, r) copies chunk x of row r's RAM (16-byte vectors); block x = 0 also its map.
template <bool kGather>
__global__ void __launch_bounds__(kThreads) slot_rows_kernel(const StepIO* io, SlotRows a) {
  const int64_t r = blockIdx.y;
  const SlotSource src = io->pool;
  const bool pad = is_padding_row(src, r);
  const int64_t s = pad ? 0 : src.ids[r];
  const int64_t vecs = a.row_ram * 2 / 16;
  uint4* batch = reinterpret_cast<uint4*>(a.batch_ram + r * a.row_ram);
  uint4* pool = reinterpret_cast<uint4*>(src.ram + s * a.row_ram);
  const int64_t step = int64_t(gridDim.x) * kThreads;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < vecs; i += step) {
    if (kGather)
      batch[i] = pad ? make_uint4(0, 0, 0, 0) : pool[i];
    else if (!pad)
      pool[i] = batch[i];
  }
  if (blockIdx.x != 0) return;
  for (int64_t i = threadIdx.x; i < a.row_map; i += kThreads) {
    if (kGather)
      a.batch_map[r * a.row_map + i] = pad ? kIdentityStreamMap : src.map[s * a.row_map + i];
    else if (!pad)
      src.map[s * a.row_map + i] = a.batch_map[r * a.row_map + i];
  }
}

template <bool kGather>
void launch(const StepIO* io, const SlotRows& a, cudaStream_t stream) {
  SWAPFFN_REQUIRE(a.rows >= 0 && a.rows <= 65535, "slot copy: " + std::to_string(a.rows) + " rows (at most 65535)");
  SWAPFFN_REQUIRE(a.row_ram * 2 % 16 == 0, "slot copy: a row's RAM must be whole 16-byte vectors");
  if (a.rows == 0) return;
  const int64_t vecs = a.row_ram * 2 / 16;
  const auto chunks = static_cast<unsigned>(std::clamp<int64_t>((vecs + kThreads * 8 - 1) / (kThreads * 8), 1, 1024));
  slot_rows_kernel<kGather><<<dim3(chunks, static_cast<unsigned>(a.rows)), kThreads, 0, stream>>>(io, a);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace

void launch_gather_slots(const StepIO* io, const SlotRows& a, cudaStream_t stream) { launch<true>(io, a, stream); }

void launch_scatter_slots(const StepIO* io, const SlotRows& a, cudaStream_t stream) { launch<false>(io, a, stream); }

}  // namespace swapffn::cuda

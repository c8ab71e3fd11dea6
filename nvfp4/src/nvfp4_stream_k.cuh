// Stream-K schedule of the register-operand tiles (TileConfig::stream_k): a persistent grid of P
// CTAs divides all tiles' 128-k stages evenly, CTA c taking the stage range [begin(c), begin(c+1))
// of the tiles laid end to end, so a range may end inside one tile and go on into the next.
//
// Why: the competition's shapes have 56-128 output tiles of 128 rows on 132 SMs, so one CTA per tile
// leaves SMs idle (dual 512x3072x7168: 96 tiles; GEMM 128x7168x16384 at split 2: 112 CTAs), and
// an integer split cannot balance them (a split tile's CTAs all run its K / split stages).
//
// A tile covered by several CTAs gets one partial sum per CTA, added in CTA order by the CTA of its
// first part (stream_k_fixup), so the result depends on P but never on timing.
#pragma once
#include <cstdint>

#include "nvfp4_launch.hpp"
#include "nvfp4_tile_mainloop.cuh"

namespace swapffn::cuda::nvfp4 {

// A CTA's work on one tile: stages [kt0, kt0 + count) of it, part `index` of the tile's `parts`
// (its CTAs in order).
struct StreamKSegment {
  int tile, kt0, count, index, parts;
};

struct StreamK {
  int64_t iters;  // tiles x stages
  int ctas;       // P <= iters, so every CTA has at least one stage
  int stages;     // 128-k stages per tile

  __device__ int64_t begin(int c) const { return static_cast<int64_t>(c) * iters / ctas; }
  // The CTA whose range holds stage x: the largest c with begin(c) <= x.
  __device__ int cta_of(int64_t x) const { return static_cast<int>(((x + 1) * ctas - 1) / iters); }

  // Calls f(segment) for each tile CTA c works on, in order.
  template <class F>
  __device__ void for_each(int c, F&& f) const {
    const int64_t end = begin(c + 1);
    for (int64_t x = begin(c); x < end;) {
      const int tile = static_cast<int>(x / stages), kt0 = static_cast<int>(x % stages);
      const int count = static_cast<int>(end - x < stages - kt0 ? end - x : stages - kt0);
      const int first = cta_of(static_cast<int64_t>(tile) * stages);
      const int last = cta_of(static_cast<int64_t>(tile) * stages + stages - 1);
      f(StreamKSegment{tile, kt0, count, c - first, last - first + 1});
      x += count;
    }
  }

  // The workspace slot of part j of `tile`: each CTA has two, for its first tile and its last (a
  // partial part is always one of those), so 2 P slots serve any schedule.
  __device__ int slot(int tile, int j) const {
    const int c = cta_of(static_cast<int64_t>(tile) * stages) + j;
    return 2 * c + (begin(c) / stages == tile ? 0 : 1);
  }
};

// The output tiles of a stream-K GEMM or dual GEMM launch of BM x BN tiles and BK-k stages,
// numbered m-fastest (as the plain grid's CTAs, so the tiles that share a weight tile are
// neighbours), and the schedule of this grid's CTAs over their stages.
template <int BM, int BN, int BK>
struct StreamKTiles {
  int tiles_m, tiles_n;
  StreamK sk;

  __device__ explicit StreamKTiles(const GemmArgs& a)
      : tiles_m(static_cast<int>((a.m + BM - 1) / BM)), tiles_n(static_cast<int>((a.n + BN - 1) / BN)),
        sk{static_cast<int64_t>(tiles_m) * tiles_n * a.l * (a.k / BK), static_cast<int>(gridDim.x),
           static_cast<int>(a.k / BK)} {}
  __device__ int m_tile(int tile) const { return tile % tiles_m; }
  __device__ int n_tile(int tile) const { return (tile / tiles_m) % tiles_n; }
  __device__ int batch(int tile) const { return tile / (tiles_m * tiles_n); }
};

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The fixup of a tile split among CTAs. Part 0 is the last segment of its CTA (its range ends
// inside the tile), so it finishes last or nearly; it owns the tile: the other parts store their
// fp32 partials (kAcc floats in each of threads [0, kThreads)) in their slots and count
// themselves in, and the owner waits for all of them, then adds them to its own sums in part order
// 1..parts-1 and returns true with `flat` holding the total (the others return false). The owner
// never stores its own part, and the reads happen once, in the CTA that needs them. Waiting is safe
// because every CTA of the grid is resident (the API keeps stream_k at most the SM count, and an rs
// CTA takes an SM) and a non-owner part never waits. The owner resets the counter for the next launch.
template <int kAcc, int kThreads, class SlotOf>
__device__ bool stream_k_fixup(float* flat, float* partials, int* counter, int part, int parts, SlotOf slot_of) {
  float4* all = reinterpret_cast<float4*>(partials);
  auto slot = [&](int j) { return all + static_cast<int64_t>(slot_of(j)) * (kAcc / 4) * kThreads; };
  if (part != 0) {
    store_part<kAcc, kThreads>(flat, slot(part));
    __threadfence();
    acc_threads_sync<kThreads>();
    if (threadIdx.x == 0) atomicAdd(counter, 1);
    return false;
  }
  if (threadIdx.x == 0) {
    while (load_acquire(counter) != parts - 1) __nanosleep(100);
    *counter = 0;
    __threadfence();
  }
  acc_threads_sync<kThreads>();
  sum_parts<kAcc, kThreads>(flat, slot, 1, parts);
  return true;
}

}  // namespace swapffn::cuda::nvfp4

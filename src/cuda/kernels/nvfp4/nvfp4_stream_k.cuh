// Stream-K schedule of the register-operand tiles (TileConfig::stream_k): a persistent grid of P
// CTAs divides all tiles' 128-k stages evenly, CTA c taking the stage range [begin(c), begin(c+1))
// of the tiles laid end to end, so a range may end inside one tile and go on into the next.
//
// Why: the issue's shapes have 56-128 output tiles of 128 rows on 132 SMs, so one CTA per tile
// leaves SMs idle (dual 512x3072x7168: 96 tiles; GEMM 128x7168x16384 at split 2: 112 CTAs), and
// an integer split cannot balance them (a split tile's CTAs all run its K / split stages).
//
// A tile covered by several CTAs gets one partial sum per CTA; the last CTA to finish its part
// adds them in CTA order (ordered_reduce), so the result depends on P but never on timing.
#pragma once
#include <cstdint>

#include "cuda/kernels/nvfp4/nvfp4_tile_mainloop.cuh"

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

}  // namespace swapffn::cuda::nvfp4

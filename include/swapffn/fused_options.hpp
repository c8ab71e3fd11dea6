// Kernel choices of the fused backend that a caller may pin (`--kernels`) or a tuning cache written
// by `swapffn tune` may hold, as types: parsed once at the boundary (CLI, Python), never in the step.
// Tile choices leave every output's bits alone; the event head fixes a summation order, so the
// engine refuses a head that changes with the batch size (batch invariance).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "swapffn/fp8.hpp"

namespace swapffn {

// The compiled dual GEMM tiles (128 x 256 outputs x 4 stages), by how they walk the tiles.
enum class DualGemmTile : uint8_t {
  bn256,                  // one tile per CTA: one wave at B = 1
  bn256_persistent,       // one CTA per SM walking the tiles
  bn256_persistent_mc2,   // persistent, each W13 tile multicast to a pair of M tiles
};
// The event head: the folded router (five dot products per row) or the cuBLASLt router GEMM with
// the decision/swap kernel (any d_model).
enum class EventHead : uint8_t { folded, cublas };

// The fused-fp8 backend's up projection: cuBLASLt's block-scaled GEMM into bf16, then a SwiGLU and
// quantisation kernel; or our Hopper e4m3 kernel with both in its epilogue on the fp32 sums. They
// round differently (a bf16 intermediate or none), so the engine refuses one that changes with B.
enum class Fp8UpGemm : uint8_t { cublas, sm90 };

const char* to_string(DualGemmTile t);  // "bn256_st4_sk1_mc1", "..._p", "bn256_st4_sk1_mc2_p"
const char* to_string(EventHead h);     // "folded", "cublas"
const char* to_string(Fp8UpGemm g);     // "cublas", "sm90"
inline constexpr DualGemmTile kDualGemmTiles[] = {DualGemmTile::bn256, DualGemmTile::bn256_persistent,
                                                  DualGemmTile::bn256_persistent_mc2};
inline constexpr int kMaxRowGroups = 8;  // more only cut the rows finer than the GEMM tiles use

struct FusedChoice {
  std::optional<DualGemmTile> up;
  std::optional<EventHead> router;
  std::optional<int> row_groups;  // 1..kMaxRowGroups
  std::optional<Fp8UpGemm> fp8_up;  // fused-fp8 only
  // fused-fp8 only: the scaling a bf16 model is quantised in at load (blocks when unset); an fp8
  // model runs its own, and a different one pinned is refused.
  std::optional<fp8::Scaling> fp8_scales;
  bool any() const { return up || router || row_groups || fp8_up || fp8_scales; }
  std::string describe() const;   // "up=...,router=...,groups=N,fp8up=...,scales=...", the set parts
  bool operator==(const FusedChoice&) const = default;
};

struct TunedChoice {
  int64_t batch = 0;
  FusedChoice choice;
};

struct FusedOptions {
  FusedChoice pinned;              // at every batch size, over the tuned entries
  std::vector<TunedChoice> tuned;  // at batch B: the entry of the largest tuned batch not above B
  bool any() const { return pinned.any() || !tuned.empty(); }
  // The choices at batch B: the pinned ones over those of the tuned entry.
  FusedChoice at(int64_t batch) const;
  std::string describe() const;
};

// "up=<tile>,router=folded|cublas,groups=<1..8>,fp8up=cublas|sm90,scales=rows|blocks", each part
// optional; throws naming the bad item.
FusedChoice parse_fused_choice(const std::string& spec);

// The entries of a tuning cache when it was tuned for `device` and this model shape, else none (the
// defaults are then the honest choice). Throws naming the file and field when it is malformed.
std::vector<TunedChoice> load_tuning(const std::string& path, const std::string& device, int64_t d_model, int64_t d_ff);

}  // namespace swapffn

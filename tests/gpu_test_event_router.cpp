// The MMA event router's launch checks and its grids (src/cuda/kernels/event_router.cu).
// - Pointer checks: the kernels bulk-copy their weights into shared memory, which needs 16-byte
//   aligned sources, so a misaligned weight must be refused by name before the launch. The check
//   comes before any CUDA call, so the pointers lead into host memory (never dereferenced) and that
//   test runs without a GPU.
// - Grids: every row split (CTAs of 8, 16 or 32 rows) must give the same bits for every output:
//   h, the banks, the stream map, the trace and the FFN operand, on random inputs where some rows
//   swap and some do not.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda/kernels/event_router.hpp"
#include "event_router_test_util.hpp"
#include "gpu_backend_test_util.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {
namespace {

using router_test::RouterInputs;
using router_test::RouterOutputs;
using router_test::run_event;
using router_test::expect_same_outputs;
using router_test::in_two_launches;

// Two bytes past p: aligned for bf16, not for a bulk copy.
template <class T>
T* two_bytes_off(T* p) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + 2);
}

TEST(EventRouter, RefusesAMisalignedBulkCopiedWeightNamingIt) {
  alignas(16) static float storage[256];
  const auto* w = reinterpret_cast<const __nv_bfloat16*>(storage);
  auto* norm_out = reinterpret_cast<__nv_bfloat16*>(storage);
  const EventRouterArgs aligned{.h = storage, .router_gain = storage, .router_w = w, .swap_w = storage,
                                .swap_b = storage, .bank_w = storage, .bank_b = storage, .ram = norm_out,
                                .stream_map = nullptr, .io = nullptr, .event = 0, .row_begin = 0, .rows = 8,
                                .total_rows = 8, .d_model = 128,
                                .d_router = 16, .norm_gain = storage, .norm_out = norm_out, .eps = 1e-6f};
  const std::pair<const char*, void (*)(EventRouterArgs&)> cases[] = {
      {"router_w", [](EventRouterArgs& a) { a.router_w = two_bytes_off(a.router_w); }},
      {"router_gain", [](EventRouterArgs& a) { a.router_gain = two_bytes_off(a.router_gain); }},
      {"norm_gain", [](EventRouterArgs& a) { a.norm_gain = two_bytes_off(a.norm_gain); }},
      {"swap_w", [](EventRouterArgs& a) { a.swap_w = two_bytes_off(a.swap_w); }},
      {"bank_w", [](EventRouterArgs& a) { a.bank_w = two_bytes_off(a.bank_w); }},
  };
  for (const auto& [name, misalign] : cases) {
    EventRouterArgs a = aligned;
    misalign(a);
    try {
      launch_event_router(a, nullptr, false);
      ADD_FAILURE() << "a misaligned " << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(name) + " is not 16-byte aligned"), std::string::npos)
          << e.what();
    }
  }
}

// One event on fresh random inputs (seeded: the same for every grid), through `grid`; with split > 0
// as two launches, rows [0, split) and [split, rows) (the fused backend's row groups).
RouterOutputs run_router(int64_t rows, int64_t D, int64_t R, bool with_norm, RouterGrid grid, uint32_t seed,
                         int64_t split = 0) {
  return run_event(RouterInputs::random(rows, D, R, seed), with_norm,
                   in_two_launches(split, [grid](const EventRouterArgs& a) { launch_event_router(a, nullptr, false, grid); }));
}

TEST(EventRouter, EveryGridGivesTheSameBits) {
  SKIP_WITHOUT_HOPPER();
  struct Shape {
    int64_t rows, d, r;
    bool norm;
  };
  // Rows that fill no CTA evenly, the defaults' D and R, the smallest D and R, no norm.
  for (const Shape sh : {Shape{512, 1024, 64, true}, Shape{333, 1024, 64, true}, Shape{100, 256, 32, true},
                         Shape{40, 128, 16, true}, Shape{77, 512, 48, false}}) {
    const uint32_t seed = 1000 + static_cast<uint32_t>(sh.rows + sh.d + sh.r);
    const RouterOutputs ref = run_router(sh.rows, sh.d, sh.r, sh.norm, RouterGrid::cta8, seed);
    const std::string what = "rows " + std::to_string(sh.rows) + " D " + std::to_string(sh.d) + " R " +
                             std::to_string(sh.r) + (sh.norm ? "" : " (no norm)");
    // The inputs must exercise both sides of the gate and more than one slot, and every row is decided.
    int swapped = 0, slots = 0;
    for (size_t i = 0; i < ref.gate.size(); ++i) {
      ASSERT_LE(ref.gate[i], 1) << what << ": row " << i << " has no decision";
      ASSERT_LE(ref.slot[i], 3) << what << ": row " << i << " has no slot";
      swapped += ref.gate[i];
      slots |= 1 << ref.slot[i];
    }
    EXPECT_GT(swapped, 0) << what;
    EXPECT_LT(swapped, static_cast<int>(sh.rows)) << what;
    EXPECT_NE(slots & (slots - 1), 0) << what << ": one slot only";
    if (sh.norm) {
      for (size_t i = 0; i < ref.norm_out.size(); ++i)
        ASSERT_TRUE(std::isfinite(__bfloat162float(ref.norm_out[i]))) << what << ": FFN operand " << i << " not written";
    }
    // Each grid over all rows in one launch, and the 8- and 32-row CTAs over the rows in two
    // launches, split at a row that is not a multiple of 8.
    for (const auto& [g, split] : {std::pair{RouterGrid::cta16, int64_t{0}}, std::pair{RouterGrid::cta32, int64_t{0}},
                                   std::pair{RouterGrid::automatic, int64_t{0}}, std::pair{RouterGrid::cta8, sh.rows / 3 + 1},
                                   std::pair{RouterGrid::cta32, sh.rows / 2 + 3}}) {
      const RouterOutputs got = run_router(sh.rows, sh.d, sh.r, sh.norm, g, seed, split);
      const std::string where = what + ", grid " + to_string(g) + (split ? ", two launches split at row " + std::to_string(split) : "");
      expect_same_outputs(ref, got, where + " (against the 8-row CTAs)");
    }
  }
}

// Arguments for the launcher's checks only (refused before any CUDA call): every array in one
// aligned host buffer, rows 8..15 of 16, D = 128, R = 16.
EventRouterArgs args_for_checks() {
  alignas(16) static float storage[256];
  auto* bf = reinterpret_cast<__nv_bfloat16*>(storage);
  return {.h = storage, .router_gain = storage, .router_w = bf, .swap_w = storage, .swap_b = storage,
          .bank_w = storage, .bank_b = storage, .ram = bf, .stream_map = nullptr, .io = nullptr,
          .event = 0, .row_begin = 8, .rows = 8, .total_rows = 16, .d_model = 128, .d_router = 16,
          .norm_gain = nullptr, .norm_out = nullptr, .eps = 1e-6f};
}

TEST(EventRouter, RefusesARowRangeOutsideTheArrays) {
  const EventRouterArgs ok = args_for_checks();
  for (const auto& [begin, rows] : {std::pair<int64_t, int64_t>{9, 8}, {-1, 4}, {0, 17}, {4, -1}}) {
    EventRouterArgs a = ok;
    a.row_begin = begin;
    a.rows = rows;
    try {
      launch_event_router(a, nullptr, false);
      ADD_FAILURE() << "rows [" << begin << ", " << begin + rows << ") of 16 were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not within the 16 rows"), std::string::npos) << e.what();
    }
  }
}

TEST(EventRouter, RefusesTheCoreBroadcast) {
  EventRouterArgs a = args_for_checks();
  a.film_scale = a.film_shift = a.h;
  a.cores = 8;
  try {
    launch_event_router(a, nullptr, false);
    ADD_FAILURE() << "the MMA router accepted the core broadcast";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("folded router only"), std::string::npos) << e.what();
  }
}

TEST(EventRouter, RefusesAnUnknownGridName) {
  EXPECT_EQ(parse_router_grid("16"), RouterGrid::cta16);
  EXPECT_EQ(parse_router_grid("auto"), RouterGrid::automatic);
  try {
    parse_router_grid("24");
    ADD_FAILURE() << "grid 24 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'24'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace swapffn::cuda

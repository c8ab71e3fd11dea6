// launch_event_router's pointer checks (src/cuda/kernels/event_router.cu): the kernel bulk-copies its
// weights into shared memory, which needs 16-byte aligned sources, so a misaligned weight must be
// refused by name before the launch. The check comes before any CUDA call, so the pointers here lead
// into host memory (never dereferenced) and the test runs without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "cuda/kernels/event_router.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {
namespace {

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
                                .stream_map = nullptr, .io = nullptr, .event = 0, .rows = 8, .d_model = 128,
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

}  // namespace
}  // namespace swapffn::cuda

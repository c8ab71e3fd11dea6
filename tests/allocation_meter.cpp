#include "allocation_meter.hpp"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

// Live bytes are counted always (so frees of earlier allocations balance); the peak and the
// limit apply only while a meter is armed.
std::atomic<long long> g_live{0};
std::atomic<long long> g_peak{0};
std::atomic<long long> g_base{0};
std::atomic<size_t> g_limit{0};
std::atomic<bool> g_armed{false};
std::atomic<bool> g_refused{false};

void* counted_alloc(size_t n) {
  if (g_armed.load(std::memory_order_relaxed) && n > g_limit.load(std::memory_order_relaxed)) {
    g_refused = true;
    throw std::bad_alloc();
  }
  void* p = std::malloc(n ? n : 1);
  if (p == nullptr) throw std::bad_alloc();
  const long long live =
      g_live.fetch_add(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed) +
      static_cast<long long>(malloc_usable_size(p));
  if (g_armed.load(std::memory_order_relaxed)) {
    long long peak = g_peak.load(std::memory_order_relaxed);
    while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
    }
  }
  return p;
}

void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  g_live.fetch_sub(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}

void* counted_alloc_nothrow(size_t n) noexcept {
  try {
    return counted_alloc(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

}  // namespace

// Every non-aligned form, so no pointer from one allocator reaches another's delete (ASan checks).
void* operator new(size_t n) { return counted_alloc(n); }
void* operator new[](size_t n) { return counted_alloc(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return counted_alloc_nothrow(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return counted_alloc_nothrow(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

namespace swapffn::testing {

AllocationMeter::AllocationMeter(size_t limit) {
  g_limit = limit;
  g_refused = false;
  g_base = g_live.load();
  g_peak = g_base.load();
  g_armed = true;
}

AllocationMeter::~AllocationMeter() { g_armed = false; }

size_t AllocationMeter::peak_bytes() const {
  const long long d = g_peak.load() - g_base.load();
  return d > 0 ? static_cast<size_t>(d) : 0;
}

bool AllocationMeter::refused_a_request() const { return g_refused.load(); }

}  // namespace swapffn::testing

// The heap a piece of code asks for, measured by replacing the global operator new/delete in the
// CPU test binary (allocation_meter.cpp): the fuzz corpus uses it to bound what loading a file may
// allocate. Build-agnostic, unlike RLIMIT_AS, which an ASan build cannot run under (its shadow
// memory reserves terabytes of address space). It sees C++ allocations only (malloc is not
// counted; the library allocates through containers), on every thread.
#pragma once
#include <cstddef>

namespace swapffn::testing {

class AllocationMeter {
 public:
  // While it lives, a single request above `limit` bytes throws std::bad_alloc instead of being
  // tried, and the peak of live bytes is recorded.
  explicit AllocationMeter(size_t limit);
  ~AllocationMeter();
  AllocationMeter(const AllocationMeter&) = delete;
  AllocationMeter& operator=(const AllocationMeter&) = delete;

  // Highest live heap since construction, above what was live at construction.
  size_t peak_bytes() const;
  // Whether some request was above the limit (and refused).
  bool refused_a_request() const;
};

}  // namespace swapffn::testing

// L2Window: keeps one device address range in L2 for the kernels of a token step (an access-policy
// window with persisting hits, its misses streaming), over a persisting carve-out of L2 that it sets
// aside for as long as it lives. Why: the fused step's FFN weights (24 MiB at the defaults) fit in
// L2, but at large batch sizes the step streams several times their size of activations through L2
// per FFN step, which can evict them between two uses (docs/PERF.md, twenty-first session).
//
// The carve-out (cudaLimitPersistingL2CacheSize) belongs to the CUDA context, not to one stream: an
// L2Window sets it to what its range needs (at most what the device allows), and on destruction
// returns the persisting lines to normal and restores the limit it found. Two live windows in one
// context share one limit; the last one set wins until it is destroyed.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

namespace swapffn::cuda {

class L2Window {
 public:
  // `hit_fraction` (0, 1] of the range's lines persist (chosen by address), at most what the
  // carve-out holds. Throws naming the limit when the device has no persisting L2, the range is
  // empty or the fraction is outside (0, 1].
  L2Window(const void* base, size_t bytes, double hit_fraction = 1.0);
  ~L2Window();
  L2Window(const L2Window&) = delete;
  L2Window& operator=(const L2Window&) = delete;

  // Every kernel launched into `stream` from now on uses the window.
  void apply(cudaStream_t stream) const;
  // Every kernel node of `graph` (before instantiation) uses the window: captured kernels do not
  // reliably carry the capturing stream's window, so the graph is set explicitly.
  void apply(cudaGraph_t graph) const;
  // Kernels launched into `stream` from now on use no window.
  static void clear(cudaStream_t stream);

  const cudaAccessPolicyWindow& window() const { return window_; }
  size_t carve_out_bytes() const { return carve_out_; }
  size_t max_carve_out_bytes() const { return max_carve_out_; }
  double hit_fraction() const { return hit_fraction_; }

 private:
  cudaAccessPolicyWindow window_{};
  double hit_fraction_ = 1;
  size_t carve_out_ = 0, max_carve_out_ = 0, previous_limit_ = 0;
};

}  // namespace swapffn::cuda

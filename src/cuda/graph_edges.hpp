// Which kernel nodes of a captured graph are ours, and the edge rewrite that lets our kernels start
// while a library kernel before them (cuBLAS's, CUTLASS's) still runs.
// cuBLAS's kernels never trigger programmatic completion, so a kernel of ours captured after one
// with programmatic dependent launch can be launched only when every block of it has exited: the
// launch of our CTAs and their prologue then sit between the two kernels. An edge that leaves from
// the library node's launch-completion port instead lets our kernel be launched once every block
// of the library kernel has begun; griddepcontrol.wait in our kernel still waits for the library
// grid to complete and flush its memory, so nothing our kernel reads changes.
#pragma once
#include <cuda_runtime.h>

namespace swapffn::cuda {

// Records a kernel launched through launch_kernel_ex or launch_cooperative (thread-safe).
void note_own_kernel(const void* func);
bool is_own_kernel(const void* func);

// Rewrites every programmatic edge of `graph` whose upstream node is a library kernel (not
// is_own_kernel) to leave from that node's launch-completion port. Returns how many it rewrote.
int launch_after_library_kernels_begin(cudaGraph_t graph);

}  // namespace swapffn::cuda

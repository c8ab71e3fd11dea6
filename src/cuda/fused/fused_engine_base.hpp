// What the fused backends (`fused`, bf16; `fused-fp8`, e4m3) share: the token step around the FFN.
// Per event the event head (the folded event router: five dot products per row, decisions, swap and
// the FFN's RMSNorm; the first event's also does the core broadcast; or, for d_model > 1024, the
// cuBLASLt router GEMM and the decision/swap kernel), then k_ffn x {the FFN, the RMSNorm of the next
// GEMM's bf16 operand}. The FFN is the derived backend's: it reads the normed operand of its rows and
// updates their fp32 h in place. Row groups run side by side, each on its own stream, as branches of
// the step's CUDA graph (GpuEngine), so one group's head and RMSNorms run under another group's GEMMs.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cuda/common/batch_invariant_gemm.hpp"
#include "cuda/common/gpu_engine.hpp"
#include "cuda/fused/fused_config.hpp"
#include "cuda/kernels/ffn_operand.hpp"

namespace swapffn::cuda {

class FusedEngineBase : public GpuEngine {
 public:
  FusedEngineBase(const Weights& w, const EngineOptions& opt);

 protected:
  // Sizes the FFN's own buffers for `rows` = B * C rows in groups_ (set, as are kcfg_ and group_rows_),
  // growing only; returns whether any moved.
  virtual bool allocate_ffn(int64_t rows) = 0;
  virtual void release_ffn() = 0;
  // One FFN step of row group g, rows [g0, g0 + rows), on `stream`: reads the group's FFN operand
  // (ffn_operand: the FFN's RMSNorm of h) and updates h_'s rows (h += FFN when ffn_residual, else
  // h = FFN).
  virtual void enqueue_ffn(size_t g, int64_t g0, int64_t rows, cudaStream_t stream) = 0;
  // Where the head and the RMSNorms write row group g's FFN operand: by default nrm_'s rows (bf16).
  // With the cuBLAS head it must be those (they are also the router's operand).
  virtual FfnOperand ffn_operand(size_t g) const;

  // Group g's cuBLAS workspace (the groups run side by side).
  uint8_t* workspace(size_t g) const { return gemm_workspace_.get() + g * kGemmWorkspaceBytes; }

  static constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
  FusedKernelConfig kcfg_;
  OwnedLtHandle lt_;
  DeviceBuffer<bf16> nrm_;  // [M, D]: the normed GEMM operand (the FFN's, or the cuBLAS head's router's)
  int64_t group_rows_ = 0;  // the most rows of any group
  std::vector<std::pair<int64_t, int64_t>> groups_;  // first row, rows (row_group_ranges)

 private:
  bool allocate_batch(int64_t batch) final;
  void release_batch() final;
  void enqueue_step() final;
  // Whether the first event's head does the core broadcast; with no events the FiLM kernel runs.
  bool film_in_head() const;
  // Every event of row group g on `stream`: the head, then the FFN steps.
  void enqueue_group_events(size_t g, cudaStream_t stream);

  std::unique_ptr<BatchInvariantGemm> router_gemm_;  // the cuBLAS head's, made when a batch first runs it
  DeviceBuffer<uint8_t> gemm_workspace_;
  DeviceBuffer<float> z_;  // the cuBLAS head's logits
  DeviceBuffer<float> router_fold_;  // [5, D]: the folded router's vectors (fold_router)
  std::vector<std::unique_ptr<OwnedStream>> group_streams_;  // groups 1.. (group 0 runs on stream_)
  std::vector<std::unique_ptr<OwnedEvent>> group_done_;
  OwnedEvent fork_;
};

}  // namespace swapffn::cuda

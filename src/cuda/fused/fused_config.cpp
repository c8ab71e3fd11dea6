#include "cuda/fused/fused_config.hpp"

#include <cuda_runtime.h>

#include "cuda/kernels/folded_event_router.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {
namespace {

// The defaults for `rows` = B * C rows on this GPU (why: one line each; docs/PERFORMANCE.md has the
// measurements and the rejected options).
// The current device's SM count, 0 without one. Asked at every batch switch (a prefill at B = 1
// between decode steps), so one attribute query rather than the whole device properties.
int64_t current_sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

FusedKernelConfig defaults(const Config& cfg, int64_t rows) {
  const int64_t sms = current_sm_count();
  const int64_t up_tiles = (rows + 127) / 128 * ((2 * cfg.d_ff + 255) / 256);
  FusedKernelConfig k;
  // One tile per CTA while the tiles fit one wave (B = 1: 128 CTAs on 132 SMs; the persistent walk
  // is slower there); persistent beyond (the next tile's loads overlap the epilogue: -1.4..-2.5%
  // per step at B = 4..64); W13 multicast to pairs of M tiles from ~60 rows per SM (-1.1..-1.7%
  // per step at B = 16..64).
  k.up = sms == 0 || up_tiles <= sms ? DualGemmTile::bn256
         : rows < 60 * sms           ? DualGemmTile::bn256_persistent
                                     : DualGemmTile::bn256_persistent_mc2;
  // The folded head (no router GEMM) wherever it fits; the cuBLAS chain is the fallback.
  k.router = folded_event_router_fits(cfg.d_model) ? EventHead::folded : EventHead::cublas;
  // Two row groups from ~60 rows per SM (-3..-5% at B = 64 on the H100, -0.4..-1.9% on the H200);
  // below, the groups' one-wave GEMMs only share the SMs (+5% at B = 8, +26% at B = 1).
  k.row_groups = k.router == EventHead::folded && sms > 0 && rows >= 60 * sms ? 2 : 1;
  // fused-fp8's up projection: our dual GEMM with the SwiGLU and the quantisation in its epilogue,
  // which skips the bf16 [M, 2F] round trip of cuBLASLt's GEMM and a kernel per FFN step
  // (docs/PERFORMANCE.md, "The fp8 path"); a numerics class, so the same at every batch size.
  k.fp8_up = Fp8UpGemm::sm90;
  return k;
}

void apply(FusedKernelConfig& k, const FusedChoice& c) {
  if (c.up) k.up = *c.up;
  if (c.router) k.router = *c.router;
  if (c.row_groups) k.row_groups = *c.row_groups;
  if (c.fp8_up) k.fp8_up = *c.fp8_up;
}

FusedKernelConfig resolve(const Config& cfg, int64_t batch, const FusedOptions& opt) {
  FusedKernelConfig k = defaults(cfg, batch * cfg.core_count);
  apply(k, opt.at(batch));
  return k;
}

}  // namespace

FusedKernelConfig select_fused_config(const Config& cfg, int64_t batch, const FusedOptions& opt) {
  const FusedKernelConfig k = resolve(cfg, batch, opt), one = resolve(cfg, 1, opt);
  SWAPFFN_REQUIRE(k.router == one.router, std::string("fused: the event head must be the same at every batch size ") +
                                              "(batch invariance); batch " + std::to_string(batch) + " would use " +
                                              to_string(k.router) + ", batch 1 " + to_string(one.router));
  SWAPFFN_REQUIRE(k.fp8_up == one.fp8_up, std::string("fused-fp8: the up projection must be the same at every batch "
                                                       "size (batch invariance); batch ") +
                                              std::to_string(batch) + " would use " + to_string(k.fp8_up) +
                                              ", batch 1 " + to_string(one.fp8_up));
  SWAPFFN_REQUIRE(k.router == EventHead::cublas || folded_event_router_fits(cfg.d_model),
                  "fused: the folded event head needs d_model <= " + std::to_string(kFoldedRouterMaxDModel) +
                      " (d_model = " + std::to_string(cfg.d_model) + "); use router=cublas");
  SWAPFFN_REQUIRE(k.row_groups == 1 || k.router == EventHead::folded,
                  "fused: groups=" + std::to_string(k.row_groups) +
                      " needs router=folded (the cublas head's GEMM runs over all rows at once)");
  return k;
}

std::vector<std::pair<int64_t, int64_t>> row_group_ranges(int64_t rows, int groups) {
  SWAPFFN_REQUIRE(rows >= 0 && groups >= 1, "row groups: " + std::to_string(rows) + " rows in " +
                                                std::to_string(groups) + " groups");
  const int64_t blocks = (rows + 63) / 64, per = (blocks + groups - 1) / groups * 64;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t r0 = 0; r0 < rows; r0 += per) out.emplace_back(r0, std::min(per, rows - r0));
  return out;
}

void check_fused_supports(const Config& cfg, const std::string& backend) {
  const auto need = [&backend](bool ok, const std::string& what) {
    SWAPFFN_REQUIRE(ok, "backend '" + backend + "' cannot run this config: " + what + " (use backend 'unfused')");
  };
  need(cfg.d_model % 128 == 0, "d_model = " + std::to_string(cfg.d_model) + " is not a multiple of 128");
  // d_ff: whole 8-row W1/W3 pairs for the dual GEMM's interleave, and 64-k steps for cuBLAS's tiles.
  need(cfg.d_ff % 64 == 0, "d_ff = " + std::to_string(cfg.d_ff) + " is not a multiple of 64");
  need(cfg.d_router % 8 == 0, "d_router = " + std::to_string(cfg.d_router) + " is not a multiple of 8");
  need(cfg.d_model <= 16384 && cfg.d_ff <= 65536, "d_model/d_ff too large for 32-bit row offsets");
}

}  // namespace swapffn::cuda

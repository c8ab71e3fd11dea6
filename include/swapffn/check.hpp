// The agreement check of SPEC section 5, shared by `swapffn check` and the GPU tests: a backend
// decodes T tokens from the initial state recording its decision trace, then the reference decodes
// the same inputs FOLLOWING that trace token by token; decisions, delta and final state are compared.
#pragma once
#include <cstdint>
#include <string>

#include "swapffn/engine.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {

struct Tolerance {
  double tau = 0;           // a disagreeing decision fails only when the reference's margin exceeds tau
  double delta_rel_l2 = 0;  // max relative L2 error of delta over all tokens
  double state_rel_l2 = 0;  // max relative L2 error of the final ram
  std::string name;         // preset name ("bf16", "fp32") or "custom"

  // bf16 GEMM operands, fp32 accumulation. tau is a tunable guess at the margin bf16 rounding of
  // activations can flip (|s| and logit gaps are O(1) with the random init).
  static Tolerance bf16();
  // fp32 operands throughout (and the reference against itself).
  static Tolerance fp32();
  // e4m3 GEMM operands with block scales (SPEC section 5, fp8 paths), for runs of at most 4 tokens.
  static Tolerance fp8();
  // By name: "bf16", "fp8" or "fp32"; throws naming the unknown preset.
  static Tolerance preset(const std::string& name);
};

struct CheckReport {
  std::string backend;
  int64_t batch = 0, tokens = 0;
  Tolerance tol;

  int64_t gate_checked = 0;       // every gate decision: tokens * E * B * C
  int64_t slot_checked = 0;       // slot decisions where the backend's gate was open
  int64_t gate_disagree = 0;      // reference's own gate != backend's
  int64_t slot_disagree = 0;      // reference's own slot != backend's, gate open
  int64_t disagree_over_tau = 0;  // disagreements whose reference margin exceeds tau (failures)
  double max_disagree_margin = 0; // largest reference margin among all disagreements

  double delta_rel_l2 = 0;        // ||delta_backend - delta_ref|| / ||delta_ref|| over all tokens
  double state_rel_l2 = 0;        // same for the final ram
  bool stream_maps_equal = true;  // must hold: the trace was followed

  int64_t checked() const { return gate_checked + slot_checked; }
  int64_t disagreeing() const { return gate_disagree + slot_disagree; }
  bool passed() const;
  std::string summary() const;  // one line
};

// Runs `backend` and the reference (ref_threads CPU threads, 0 = all) on inputs
// decode_inputs(seed, tokens, batch, D) from State::init and compares them. Throws on errors of
// either engine; a disagreement is reported, not thrown.
CheckReport check_backend(const Weights& w, Engine& backend, int64_t batch, int64_t tokens,
                          uint64_t seed, const Tolerance& tol, int ref_threads = 0);

// Relative L2 error ||a - b|| / ||b|| in double (0 when both are zero, inf when only b is).
double rel_l2(const float* a, const float* b, int64_t n);

}  // namespace swapffn

// State: the recurrent memory of B sequences (SPEC section 3): ram [B, C, 4, D] bf16 and
// stream_map [B, C] u8, whose four 2-bit lanes always form a permutation of {0,1,2,3}.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "swapffn/bf16.hpp"
#include "swapffn/config.hpp"
#include "swapffn/error.hpp"

namespace swapffn {

// A valid state file that cannot be shown to belong to the model it is loaded for: saved for
// another model, or saved before state files recorded their model. A caller may choose to load it
// anyway with State::load(path).
class ForeignStateError : public Error {
 public:
  using Error::Error;
};

inline constexpr uint8_t kIdentityStreamMap = 0xE4;  // lanes (0,1,2,3)

inline int lane_of(uint8_t map, int j) { return (map >> (2 * j)) & 3; }
// True when the four lanes of map are a permutation of {0,1,2,3}.
bool is_valid_stream_map(uint8_t map);
// Swaps lanes 0 and j (j == 0 leaves map unchanged).
uint8_t swap_lanes(uint8_t map, int j);

struct State {
  int64_t batch = 0, cores = 0, d_model = 0;
  std::vector<bf16> ram;            // [B, C, 4, D]
  std::vector<uint8_t> stream_map;  // [B, C]

  // Zeros in ram, identity maps (SPEC section 3).
  static State init(const Config& cfg, int64_t batch);
  // A mid-decode state for tests and benchmarks: RAM ~ N(0,1) rounded to bf16 and a uniformly random
  // lane permutation per core, deterministic for the seed (swaps move real data from the first step).
  static State random(const Config& cfg, int64_t batch, uint64_t seed);

  // Throws naming the first invalid stream map byte by its (sequence, core) index, or a size mismatch.
  void validate() const;
  // Throws naming the first RAM value that is non-finite or beyond kMaxRamMagnitude (a state that
  // is given to an engine, loaded or saved: what an engine accepts, SPEC section 4).
  void check_ram_values() const;
  // Throws unless the state fits cfg (cores, d_model) and holds `batch` sequences.
  void check_matches(const Config& cfg, int64_t batch) const;

  // safetensors with tensors `ram` (BF16 [B,C,4,D]) and `stream_map` (U8 [B,C]), and the
  // fingerprint of the model the state belongs to (Weights::fingerprint) in the metadata.
  void save(const std::string& path, uint64_t model_fingerprint) const;
  // Loads a state file for the model with this fingerprint (model_name, e.g. its path, is for
  // messages). A file that is valid but saved for another model, or without a fingerprint, is
  // refused with ForeignStateError naming the file, both fingerprints and the model.
  static State load(const std::string& path, uint64_t model_fingerprint, const std::string& model_name);
  // Loads a state file whichever model it was saved for.
  static State load(const std::string& path);

  // Copies sequence b of this state into sequence dst_b of out (same C, D).
  void copy_sequence_to(int64_t b, State& out, int64_t dst_b) const;

  bool operator==(const State&) const = default;
};

}  // namespace swapffn

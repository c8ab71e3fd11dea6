// State initialisation and validation (SPEC section 3). Save/load live in src/io/state_io.cpp.
#include "swapffn/state.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"
#include "swapffn/random.hpp"

namespace swapffn {
namespace {

std::string hex_byte(uint8_t v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", static_cast<unsigned>(v));
  return buf;
}

}  // namespace

bool is_valid_stream_map(uint8_t map) {
  unsigned seen = 0;
  for (int j = 0; j < 4; ++j) seen |= 1u << lane_of(map, j);
  return seen == 0xFu;
}

uint8_t swap_lanes(uint8_t map, int j) {
  SWAPFFN_REQUIRE(j >= 0 && j < 4, "swap_lanes: slot " + std::to_string(j) + " is not in 0..3");
  if (j == 0) return map;
  const unsigned l0 = static_cast<unsigned>(lane_of(map, 0));
  const unsigned lj = static_cast<unsigned>(lane_of(map, j));
  unsigned m = map;
  m &= ~(3u | (3u << (2 * j)));
  m |= lj | (l0 << (2 * j));
  return static_cast<uint8_t>(m);
}

State State::init(const Config& cfg, int64_t batch) {
  cfg.validate();
  require_in_range(batch, 1, kMaxBatch, "state batch");
  State s;
  s.batch = batch;
  s.cores = cfg.core_count;
  s.d_model = cfg.d_model;
  const std::string what = "the state of " + std::to_string(batch) + " sequences";
  allocate(s.ram, checked_product({batch, cfg.core_count, 4, cfg.d_model}, "state ram B*C*4*D"), bf16{},
           what + " (ram [B, C, 4, D])");
  allocate(s.stream_map, checked_product({batch, cfg.core_count}, "state stream_map B*C"), kIdentityStreamMap,
           what + " (stream_map [B, C])");
  return s;
}

State State::random(const Config& cfg, int64_t batch, uint64_t seed) {
  State s = init(cfg, batch);
  Rng rng(seed);
  for (bf16& v : s.ram) v = float_to_bf16(static_cast<float>(rng.normal()));
  for (uint8_t& m : s.stream_map) {
    int lanes[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; --i) std::swap(lanes[i], lanes[rng.next_u64() % static_cast<uint64_t>(i + 1)]);
    m = static_cast<uint8_t>(lanes[0] | lanes[1] << 2 | lanes[2] << 4 | lanes[3] << 6);
  }
  return s;
}

void State::validate() const {
  SWAPFFN_REQUIRE(batch > 0 && cores > 0 && d_model > 0,
                  "state sizes must be > 0: batch " + std::to_string(batch) + ", cores " +
                      std::to_string(cores) + ", d_model " + std::to_string(d_model));
  require_in_range(batch, 1, kMaxBatch, "state batch");
  const auto want_ram = static_cast<size_t>(checked_product({batch, cores, 4, d_model}, "state ram B*C*4*D"));
  const auto want_map = static_cast<size_t>(checked_product({batch, cores}, "state stream_map B*C"));
  SWAPFFN_REQUIRE(ram.size() == want_ram, "state ram holds " + std::to_string(ram.size()) +
                                              " values, expected B*C*4*D = " +
                                              std::to_string(want_ram));
  SWAPFFN_REQUIRE(stream_map.size() == want_map,
                  "state stream_map holds " + std::to_string(stream_map.size()) +
                      " bytes, expected B*C = " + std::to_string(want_map));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < cores; ++c) {
      const uint8_t m = stream_map[static_cast<size_t>(b * cores + c)];
      SWAPFFN_REQUIRE(is_valid_stream_map(m),
                      "invalid stream map byte " + hex_byte(m) + " at sequence " +
                          std::to_string(b) + ", core " + std::to_string(c) + " (index " +
                          std::to_string(b * cores + c) +
                          "): its four 2-bit lanes are not a permutation of {0,1,2,3}");
    }
}

void State::check_ram_values() const {
  for (size_t i = 0; i < ram.size(); ++i) {
    const float v = bf16_to_float(ram[i]);
    SWAPFFN_REQUIRE(std::isfinite(v), "state tensor 'ram' has a non-finite value at index " + std::to_string(i));
    SWAPFFN_REQUIRE(std::fabs(v) <= kMaxRamMagnitude,
                    "state tensor 'ram': value at index " + std::to_string(i) + " is out of range (magnitude above 2^48, " +
                        "the largest the engines accept: SPEC section 4)");
  }
}

void State::check_matches(const Config& cfg, int64_t want_batch) const {
  SWAPFFN_REQUIRE(cores == cfg.core_count && d_model == cfg.d_model,
                  "state does not fit the model: state has " + std::to_string(cores) +
                      " cores of d_model " + std::to_string(d_model) + ", model has core_count " +
                      std::to_string(cfg.core_count) + ", d_model " + std::to_string(cfg.d_model));
  SWAPFFN_REQUIRE(batch == want_batch, "state holds " + std::to_string(batch) +
                                           " sequences, expected " + std::to_string(want_batch));
  validate();
}

void State::copy_sequence_to(int64_t b, State& out, int64_t dst_b) const {
  SWAPFFN_REQUIRE(b >= 0 && b < batch, "copy_sequence_to: source sequence " + std::to_string(b) +
                                           " out of range [0, " + std::to_string(batch) + ")");
  SWAPFFN_REQUIRE(dst_b >= 0 && dst_b < out.batch,
                  "copy_sequence_to: destination sequence " + std::to_string(dst_b) +
                      " out of range [0, " + std::to_string(out.batch) + ")");
  SWAPFFN_REQUIRE(out.cores == cores && out.d_model == d_model,
                  "copy_sequence_to: states differ in shape (cores " + std::to_string(cores) +
                      " vs " + std::to_string(out.cores) + ", d_model " + std::to_string(d_model) +
                      " vs " + std::to_string(out.d_model) + ")");
  const int64_t ram_n = checked_product({cores, 4, d_model}, "state ram per sequence C*4*D");
  SWAPFFN_REQUIRE(ram.size() == static_cast<size_t>(checked_product({batch, ram_n}, "state ram B*C*4*D")) &&
                      out.ram.size() == static_cast<size_t>(checked_product({out.batch, ram_n}, "state ram B*C*4*D")) &&
                      stream_map.size() == static_cast<size_t>(batch * cores) &&
                      out.stream_map.size() == static_cast<size_t>(out.batch * cores),
                  "copy_sequence_to: a state's arrays do not match its sizes");
  std::copy_n(ram.begin() + b * ram_n, ram_n, out.ram.begin() + dst_b * ram_n);
  std::copy_n(stream_map.begin() + b * cores, cores, out.stream_map.begin() + dst_b * cores);
}

}  // namespace swapffn

// State (SPEC section 3): init, stream map lanes, validation naming the sequence/core/byte, the
// state file round trip and refusal of bad files, leaving the caller's state bitwise unchanged,
// and the model fingerprint that ties a state file to its model.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <random>

#include "io_test_util.hpp"
#include "swapffn/safetensors.hpp"
#include "swapffn/state.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {
namespace {

namespace st = safetensors;
using testing::expect_error;
using testing::TempDir;

std::vector<uint8_t> all_valid_maps() {
  std::vector<uint8_t> out;
  std::array<int, 4> p = {0, 1, 2, 3};
  do out.push_back(static_cast<uint8_t>(p[0] | p[1] << 2 | p[2] << 4 | p[3] << 6));
  while (std::next_permutation(p.begin(), p.end()));
  return out;
}

// A state with fresh random bf16 values in every bank and random valid stream maps.
State random_state(const Config& cfg, int64_t batch, uint64_t seed) {
  State s = State::init(cfg, batch);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (auto& v : s.ram) v = float_to_bf16(nd(rng));
  const auto maps = all_valid_maps();
  for (auto& m : s.stream_map) m = maps[rng() % maps.size()];
  return s;
}

Config small() {
  Config c = Config::preset("tiny");
  c.core_count = 6;
  c.d_model = 10;
  return c;
}

TEST(StreamMap, ValidMapsAreExactlyThe24Permutations) {
  const auto maps = all_valid_maps();
  ASSERT_EQ(maps.size(), 24u);
  int valid = 0;
  for (int m = 0; m < 256; ++m) {
    const bool expect = std::find(maps.begin(), maps.end(), m) != maps.end();
    EXPECT_EQ(is_valid_stream_map(static_cast<uint8_t>(m)), expect) << m;
    valid += is_valid_stream_map(static_cast<uint8_t>(m));
  }
  EXPECT_EQ(valid, 24);
  EXPECT_TRUE(is_valid_stream_map(kIdentityStreamMap));
  for (int j = 0; j < 4; ++j) EXPECT_EQ(lane_of(kIdentityStreamMap, j), j);
}

TEST(StreamMap, SwapLanesExchangesSlotZeroAndJ) {
  for (uint8_t m : all_valid_maps())
    for (int j = 0; j < 4; ++j) {
      const uint8_t r = swap_lanes(m, j);
      EXPECT_TRUE(is_valid_stream_map(r));
      EXPECT_EQ(lane_of(r, 0), lane_of(m, j));
      EXPECT_EQ(lane_of(r, j), lane_of(m, 0));
      for (int k = 1; k < 4; ++k) {
        if (k != j) {
          EXPECT_EQ(lane_of(r, k), lane_of(m, k));
        }
      }
      EXPECT_EQ(swap_lanes(r, j), m);  // an exchange undoes itself
    }
  EXPECT_EQ(swap_lanes(0xE4, 0), 0xE4);
  EXPECT_EQ(swap_lanes(0xE4, 2), 0xC6);  // lanes (2,1,0,3)
  expect_error([] { swap_lanes(0xE4, 4); }, {"slot 4"});
  expect_error([] { swap_lanes(0xE4, -1); }, {"slot -1"});
}

TEST(State, InitIsZerosAndIdentityMaps) {
  const Config c = small();
  const State s = State::init(c, 3);
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.cores, c.core_count);
  EXPECT_EQ(s.d_model, c.d_model);
  EXPECT_EQ(s.ram.size(), size_t(3 * c.core_count * 4 * c.d_model));
  EXPECT_TRUE(std::all_of(s.ram.begin(), s.ram.end(), [](bf16 v) { return v.bits == 0; }));
  EXPECT_EQ(s.stream_map, std::vector<uint8_t>(size_t(3 * c.core_count), 0xE4));
  EXPECT_NO_THROW(s.validate());
  EXPECT_NO_THROW(s.check_matches(c, 3));
  expect_error([&] { State::init(c, 0); }, {"batch", "0"});
  Config bad = c;
  bad.d_model = 0;
  expect_error([&] { State::init(bad, 1); }, {"d_model"});
}

TEST(State, ValidateNamesSequenceCoreAndByte) {
  State s = random_state(small(), 3, 1);
  s.stream_map[2 * 6 + 4] = 0xE5;  // lanes (1,1,2,3)
  expect_error([&] { s.validate(); }, {"0xE5", "sequence 2", "core 4", "index 16"});
  s = random_state(small(), 3, 1);
  s.ram.pop_back();
  expect_error([&] { s.validate(); }, {"ram", "B*C*4*D"});
  s = random_state(small(), 3, 1);
  s.stream_map.push_back(0xE4);
  expect_error([&] { s.validate(); }, {"stream_map", "B*C"});
}

TEST(State, CheckMatches) {
  const Config c = small();
  const State s = State::init(c, 2);
  Config other = c;
  other.core_count = 7;
  expect_error([&] { s.check_matches(other, 2); }, {"does not fit", "7"});
  other = c;
  other.d_model = 11;
  expect_error([&] { s.check_matches(other, 2); }, {"does not fit", "11"});
  expect_error([&] { s.check_matches(c, 3); }, {"2 sequences", "expected 3"});
}

TEST(State, CopySequence) {
  const State a = random_state(small(), 3, 2);
  State b = random_state(small(), 2, 3);
  const State b0 = b;
  a.copy_sequence_to(2, b, 0);
  const int64_t n = a.cores * 4 * a.d_model;
  EXPECT_TRUE(std::equal(b.ram.begin(), b.ram.begin() + n, a.ram.begin() + 2 * n));
  EXPECT_TRUE(std::equal(b.ram.begin() + n, b.ram.end(), b0.ram.begin() + n));  // other untouched
  EXPECT_TRUE(std::equal(b.stream_map.begin(), b.stream_map.begin() + a.cores,
                         a.stream_map.begin() + 2 * a.cores));
  EXPECT_TRUE(std::equal(b.stream_map.begin() + a.cores, b.stream_map.end(),
                         b0.stream_map.begin() + a.cores));
  expect_error([&] { a.copy_sequence_to(3, b, 0); }, {"source sequence 3"});
  expect_error([&] { a.copy_sequence_to(0, b, 2); }, {"destination sequence 2"});
  Config c = small();
  c.d_model = 12;
  State wrong = State::init(c, 1);
  expect_error([&] { a.copy_sequence_to(0, wrong, 0); }, {"differ in shape"});
}

std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

TEST(StateIo, RoundTripIsBitwise) {
  TempDir dir;
  const uint64_t fp = std::random_device{}() * 0x9E3779B97F4A7C15ull;
  const State s = random_state(small(), 3, 4);
  const std::string path = dir.file("s.safetensors");
  s.save(path, fp);
  EXPECT_EQ(State::load(path), s);
  EXPECT_EQ(State::load(path, fp, "m.safetensors"), s);
  st::Reader r(path);
  EXPECT_EQ(r.metadata_at("swapffn.model_fingerprint"), hex(fp));
  EXPECT_EQ(r.at("ram").dtype, st::DType::BF16);
  EXPECT_EQ(r.at("ram").shape, (std::vector<int64_t>{3, 6, 4, 10}));
  EXPECT_EQ(r.at("stream_map").dtype, st::DType::U8);
  EXPECT_EQ(r.at("stream_map").shape, (std::vector<int64_t>{3, 6}));
}

TEST(StateIo, SavingAnInvalidStateWritesNothing) {
  TempDir dir;
  State s = random_state(small(), 2, 5);
  s.stream_map[3] = 0x00;
  expect_error([&] { s.save(dir.file("s.safetensors"), 1); }, {"0x00", "index 3"});
  EXPECT_TRUE(dir.entries().empty());
}

// Two models of the same shapes (other seeds): a state of one is refused by the other, naming the
// file, both fingerprints and the model, and the caller's state is unchanged.
TEST(StateIo, StateOfAnotherModelIsRefusedNamingBothFingerprints) {
  TempDir dir;
  const Config cfg = Config::preset("tiny");
  const uint64_t seed = std::random_device{}();
  const uint64_t mine = Weights::random(cfg, seed).fingerprint();
  const uint64_t other = Weights::random(cfg, seed + 1).fingerprint();
  ASSERT_NE(mine, other) << "seed " << seed;
  const std::string path = dir.file("s.safetensors");
  const State s = State::random(cfg, 2, seed);
  s.save(path, other);
  State target = State::random(cfg, 2, seed + 2);
  const State before = target;
  expect_error([&] { target = State::load(path, mine, "mine.safetensors"); },
               {path, hex(other), hex(mine), "mine.safetensors"});
  EXPECT_THROW(State::load(path, mine, "mine.safetensors"), ForeignStateError);
  EXPECT_EQ(target, before);
  EXPECT_EQ(State::load(path), s);  // the caller may still choose to use it
  EXPECT_EQ(State::load(path, other, ""), s);
}

// A state file saved before fingerprints were recorded cannot be shown to belong to any model.
TEST(StateIo, StateWithoutAFingerprintIsRefusedForAModel) {
  TempDir dir;
  const State s = random_state(small(), 2, std::random_device{}());
  const std::string path = dir.file("old.safetensors");
  st::Writer wr;
  wr.add_bf16("ram", {2, 6, 4, 10}, s.ram);
  wr.add_u8("stream_map", {2, 6}, s.stream_map);
  wr.write(path);
  expect_error([&] { State::load(path, 0x1234, "m.safetensors"); },
               {path, "records no model fingerprint", "0000000000001234", "m.safetensors"});
  EXPECT_THROW(State::load(path, 0x1234, "m.safetensors"), ForeignStateError);
  EXPECT_EQ(State::load(path), s);
}

class BadStateFile : public ::testing::Test {
 protected:
  // Writes the tensors given, then checks that loading fails naming the problem and that a state
  // variable the result would have been assigned to is bitwise unchanged.
  void expect_refused(const st::Writer& wr, std::initializer_list<std::string_view> what) {
    const std::string path = dir.file("bad.safetensors");
    wr.write(path);
    State target = random_state(small(), 2, 99);
    const State before = target;
    expect_error([&] { target = State::load(path); }, what);
    EXPECT_EQ(target, before);
  }
  TempDir dir;
  State s = random_state(small(), 2, 6);
  std::vector<int64_t> ram_shape = {2, 6, 4, 10}, map_shape = {2, 6};
};

TEST_F(BadStateFile, InvalidStreamMapByteIsRefusedWithItsIndex) {
  s.stream_map[7] = 0x1B ^ 0x03;  // 0x18: lanes (0,2,1,0)
  st::Writer wr;
  wr.add_bf16("ram", ram_shape, s.ram);
  wr.add_u8("stream_map", map_shape, s.stream_map);
  expect_refused(wr, {"invalid stream map byte", "0x18", "sequence 1", "core 1", "index 7"});
}

TEST_F(BadStateFile, WrongDtypes) {
  std::vector<float> ram_f(s.ram.size());
  for (size_t i = 0; i < ram_f.size(); ++i) ram_f[i] = bf16_to_float(s.ram[i]);
  st::Writer a;
  a.add_f32("ram", ram_shape, ram_f);
  a.add_u8("stream_map", map_shape, s.stream_map);
  expect_refused(a, {"'ram'", "wrong dtype F32", "BF16"});
  st::Writer b;
  b.add_bf16("ram", ram_shape, s.ram);
  std::vector<bf16> map_b(s.stream_map.size(), float_to_bf16(228.0f));
  b.add_bf16("stream_map", map_shape, map_b);
  expect_refused(b, {"'stream_map'", "wrong dtype BF16", "U8"});
}

TEST_F(BadStateFile, MissingAndExtraTensors) {
  st::Writer a;
  a.add_bf16("ram", ram_shape, s.ram);
  expect_refused(a, {"missing tensor 'stream_map'"});
  st::Writer b;
  b.add_u8("stream_map", map_shape, s.stream_map);
  expect_refused(b, {"missing tensor 'ram'"});
  st::Writer c;
  c.add_bf16("ram", ram_shape, s.ram);
  c.add_u8("stream_map", map_shape, s.stream_map);
  c.add_u8("step", {1}, {3});
  expect_refused(c, {"extra tensor 'step'"});
}

TEST_F(BadStateFile, WrongShapes) {
  st::Writer a;
  a.add_bf16("ram", {2, 6, 5, 8}, s.ram);  // same count, 5 banks
  a.add_u8("stream_map", map_shape, s.stream_map);
  expect_refused(a, {"'ram'", "wrong shape [2, 6, 5, 8]"});
  st::Writer b;
  b.add_bf16("ram", ram_shape, s.ram);
  b.add_u8("stream_map", {6, 2}, s.stream_map);
  expect_refused(b, {"'stream_map'", "wrong shape [6, 2]", "expected [2, 6]"});
  st::Writer c;
  c.add_bf16("ram", {2, 0, 4, 10}, {});
  c.add_u8("stream_map", {2, 0}, {});
  expect_refused(c, {"'ram'", "wrong shape"});
}

TEST_F(BadStateFile, MalformedFingerprint) {
  for (const std::string bad : {"", "123", "00000000000000001", "000000000000000G", "ABCDEF0123456789"}) {
    st::Writer wr;
    wr.set_metadata("swapffn.model_fingerprint", bad);
    wr.add_bf16("ram", ram_shape, s.ram);
    wr.add_u8("stream_map", map_shape, s.stream_map);
    expect_refused(wr, {"'swapffn.model_fingerprint'", "16 lowercase hex digits"});
  }
}

TEST_F(BadStateFile, NonFiniteRam) {
  s.ram[123] = bf16{0x7F80};  // +inf
  st::Writer wr;
  wr.add_bf16("ram", ram_shape, s.ram);
  wr.add_u8("stream_map", map_shape, s.stream_map);
  expect_refused(wr, {"'ram'", "non-finite", "index 123"});
}

TEST_F(BadStateFile, RamBeyondTheEnginesRangeIsRefused) {
  s.ram[77] = float_to_bf16(-5.7e14f);  // past 2^48: its square would overflow fp32 sums at larger sizes
  st::Writer wr;
  wr.add_bf16("ram", ram_shape, s.ram);
  wr.add_u8("stream_map", map_shape, s.stream_map);
  expect_refused(wr, {"'ram'", "index 77", "out of range"});
}

// A state the engines would refuse is never written: save and load agree on what is valid.
TEST(StateIo, SavingRamTheEnginesRefuseWritesNothing) {
  TempDir dir;
  State s = State::init(Config::preset("tiny"), 2);
  s.ram[9] = bf16{0x7FC0};  // NaN
  expect_error([&] { s.save(dir.file("s.safetensors"), 1); }, {"non-finite", "index 9"});
  s.ram[9] = float_to_bf16(281474976710656.0f);  // 2^48 itself is accepted
  s.save(dir.file("s.safetensors"), 1);
  s.ram[9] = float_to_bf16(2.9e14f);
  expect_error([&] { s.save(dir.file("t.safetensors"), 1); }, {"index 9", "out of range"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("t.safetensors")));
}

TEST_F(BadStateFile, NotASafetensorsFile) {
  const std::string path = dir.file("junk.safetensors");
  testing::write_bytes(path, "this is not a state file at all");
  State target = random_state(small(), 2, 98);
  const State before = target;
  expect_error([&] { target = State::load(path); }, {path, "header length"});
  EXPECT_EQ(target, before);
}

TEST(State, RandomIsValidDeterministicAndNotZero) {
  const Config cfg = Config::preset("tiny");
  const State a = State::random(cfg, 3, 5), b = State::random(cfg, 3, 5), c = State::random(cfg, 3, 6);
  a.validate();
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  size_t nonzero = 0, non_identity = 0;
  for (const bf16& v : a.ram) nonzero += v.bits != 0 && v.bits != 0x8000;
  for (uint8_t m : a.stream_map) non_identity += m != kIdentityStreamMap;
  EXPECT_GT(nonzero, a.ram.size() * 9 / 10);
  EXPECT_GT(non_identity, a.stream_map.size() / 2);  // 23 of 24 permutations are not the identity
}

}  // namespace
}  // namespace swapffn

// The run dump file: round trip with and without the initial state, trace packing, and refusal of
// dumps that do not fit their config.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "io_test_util.hpp"
#include "swapffn/dump.hpp"
#include "swapffn/safetensors.hpp"

namespace swapffn {
namespace {

namespace st = safetensors;
using testing::expect_error;
using testing::TempDir;

Config dump_config() {
  Config c = Config::preset("tiny");
  c.core_count = 5;
  c.d_model = 12;
  return c;
}

State random_state(const Config& cfg, int64_t batch, std::mt19937_64& rng) {
  State s = State::init(cfg, batch);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  for (auto& v : s.ram) v = float_to_bf16(nd(rng));
  for (auto& m : s.stream_map) m = swap_lanes(swap_lanes(0xE4, int(rng() % 4)), int(rng() % 4));
  return s;
}

Dump random_dump(bool with_initial, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Dump d;
  d.cfg = dump_config();
  d.backend = "reference";
  d.tokens = 3;
  d.batch = 2;
  const int64_t n = d.tokens * d.batch * d.cfg.d_model;
  const int64_t g = d.tokens * d.cfg.n_events * d.batch * d.cfg.core_count;
  d.x.resize(n);
  d.delta.resize(n);
  for (auto& v : d.x) v = nd(rng);
  for (auto& v : d.delta) v = nd(rng) * 10.0f;
  d.gate.resize(g);
  d.slot.resize(g);
  for (auto& v : d.gate) v = uint8_t(rng() % 2);
  for (auto& v : d.slot) v = uint8_t(rng() % 4);
  d.final_state = random_state(d.cfg, d.batch, rng);
  if (with_initial) d.initial_state = random_state(d.cfg, d.batch, rng);
  return d;
}

void expect_same(const Dump& a, const Dump& b) {
  EXPECT_EQ(a.cfg, b.cfg);
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.delta, b.delta);
  EXPECT_EQ(a.gate, b.gate);
  EXPECT_EQ(a.slot, b.slot);
  EXPECT_EQ(a.final_state, b.final_state);
  EXPECT_EQ(a.initial_state, b.initial_state);
}

TEST(Dump, RoundTripWithAndWithoutInitialState) {
  TempDir dir;
  for (bool initial : {false, true}) {
    SCOPED_TRACE(initial);
    const Dump d = random_dump(initial, initial ? 2 : 1);
    const std::string path = dir.file("d.safetensors");
    write_dump(path, d);
    expect_same(read_dump(path), d);
    // The file layout the CLI documents (shapes are [T,B,D], [T,E,B,C], [B,C,4,D], [B,C]).
    st::Reader r(path);
    EXPECT_EQ(r.at("x").shape, (std::vector<int64_t>{3, 2, 12}));
    EXPECT_EQ(r.at("x").dtype, st::DType::F32);
    EXPECT_EQ(r.at("delta").dtype, st::DType::F32);
    EXPECT_EQ(r.at("gate").shape, (std::vector<int64_t>{3, 3, 2, 5}));
    EXPECT_EQ(r.at("slot").dtype, st::DType::U8);
    EXPECT_EQ(r.at("ram").shape, (std::vector<int64_t>{2, 5, 4, 12}));
    EXPECT_EQ(r.at("ram").dtype, st::DType::BF16);
    EXPECT_EQ(r.at("stream_map").shape, (std::vector<int64_t>{2, 5}));
    EXPECT_EQ(r.find("ram0") != nullptr, initial);
    EXPECT_EQ(r.find("stream_map0") != nullptr, initial);
    EXPECT_EQ(r.metadata_at("swapffn.backend"), "reference");
    EXPECT_EQ(Config::from_json_string(r.metadata_at("swapffn.config")), d.cfg);
  }
}

TEST(Dump, TracesPackAsTokenEventSequenceCore) {
  Dump d = random_dump(false, 3);
  const auto traces = d.traces();
  ASSERT_EQ(traces.size(), 3u);
  const int64_t E = d.cfg.n_events, B = d.batch, C = d.cfg.core_count;
  // gate[t, e, b, c] is token t's Trace at (e, b, c).
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) {
          const size_t flat = size_t(((t * E + e) * B + b) * C + c);
          ASSERT_EQ(traces[t].gate[traces[t].index(e, b, c)], d.gate[flat]);
          ASSERT_EQ(traces[t].slot[traces[t].index(e, b, c)], d.slot[flat]);
        }
  Dump e = d;
  e.gate.assign(e.gate.size(), 7);
  e.set_traces(traces);
  EXPECT_EQ(e.gate, d.gate);
  EXPECT_EQ(e.slot, d.slot);
  std::vector<Trace> short_traces(traces.begin(), traces.begin() + 2);
  expect_error([&] { e.set_traces(short_traces); }, {"2 traces for 3 tokens"});
  std::vector<Trace> bad = traces;
  bad[1].resize(E, B, C + 1);
  expect_error([&] { e.set_traces(bad); }, {"token 1"});
}

TEST(Dump, WriteRefusesInconsistentDumps) {
  TempDir dir;
  const std::string path = dir.file("d.safetensors");
  Dump d = random_dump(true, 4);
  d.delta.pop_back();
  expect_error([&] { write_dump(path, d); }, {"delta"});
  d = random_dump(true, 4);
  d.slot[5] = 4;
  expect_error([&] { write_dump(path, d); }, {"slot value 4", "index 5"});
  d = random_dump(true, 4);
  d.gate[6] = 2;
  expect_error([&] { write_dump(path, d); }, {"gate value 2", "index 6"});
  d = random_dump(true, 4);
  d.initial_state->stream_map[1] = 0xFF;
  expect_error([&] { write_dump(path, d); }, {"0xFF", "index 1"});
  EXPECT_TRUE(dir.entries().empty());
}

class BadDump : public ::testing::Test {
 protected:
  // Writes the dump's tensors by hand with one change and expects read_dump to refuse it.
  void expect_refused(const std::function<void(st::Writer&)>& extra,
                      std::initializer_list<std::string_view> what, const Dump& d,
                      const std::string& skip = "") {
    const int64_t T = d.tokens, B = d.batch, D = d.cfg.d_model, E = d.cfg.n_events;
    const int64_t C = d.cfg.core_count;
    st::Writer wr;
    wr.set_metadata("swapffn.config", d.cfg.to_json_string());
    wr.set_metadata("swapffn.backend", d.backend);
    if (skip != "x") wr.add_f32("x", {T, B, D}, d.x);
    if (skip != "delta") wr.add_f32("delta", {T, B, D}, d.delta);
    if (skip != "gate") wr.add_u8("gate", {T, E, B, C}, d.gate);
    if (skip != "slot") wr.add_u8("slot", {T, E, B, C}, d.slot);
    if (skip != "ram") wr.add_bf16("ram", {B, C, 4, D}, d.final_state.ram);
    if (skip != "stream_map") wr.add_u8("stream_map", {B, C}, d.final_state.stream_map);
    if (extra) extra(wr);
    const std::string path = dir.file("bad.safetensors");
    wr.write(path);
    expect_error([&] { read_dump(path); }, what);
  }
  TempDir dir;
  Dump d = random_dump(false, 5);
};

TEST_F(BadDump, UnchangedDumpLoads) {
  const std::string path = dir.file("ok.safetensors");
  write_dump(path, d);
  expect_same(read_dump(path), d);
}

TEST_F(BadDump, MissingTensor) {
  expect_refused({}, {"missing tensor", "'slot'"}, d, "slot");
  expect_refused({}, {"missing tensor", "'stream_map'"}, d, "stream_map");
}

TEST_F(BadDump, InitialStateHalfPresent) {
  expect_refused([&](st::Writer& wr) { wr.add_bf16("ram0", {2, 5, 4, 12}, d.final_state.ram); },
                 {"'ram0' and 'stream_map0'"}, d);
}

TEST_F(BadDump, ExtraTensor) {
  expect_refused([](st::Writer& wr) { wr.add_u8("notes", {1}, {1}); }, {"extra tensor 'notes'"}, d);
}

TEST_F(BadDump, WrongShapeAgainstTheConfig) {
  Dump other = d;
  other.cfg.n_events = 2;  // gate/slot written for E = 2 while the metadata says 3
  other.gate.resize(other.gate.size() * 2 / 3);
  other.slot.resize(other.slot.size() * 2 / 3);
  const std::string path = dir.file("wrong.safetensors");
  write_dump(path, other);
  {
    // Rewrite the metadata of that file with the original config (E = 3).
    st::Reader r(path);
    st::Writer wr;
    wr.set_metadata("swapffn.config", d.cfg.to_json_string());
    wr.set_metadata("swapffn.backend", "reference");
    for (const auto& t : r.tensors())
      wr.add(t.name, t.dtype, t.shape, r.data(t), t.end - t.begin);
    wr.write(dir.file("wrong2.safetensors"));
  }
  expect_error([&] { read_dump(dir.file("wrong2.safetensors")); },
               {"'gate'", "wrong shape [3, 2, 2, 5]", "expected [3, 3, 2, 5]"});
}

TEST_F(BadDump, WrongDtype) {
  Dump x = d;
  expect_refused(
      [&](st::Writer& wr) {
        std::vector<bf16> xb(x.x.size());
        for (size_t i = 0; i < xb.size(); ++i) xb[i] = float_to_bf16(x.x[i]);
        wr.add_bf16("x", {3, 2, 12}, xb);
      },
      {"'x'", "wrong dtype BF16", "F32"}, d, "x");
}

TEST_F(BadDump, InvalidConfig) {
  Dump bad = d;
  const std::string path = dir.file("cfg.safetensors");
  write_dump(path, bad);
  st::Reader r(path);
  st::Writer wr;
  nlohmann::json j = d.cfg.to_json();
  j["collapse_k"] = 0;
  wr.set_metadata("swapffn.config", j.dump());
  wr.set_metadata("swapffn.backend", "reference");
  for (const auto& t : r.tensors()) wr.add(t.name, t.dtype, t.shape, r.data(t), t.end - t.begin);
  wr.write(dir.file("cfg2.safetensors"));
  expect_error([&] { read_dump(dir.file("cfg2.safetensors")); },
               {"invalid swapffn.config", "collapse_k"});
}

TEST_F(BadDump, InvalidStreamMapByte) {
  Dump bad = d;
  bad.final_state.stream_map[8] = 0x00;
  expect_refused({}, {"invalid stream map byte", "0x00", "index 8"}, bad);
}

}  // namespace
}  // namespace swapffn

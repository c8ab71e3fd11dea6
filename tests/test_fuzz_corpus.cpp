// A seeded fuzz corpus over the file kinds: thousands of mutations of valid model (bf16 and fp8),
// state and dump files (byte flips, truncations, header-length edits, header edits: huge or odd shapes,
// offsets and dtypes, duplicated keys at every depth, hostile names, config fields out of range).
// Each mutated file must load or be refused with swapffn::Error; nothing else may escape (a
// crash ends the binary: the case's file is then left as <tmp>/swapffn_test_*/case.safetensors).
// Each load is bounded in time (relative to the seed's own load, so the bound holds in Release and
// under sanitizers alike) and in heap (tests/allocation_meter.hpp): a file of a few hundred KB
// that makes us allocate tens of MB can only be trusting a size it read.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "allocation_meter.hpp"
#include "core/printable.hpp"
#include "io_test_util.hpp"
#include "swapffn/dump.hpp"
#include "swapffn/state.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {
namespace {

using json = nlohmann::json;
using testing::TempDir;

// std::mt19937_64's sequence is fixed by the standard; drawing with % (not the distributions,
// whose algorithms are the library's choice) keeps the corpus the same on every platform.
constexpr uint64_t kCorpusSeed = 0x5eed42;
constexpr int kCasesPerKind = 2000;
constexpr size_t kHeapBound = size_t{32} << 20;

Config corpus_config() {
  Config c = Config::preset("tiny");  // every size distinct, shrunk so a load takes microseconds
  c.d_model = 12;
  c.d_ff = 20;
  c.core_count = 5;
  return c;
}

struct Kind {
  const char* name;
  std::string seed;                                // a valid file's bytes
  std::function<void(const std::string&)> load;    // throws swapffn::Error to refuse
};

std::string file_bytes(const TempDir& dir, const std::function<void(const std::string&)>& save) {
  const std::string path = dir.file("seed.safetensors");
  save(path);
  return testing::read_bytes(path);
}

std::vector<Kind> kinds(const TempDir& dir) {
  const Config cfg = corpus_config();
  std::vector<Kind> k;
  k.push_back({"model",
               file_bytes(dir, [&](const std::string& p) { Weights::random(cfg, 7).save(p); }),
               [](const std::string& p) { Weights::load(p); }});
  k.push_back({"state",
               file_bytes(dir, [&](const std::string& p) { State::random(cfg, 3, 8).save(p, 1); }),
               [](const std::string& p) { State::load(p); }});
  Dump d;
  d.cfg = cfg;
  d.backend = "reference";
  d.tokens = 2;
  d.batch = 2;
  d.x.assign(static_cast<size_t>(d.tokens * d.batch * cfg.d_model), 0.25f);
  d.delta.assign(d.x.size(), -1.5f);
  d.gate.assign(static_cast<size_t>(d.tokens * cfg.n_events * d.batch * cfg.core_count), 1);
  d.slot.assign(d.gate.size(), 2);
  d.final_state = State::random(cfg, d.batch, 9);
  d.initial_state = State::random(cfg, d.batch, 10);
  k.push_back({"dump", file_bytes(dir, [&](const std::string& p) { write_dump(p, d); }),
               [](const std::string& p) { read_dump(p); }});
  k.push_back({"fp8",  // a model whose FFN is in e4m3 with block scales
               file_bytes(dir, [&](const std::string& p) { Weights::random(cfg, 7).quantized_fp8(fp8::Scaling::blocks).save(p); }),
               [](const std::string& p) { Weights::load(p); }});
  return k;
}

// ---------------------------------------------------------------------------------------------
// Mutations

struct Split {
  json header;
  std::string data;
};

Split split(const std::string& file) {
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  return {json::parse(file.substr(8, n)), file.substr(8 + n)};
}

std::string join(const std::string& header, const std::string& data) {
  return testing::raw_safetensors(header, data);
}

template <class T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& v) {
  return v[rng() % v.size()];
}

// Values that sizes, offsets and config fields are most likely to mishandle.
json odd_number(std::mt19937_64& rng, const json& near) {
  const uint64_t n = near.is_number_unsigned() ? near.get<uint64_t>() : 1;
  const std::vector<json> v = {0, 1, -1, n + 1, n - 1, n * 2, uint64_t{1} << 20, (uint64_t{1} << 20) + 1,
                               uint64_t{1} << 31, uint64_t{1} << 32, uint64_t{1} << 40,
                               uint64_t{1} << 62, INT64_MAX, uint64_t{1} << 63, UINT64_MAX, INT64_MIN,
                               1.5, 1e308, 1e-320, -0.0, "7", nullptr, json::array(), true};
  return pick(rng, v);
}

std::string random_tensor(std::mt19937_64& rng, const json& h) {
  std::vector<std::string> names;
  for (const auto& [k, v] : h.items())
    if (k != "__metadata__") names.push_back(k);
  return pick(rng, names);
}

// Edits one thing in the parsed header (or, for duplicates, in its text) and re-serializes.
// Sets duplicated when it names a key twice: such a file must be refused.
std::string edit_header(std::mt19937_64& rng, const std::string& seed, bool& duplicated) {
  Split s = split(seed);
  json& h = s.header;
  const std::string t = random_tensor(rng, h);
  json& e = h[t];
  switch (rng() % 10) {
    case 0: {  // a shape entry, or the rank
      json& shape = e["shape"];
      if (shape.empty() || rng() % 4 == 0) shape.push_back(odd_number(rng, 1));
      else if (rng() % 4 == 0) shape.erase(shape.begin() + static_cast<long>(rng() % shape.size()));
      else shape[rng() % shape.size()] = odd_number(rng, shape[0]);
      break;
    }
    case 1: e["data_offsets"][rng() % 2] = odd_number(rng, e["data_offsets"][1]); break;
    case 2:
      e["dtype"] = pick(rng, std::vector<json>{"BF16", "F16", "F32", "F64", "U8", "I32", "bf16",
                                                "", 7, nullptr, "F8_E4M3"});
      break;
    case 3: e.erase(pick(rng, std::vector<std::string>{"dtype", "shape", "data_offsets"})); break;
    case 4: e[pick(rng, std::vector<std::string>{"extra", "", "\x1b[2J"})] = 1; break;
    case 5: h[t] = pick(rng, std::vector<json>{7, json::array(), "x", nullptr, json::object()}); break;
    case 6: {  // rename: a hostile, empty or reserved name
      json v = e;
      h.erase(t);
      h[pick(rng, std::vector<std::string>{"", "\x1b]0;title\x07", "__metadata__", t + "\n",
                                           "\xc2\x9b" "31m"})] = v;
      break;
    }
    case 7: {  // a config field out of range, of the wrong type, missing or unknown
      if (!h.contains("__metadata__") || !h["__metadata__"].contains("swapffn.config")) {
        h["__metadata__"] = {{"k", rng() % 2 ? json(3) : json("v")}};
        break;
      }
      json cfg = json::parse(h["__metadata__"]["swapffn.config"].get<std::string>());
      std::vector<std::string> fields;
      for (const auto& [k, v] : cfg.items()) fields.push_back(k);
      const std::string f = pick(rng, fields);
      switch (rng() % 4) {
        case 0: cfg.erase(f); break;
        case 1: cfg["d_modle"] = 1; break;
        default: cfg[f] = odd_number(rng, cfg[f]);
      }
      h["__metadata__"]["swapffn.config"] = rng() % 8 ? cfg.dump() : cfg.dump().substr(1);
      break;
    }
    default: {  // a key named twice, at each depth (the text, as a JSON object cannot hold it)
      std::string text = h.dump();
      const std::string entry = "\"" + t + "\":" + e.dump() + ",";
      size_t at;
      switch (rng() % 4) {
        case 0: text.insert(1, entry); duplicated = true; break;
        case 1:
          if ((at = text.find("{\"data_offsets\"")) != std::string::npos)
            text.insert(at + 1, "\"dtype\":\"U8\","), duplicated = true;
          break;
        case 2:
          if (h.contains("__metadata__") && h["__metadata__"].is_object() &&
              !h["__metadata__"].empty()) {
            at = text.find("\"__metadata__\":{") + 16;  // its first key follows: repeat it
            text.insert(at, json(h["__metadata__"].begin().key()).dump() + ":\"x\",");
            duplicated = true;
          }
          break;
        default:
          if ((at = text.find("{\\\"collapse_k\\\"")) != std::string::npos)
            text.insert(at + 1, "\\\"d_model\\\":1,"), duplicated = true;
      }
      return join(text, s.data);
    }
  }
  return join(h.dump(), s.data);
}

std::string mutate(std::mt19937_64& rng, const std::string& seed, std::string& what,
                   bool& duplicated) {
  std::string b = seed;
  uint64_t hlen;
  std::memcpy(&hlen, b.data(), 8);
  switch (rng() % 6) {
    case 0: {  // byte flips, mostly in the header
      what = "byte flips";
      for (uint64_t k = 1 + rng() % 8; k > 0; --k) {
        const size_t at = rng() % 4 ? rng() % (8 + hlen) : rng() % b.size();
        b[at] = static_cast<char>(b[at] ^ static_cast<char>(1 + rng() % 255));
      }
      return b;
    }
    case 1:
      what = "truncation";
      b.resize(rng() % 3 ? rng() % std::min<uint64_t>(8 + hlen + 16, b.size()) : rng() % b.size());
      return b;
    case 2: {
      what = "header length";
      const std::vector<uint64_t> v = {0, 1, hlen - 1, hlen + 1, hlen + 8, b.size(), b.size() - 8,
                                       uint64_t{1} << 63, UINT64_MAX, rng()};
      const uint64_t n = pick(rng, v);
      std::memcpy(b.data(), &n, 8);
      return b;
    }
    case 3:
      what = "inserted bytes";
      b.insert(rng() % b.size(), std::string(1 + rng() % 16, static_cast<char>(rng())));
      return b;
    default:
      what = "header edit";
      b = edit_header(rng, b, duplicated);
      if (!duplicated && rng() % 4 == 0) {
        try {  // a second edit, where the first left a header it can still find its way in
          b = edit_header(rng, b, duplicated);
        } catch (const json::exception&) {
        }
      }
      return b;
  }
}

// ---------------------------------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(FuzzCorpus, EveryMutatedFileLoadsOrIsRefusedWithinBounds) {
  TempDir dir;
  const std::string path = dir.file("case.safetensors");
  std::mt19937_64 rng(kCorpusSeed);
  std::printf("kind   cases  loaded  refused  slowest(ms)  peak heap(KB)\n");
  for (const Kind& kind : kinds(dir)) {
    testing::write_bytes(path, kind.seed);
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_NO_THROW(kind.load(path)) << kind.name << " seed";
    // Generous: a quadratic or hanging path is off by orders of magnitude, not by this factor.
    const double time_bound = std::max(1.0, 200 * seconds_since(t0));
    int loaded = 0, refused = 0;
    double slowest = 0;
    size_t peak = 0;
    for (int i = 0; i < kCasesPerKind; ++i) {
      std::string what;
      bool duplicated = false;
      testing::write_bytes(path, mutate(rng, kind.seed, what, duplicated));
      const std::string id = std::string(kind.name) + " case " + std::to_string(i) + " (" + what + ")";
      testing::AllocationMeter meter(kHeapBound);
      t0 = std::chrono::steady_clock::now();
      try {
        kind.load(path);
        ++loaded;
        EXPECT_FALSE(duplicated) << id << ": loaded although it names a key twice";
      } catch (const Error& e) {
        ++refused;
        const std::string msg = e.what();
        EXPECT_TRUE(std::none_of(msg.begin(), msg.end(),
                                 [](char c) { return (c >= 0 && c < 0x20) || c == 0x7F; }))
            << id << ": control character in the message " << printable(msg);
      } catch (const std::exception& e) {
        ADD_FAILURE() << id << ": escaped as a non-swapffn exception: " << e.what()
                      << (meter.refused_a_request() ? " (after asking for more than the heap bound)"
                                                    : "");
      }
      const double s = seconds_since(t0);
      EXPECT_LT(s, time_bound) << id << " took " << s << " s";
      EXPECT_LE(meter.peak_bytes(), kHeapBound) << id;
      slowest = std::max(slowest, s);
      peak = std::max(peak, meter.peak_bytes());
      if (::testing::Test::HasFailure()) return;  // one case is enough to debug; the rest is noise
    }
    std::printf("%-6s %5d  %6d  %7d  %11.2f  %13zu\n", kind.name, kCasesPerKind, loaded, refused,
                slowest * 1e3, peak >> 10);
    // Both outcomes occur, or the mutations do not reach past the first check.
    EXPECT_GT(loaded, 0) << kind.name;
    EXPECT_GT(refused, kCasesPerKind / 2) << kind.name;
  }
}

TEST(AllocationMeter, MeasuresThePeakAndRefusesRequestsAboveTheLimit) {
  testing::AllocationMeter meter(size_t{8} << 20);
  {
    std::vector<char> v(size_t{3} << 20, 'x');
    EXPECT_EQ(v[12345], 'x');
  }
  EXPECT_GE(meter.peak_bytes(), size_t{3} << 20);
  EXPECT_LT(meter.peak_bytes(), size_t{4} << 20);
  EXPECT_FALSE(meter.refused_a_request());
  EXPECT_THROW(std::vector<char>(size_t{9} << 20), std::bad_alloc);
  EXPECT_TRUE(meter.refused_a_request());
}

}  // namespace
}  // namespace swapffn

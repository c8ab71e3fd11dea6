// The safetensors reader/writer: round trip of every dtype, typed conversions, and each kind of
// malformed file refused with a message naming the file, the tensor and the problem.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "core/printable.hpp"
#include "io_test_util.hpp"
#include "swapffn/safetensors.hpp"
#include "swapffn/state.hpp"

namespace swapffn {
namespace {

namespace st = safetensors;
using testing::expect_error;
using testing::raw_safetensors;
using testing::TempDir;
using testing::write_bytes;

std::vector<std::byte> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<std::byte> b(n);
  for (auto& v : b) v = static_cast<std::byte>(rng() & 0xFF);
  return b;
}

TEST(Safetensors, RoundTripOfEveryDtypeIsBitwise) {
  TempDir dir;
  std::mt19937_64 rng(11);
  struct T {
    std::string name;
    st::DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
  };
  std::vector<T> ts = {
      {"a.bf16", st::DType::BF16, {3, 5}, {}},  {"b.f16", st::DType::F16, {7}, {}},
      {"c.f32", st::DType::F32, {2, 3, 4}, {}}, {"d.f64", st::DType::F64, {5, 1}, {}},
      {"e.u8", st::DType::U8, {9, 2}, {}},      {"f.scalar", st::DType::F32, {}, {}},
      {"g.empty", st::DType::BF16, {0, 3}, {}}, {"h.f8", st::DType::F8_E4M3, {3, 7}, {}},
  };
  st::Writer w;
  for (auto& t : ts) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    t.bytes = random_bytes(static_cast<size_t>(n) * st::dtype_size(t.dtype), rng);
    w.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  }
  w.set_metadata("who", "test");
  w.set_metadata("json", "{\"x\": [1, 2]}");
  const std::string path = dir.file("all.safetensors");
  w.write(path);

  const std::string raw = testing::read_bytes(path);
  uint64_t hlen;
  std::memcpy(&hlen, raw.data(), 8);
  EXPECT_EQ((8 + hlen) % 8, 0u) << "data section not 8-byte aligned";

  st::Reader r(path);
  EXPECT_EQ(r.tensors().size(), ts.size());
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"who", "test"},
                                                               {"json", "{\"x\": [1, 2]}"}}));
  for (const auto& t : ts) {
    SCOPED_TRACE(t.name);
    const st::TensorInfo& info = r.at(t.name);
    EXPECT_EQ(info.dtype, t.dtype);
    EXPECT_EQ(info.shape, t.shape);
    ASSERT_EQ(info.end - info.begin, t.bytes.size());
    if (!t.bytes.empty()) {  // an empty vector's data() is null, which memcmp must not get
      EXPECT_EQ(std::memcmp(r.data(info), t.bytes.data(), t.bytes.size()), 0);
    }
  }
  // Only the destination is left in the directory: no temporary file.
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"all.safetensors"});
}

TEST(Safetensors, TypedAccessorsConvert) {
  TempDir dir;
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0x3555};  // 1, -2, 2^-24, 65504, ~1/3
  const std::vector<float> f32 = {1.0f, 1.00390625f + 1e-7f, -3.14159f, 1e-20f};
  const std::vector<double> f64 = {0.1, -2.5, 1e10};
  const std::vector<uint8_t> u8 = {0, 7, 255};
  const std::vector<uint8_t> e4m3 = {0x38, 0xC0, 0x01, 0x7E, 0xFE, 0x7F};  // 1, -2, 2^-9, 448, -448, NaN
  std::vector<bf16> b16 = {float_to_bf16(1.5f), float_to_bf16(-0.3f)};
  st::Writer w;
  w.add("h", st::DType::F16, {5}, f16.data(), f16.size() * 2);
  w.add_f32("f", {4}, f32);
  w.add("d", st::DType::F64, {3}, f64.data(), f64.size() * 8);
  w.add_u8("u", {3}, u8);
  w.add_e4m3("e", {6}, e4m3);
  w.add_bf16("b", {2}, b16);
  const std::string path = dir.file("t.safetensors");
  w.write(path);
  st::Reader r(path);

  const auto h = r.to_float("h");
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(h[3], 65504.0f);
  EXPECT_NEAR(h[4], 1.0f / 3.0f, 1e-3f);
  EXPECT_EQ(r.to_float("f"), f32);
  const auto fb = r.to_bf16("f");
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(fb[i], float_to_bf16(f32[i]));
  EXPECT_EQ(r.to_double("d"), f64);
  EXPECT_EQ(r.to_float("d")[0], 0.1f);
  EXPECT_EQ(r.to_bf16("b"), b16);
  EXPECT_EQ(r.to_u8("u"), u8);
  EXPECT_EQ(r.to_e4m3("e"), e4m3);
  EXPECT_EQ(r.at("e").dtype, st::DType::F8_E4M3);
  const auto e = r.to_float("e");
  EXPECT_EQ(std::vector<float>(e.begin(), e.end() - 1),
            (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -9), 448.0f, -448.0f}));
  EXPECT_TRUE(std::isnan(e.back()));
  EXPECT_EQ(r.to_bf16("e")[3], float_to_bf16(448.0f));
  expect_error([&] { r.to_u8("e"); }, {"'e'", "wrong dtype F8_E4M3", "expected U8"});
  expect_error([&] { r.to_e4m3("u"); }, {"'u'", "wrong dtype U8", "expected F8_E4M3"});
  expect_error([&] { r.to_float("u"); }, {"'u'", "wrong dtype U8"});
  expect_error([&] { r.to_u8("f"); }, {"'f'", "wrong dtype F32", "expected U8"});
  expect_error([&] { r.to_float("nope"); }, {"missing tensor", "'nope'", path});
  expect_error([&] { r.require_shape(r.at("f"), {2, 2}); }, {"'f'", "wrong shape [4]", "[2, 2]"});
  expect_error([&] { r.metadata_at("absent"); }, {"absent"});
}

TEST(Safetensors, WriterRefusesInconsistentTensors) {
  st::Writer w;
  std::vector<float> v(6, 1.5f);
  expect_error([&] { w.add("x", st::DType::F32, {2, 2}, v.data(), v.size() * 4); },
               {"'x'", "needs 16 bytes", "got 24"});
  w.add_f32("x", {2, 3}, v);
  expect_error([&] { w.add_f32("x", {6}, v); }, {"'x'", "added twice"});
  expect_error([&] { w.add_f32("__metadata__", {6}, v); }, {"invalid tensor name"});
}

TEST(Safetensors, FailedWriteLeavesNothingAtTheDestination) {
  TempDir dir;
  st::Writer w;
  w.add_u8("u", {2}, {1, 2});
  const std::string path = dir.file("no_such_dir/out.safetensors");
  expect_error([&] { w.write(path); }, {"cannot write", path});
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Safetensors, OverwriteReplacesTheWholeFile) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  st::Writer big;
  big.add_u8("u", {1000}, std::vector<uint8_t>(1000, 9));
  big.write(path);
  st::Writer small;
  small.add_u8("v", {3}, {4, 5, 6});
  small.write(path);
  st::Reader r(path);
  EXPECT_EQ(r.tensors().size(), 1u);
  EXPECT_EQ(r.to_u8("v"), (std::vector<uint8_t>{4, 5, 6}));
}

// ---------------------------------------------------------------------------------------------
// Malformed files

class Malformed : public ::testing::Test {
 protected:
  // Writes raw bytes and expects the reader to refuse them with all the given substrings and the
  // file's path in the message.
  void expect_refused(const std::string& bytes, std::initializer_list<std::string_view> what) {
    const std::string path = dir.file("bad.safetensors");
    write_bytes(path, bytes);
    expect_error([&] { st::Reader r(path); }, what);
    expect_error([&] { st::Reader r(path); }, {path});
  }
  static std::string f32_entry(uint64_t b, uint64_t e, const std::string& shape = "[2]") {
    return "{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(b) +
           "," + std::to_string(e) + "]}";
  }
  TempDir dir;
  const std::string data16 = std::string("\x01\x02\x03\x04\x05\x06\x07\x08" "abcdefgh", 16);
};

TEST_F(Malformed, TruncatedBelowTheHeaderLength) {
  expect_refused(std::string("\x05\x00\x00", 3), {"truncated", "3 bytes"});
  expect_refused("", {"truncated", "0 bytes"});
}

TEST_F(Malformed, TruncatedInTheData) {
  st::Writer w;
  std::vector<float> v = {1.25f, -2.0f, 3.5f, 7.0f};
  w.add_f32("t", {4}, v);
  const std::string path = dir.file("good.safetensors");
  w.write(path);
  std::string bytes = testing::read_bytes(path);
  bytes.resize(bytes.size() - 3);
  expect_refused(bytes, {"'t'", "out of range", "past the end"});
}

TEST_F(Malformed, HeaderLengthPastTheEnd) {
  const std::string h = "{\"a\":" + f32_entry(0, 8) + "}";
  expect_refused(testing::le_u64(h.size() + 100) + h + data16.substr(0, 8),
                 {"header length", "past the end"});
  expect_refused(testing::le_u64(~0ull) + h, {"header length", "past the end"});
}

TEST_F(Malformed, MalformedJson) {
  expect_refused(raw_safetensors("{\"a\": {\"dtype\": \"F32\",", ""), {"malformed JSON"});
  expect_refused(raw_safetensors("[1, 2, 3]", ""), {"not a JSON object"});
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(0, 8) + ",\"a\":" + f32_entry(8, 16) + "}",
                                 data16),
                 {"'a'", "twice"});
}

TEST_F(Malformed, OverlappingOffsets) {
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(0, 8) + ",\"b\":" + f32_entry(4, 12) +
                                     ",\"c\":" + f32_entry(8, 16) + "}",
                                 data16),
                 {"'a'", "'b'", "overlapping"});
}

TEST_F(Malformed, OutOfRangeOffsets) {
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(12, 20) + "}", data16),
                 {"'a'", "out of range", "[12, 20)"});
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(8, 0) + "}", data16),
                 {"'a'", "end before begin"});
}

TEST_F(Malformed, ByteCountMismatch) {
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(0, 16, "[3]") + "}", data16),
                 {"'a'", "byte count mismatch", "[3]", "needs 12"});
}

TEST_F(Malformed, UnknownDtype) {
  expect_refused(raw_safetensors(
                     "{\"a\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]}}", data16),
                 {"'a'", "unsupported dtype", "'I32'"});
}

TEST_F(Malformed, BadEntries) {
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(0, 16, "[-4]") + "}", data16),
                 {"'a'", "negative"});
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(0, 16, "[4.5]") + "}", data16),
                 {"'a'", "not an integer"});
  expect_refused(raw_safetensors("{\"a\":{\"shape\":[4],\"data_offsets\":[0,16]}}", data16),
                 {"'a'", "dtype"});
  expect_refused(raw_safetensors("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", data16),
                 {"'a'", "shape"});
  expect_refused(raw_safetensors("{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}", data16),
                 {"'a'", "data_offsets"});
  expect_refused(raw_safetensors("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16],"
                                 "\"extra\":1}}",
                                 data16),
                 {"'a'", "unknown header field", "'extra'"});
  expect_refused(raw_safetensors("{\"a\":7}", data16), {"'a'", "not a JSON object"});
  expect_refused(raw_safetensors("{\"a\":" +
                                     f32_entry(0, 16, "[4294967296, 4294967296, 4294967296]") + "}",
                                 data16),
                 {"'a'", "overflow"});
}

TEST_F(Malformed, MetadataMustBeAStringMap) {
  expect_refused(raw_safetensors("{\"__metadata__\":{\"k\":3},\"a\":" + f32_entry(0, 16, "[4]") + "}",
                                 data16),
                 {"__metadata__", "'k'", "not a string"});
  expect_refused(raw_safetensors("{\"__metadata__\":[1],\"a\":" + f32_entry(0, 16, "[4]") + "}",
                                 data16),
                 {"__metadata__", "not a JSON object"});
}

TEST_F(Malformed, UnindexedBytes) {
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(0, 8) + "}", data16),
                 {"[8, 16)", "belong to no tensor"});
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(8, 16) + "}", data16),
                 {"[0, 8)", "belong to no tensor"});
}

TEST_F(Malformed, HandWrittenValidFileIsAccepted) {
  // The negative cases above fail for the stated reason only: the same layout, consistent, loads.
  const std::string path = dir.file("ok.safetensors");
  write_bytes(path, raw_safetensors("{\"a\":" + f32_entry(0, 8) + ",\"b\":" + f32_entry(8, 16) +
                                        ",\"__metadata__\":{\"k\":\"v\"}}  ",
                                    data16));
  st::Reader r(path);
  EXPECT_EQ(r.tensors().size(), 2u);
  EXPECT_EQ(r.metadata_at("k"), "v");
  EXPECT_EQ(std::memcmp(r.data(r.at("b")), data16.data() + 8, 8), 0);
}

TEST_F(Malformed, DuplicateKeysAreRefusedAtEveryDepth) {
  // nlohmann keeps the last of two equal keys; each depth must refuse them and name the key.
  expect_refused(raw_safetensors("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"dtype\":\"U8\","
                                 "\"data_offsets\":[0,16]}}",
                                 data16),
                 {"'dtype'", "twice", "'/a'"});
  expect_refused(raw_safetensors("{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"},\"a\":" +
                                     f32_entry(0, 16, "[4]") + "}",
                                 data16),
                 {"'k'", "twice", "'/__metadata__'"});
  expect_refused(raw_safetensors("{\"__metadata__\":{},\"a\":" + f32_entry(0, 16, "[4]") +
                                     ",\"__metadata__\":{}}",
                                 data16),
                 {"'__metadata__'", "twice", "top level"});
}

TEST_F(Malformed, NestingEntriesAndRankAreCapped) {
  const std::string deep = std::string(st::kMaxHeaderDepth, '[') + std::string(st::kMaxHeaderDepth, ']');
  expect_refused(raw_safetensors("{\"a\":" + deep + "}", data16),
                 {"nesting deeper than " + std::to_string(st::kMaxHeaderDepth), "'/a[0]"});
  // A bracket bomb is refused at the cap, long before its end.
  expect_refused(raw_safetensors(std::string(1 << 20, '['), ""), {"nesting deeper"});

  std::string rank = "[1";
  for (size_t i = 1; i <= st::kMaxRank; ++i) rank += ",1";
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(0, 4, rank + "]") + "}", data16.substr(0, 4)),
                 {"more than " + std::to_string(st::kMaxRank) + " elements", "'/a/shape'"});

  std::string meta = "{\"__metadata__\":{";
  for (size_t i = 0; i <= st::kMaxHeaderEntries; ++i) meta += (i ? ",\"" : "\"") + std::to_string(i) + "\":\"\"";
  expect_refused(raw_safetensors(meta + "}}", ""),
                 {"more than " + std::to_string(st::kMaxHeaderEntries) + " members", "__metadata__"});
}

TEST_F(Malformed, ParseTimeIsLinearInTheEntries) {
  // 100,000 one-byte tensors: nlohmann's callback parser took minutes on this (O(n^2)).
  constexpr int kEntries = 100000;
  std::string h = "{";
  for (int i = 0; i < kEntries; ++i)
    h += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1]," +
         "\"data_offsets\":[" + std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  h += "}";
  const std::string path = dir.file("many.safetensors");
  write_bytes(path, raw_safetensors(h, std::string(kEntries, 'x')));
#ifdef NDEBUG
  const double bound_s = 2;  // about 0.2 s in a Release build
#else
  const double bound_s = 30;  // unoptimized and sanitized builds
#endif
  const auto t0 = std::chrono::steady_clock::now();
  st::Reader r(path);
  for (int i = 0; i < kEntries; i += 997) ASSERT_NE(r.find("t" + std::to_string(i)), nullptr);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.tensors().size(), static_cast<size_t>(kEntries));
  EXPECT_LT(s, bound_s) << "header of " << kEntries << " entries parsed in " << s << " s";
}

TEST_F(Malformed, NamesFromTheFileAreEscapedInErrors) {
  const std::string esc_name = "a\x1b]0;pwned\x07\x1b[31m\xc2\x9b" "2J";
  const std::string h = "{\"a\\u001b]0;pwned\\u0007\\u001b[31m\\u009b2J\":"
                        "{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
  const std::string path = dir.file("esc.safetensors");
  write_bytes(path, raw_safetensors(h, data16));
  try {
    st::Reader r(path);
    ADD_FAILURE() << "refused no file";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\x1b'), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\x07'), std::string::npos) << msg;
    EXPECT_EQ(msg.find("\xc2\x9b"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'a\\x1B]0;pwned\\x07\\x1B[31m\\u009B2J'"), std::string::npos) << msg;
  }
  // The same escaping where a loader names an extra tensor.
  st::Writer w;
  w.add_u8(esc_name, {1}, {0});
  w.write(path);
  expect_error([&] { State::load(path); }, {"extra tensor 'a\\x1B]0;pwned"});
}

TEST(Printable, EscapesControlsInvalidUtf8AndCuts) {
  EXPECT_EQ(printable("plain.name_1"), "plain.name_1");
  EXPECT_EQ(printable("tab\there\nq'b\\"), "tab\\there\\nq\\'b\\\\");
  EXPECT_EQ(printable(std::string("\x00\x1f\x7f", 3)), "\\x00\\x1F\\x7F");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // UTF-8 text stays
  EXPECT_EQ(printable("\xc2\x85\xc2\x9b"), "\\u0085\\u009B");                  // C1 controls
  EXPECT_EQ(printable("\x9b\xc0\x9b\xed\xa0\x80"), "\\x9B\\xC0\\x9B\\xED\\xA0\\x80");  // malformed
  const std::string long_name(1000, 'n');
  EXPECT_EQ(in_quotes(long_name),
            "'" + std::string(kMaxPrintedBytes, 'n') + "'... (1000 bytes in all)");
}

TEST_F(Malformed, ElementCountsCannotOverflowEvenWhenEmpty) {
  // No element in all, yet the other dims' product overflows wherever code multiplies them.
  expect_refused(raw_safetensors("{\"a\":{\"dtype\":\"U8\",\"shape\":[0,4294967296,4294967296],"
                                 "\"data_offsets\":[0,0]},\"b\":" + f32_entry(0, 16, "[4]") + "}",
                                 data16),
                 {"'a'", "overflows"});
  expect_refused(raw_safetensors("{\"a\":" + f32_entry(0, 0, "[4611686018427387904, 0]") +
                                     ",\"b\":" + f32_entry(0, 16, "[4]") + "}",
                                 data16),
                 {"'a'", "overflows"});
  // Consistent zero-size tensors load and copy out as empty.
  const std::string path = dir.file("empty.safetensors");
  write_bytes(path, raw_safetensors("{\"e\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                                    "\"u\":{\"dtype\":\"U8\",\"shape\":[5,0],\"data_offsets\":[0,0]},"
                                    "\"b\":" + f32_entry(0, 16, "[4]") + "}",
                                    data16));
  st::Reader r(path);
  EXPECT_EQ(r.at("e").numel(), 0);
  EXPECT_TRUE(r.to_bf16("e").empty());  // copies from a zero-size range: no memcpy from null
  EXPECT_TRUE(r.to_u8("u").empty());
  EXPECT_TRUE(r.to_float("e").empty());
}

TEST(Safetensors, MissingFileIsNamed) {
  TempDir dir;
  const std::string path = dir.file("absent.safetensors");
  expect_error([&] { st::Reader r(path); }, {path, "cannot open"});
}

}  // namespace
}  // namespace swapffn

// safetensors reader (a whole-file read + full header validation) and writer (write_file_atomically).
#include "swapffn/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <limits>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/io/strict_json.hpp"
#include "core/printable.hpp"
#include "swapffn/error.hpp"
#include "swapffn/file_input.hpp"
#include "swapffn/file_output.hpp"
#include "swapffn/fp8.hpp"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies bytes as they are");

namespace swapffn::safetensors {
namespace {

template <class T>
T load_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Converts element i of a floating tensor to double (exact for every supported dtype).
double element_as_double(DType t, const std::byte* p, int64_t i) {
  switch (t) {
    case DType::BF16: return bf16_to_float(bf16{load_le<uint16_t>(p + 2 * i)});
    case DType::F16: return f16_to_float(load_le<uint16_t>(p + 2 * i));
    case DType::F32: return load_le<float>(p + 4 * i);
    case DType::F64: return load_le<double>(p + 8 * i);
    case DType::F8_E4M3: return fp8::e4m3_to_float(load_le<uint8_t>(p + i));
    case DType::U8: break;
  }
  SWAPFFN_FAIL("internal: element_as_double on a U8 tensor");
}

}  // namespace

const char* dtype_name(DType t) {
  switch (t) {
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::U8: return "U8";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::BF16:
    case DType::F16: return 2;
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::F8_E4M3:
    case DType::U8: return 1;
  }
  return 0;
}

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::BF16, DType::F16, DType::F32, DType::F64, DType::F8_E4M3, DType::U8})
    if (name == dtype_name(t)) return t;
  SWAPFFN_FAIL("unsupported dtype " + in_quotes(name) + " (supported: " + kSupportedDtypes + ")");
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  float mag;
  if (exp == 0)
    mag = std::ldexp(static_cast<float>(man), -24);  // zero or subnormal
  else if (exp == 31)
    mag = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else
    mag = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -mag : mag;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    SWAPFFN_REQUIRE(d >= 0 && !__builtin_mul_overflow(n, d, &n),
                    "tensor " + in_quotes(name) + ": shape " + shape_string(shape) +
                        " has no int64 element count");
  return n;
}

// ---------------------------------------------------------------------------------------------
// Reader

Reader::Reader(const std::string& path) : path_(path) {
  const std::string f = "safetensors file " + path + ": ";
  bytes_ = read_regular_file(path, "safetensors file " + path, kMaxFileBytes);
  const uint64_t size = bytes_.size();
  SWAPFFN_REQUIRE(size >= 8, f + "truncated: " + std::to_string(size) +
                                 " bytes, shorter than the 8-byte header length");
  const std::byte* file = bytes_.data();
  const uint64_t hlen = load_le<uint64_t>(file);
  SWAPFFN_REQUIRE(hlen <= size - 8, f + "header length " + std::to_string(hlen) +
                                        " runs past the end of the file (" +
                                        std::to_string(size) + " bytes; truncated?)");
  SWAPFFN_REQUIRE(hlen <= kMaxHeaderBytes, f + "header length " + std::to_string(hlen) +
                                               " exceeds the " + std::to_string(kMaxHeaderBytes) +
                                               "-byte limit");
  data_ = file + 8 + hlen;
  const uint64_t data_size = size - 8 - hlen;
  const char* hbegin = reinterpret_cast<const char*>(file + 8);

  StrictJson parsed = parse_strict_json(
      std::string_view(hbegin, hlen), {kMaxHeaderDepth, kMaxHeaderEntries, kMaxRank});
  SWAPFFN_REQUIRE(parsed.error.empty(), f + "header: " + parsed.error);
  const nlohmann::json& header = parsed.value;
  SWAPFFN_REQUIRE(header.is_object(),
                  f + "header is not a JSON object (got " + header.type_name() + ")");

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      SWAPFFN_REQUIRE(entry.is_object(), f + "__metadata__ is not a JSON object");
      for (const auto& [k, v] : entry.items()) {
        SWAPFFN_REQUIRE(v.is_string(), f + "__metadata__ value of " + in_quotes(k) +
                                           " is not a string (got " + v.type_name() + ")");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string t = f + "tensor " + in_quotes(name) + ": ";
    SWAPFFN_REQUIRE(entry.is_object(), t + "header entry is not a JSON object");
    for (const auto& [k, v] : entry.items()) {
      (void)v;
      SWAPFFN_REQUIRE(k == "dtype" || k == "shape" || k == "data_offsets",
                      t + "unknown header field " + in_quotes(k));
    }
    SWAPFFN_REQUIRE(entry.contains("dtype") && entry["dtype"].is_string(),
                    t + "missing or non-string dtype");
    SWAPFFN_REQUIRE(entry.contains("shape") && entry["shape"].is_array(),
                    t + "missing or non-array shape");
    SWAPFFN_REQUIRE(entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                        entry["data_offsets"].size() == 2,
                    t + "data_offsets must be an array of two integers");
    TensorInfo info;
    info.name = name;
    try {
      info.dtype = parse_dtype(entry["dtype"].get<std::string>());
    } catch (const Error&) {
      SWAPFFN_FAIL(t + "unsupported dtype " + in_quotes(entry["dtype"].get<std::string>()) +
                   " (supported: " + kSupportedDtypes + ")");
    }
    // The product of the nonzero dimensions must fit an int64 byte count, so that no product of
    // dimensions, in any order and zero-size tensors included, overflows where shapes are used.
    const uint64_t max_elements = static_cast<uint64_t>(INT64_MAX) / dtype_size(info.dtype);
    uint64_t nonzero = 1;
    bool empty = false;
    const std::string overflow = t + "shape " + printable(entry["shape"].dump()) +
                                 " has a byte count that overflows int64";
    for (const auto& d : entry["shape"]) {
      SWAPFFN_REQUIRE(d.is_number_integer(),
                      t + "shape entry " + printable(d.dump()) + " is not an integer");
      SWAPFFN_REQUIRE(d.is_number_unsigned(), t + "shape entry " + d.dump() + " is negative");
      const uint64_t dim = d.get<uint64_t>();
      SWAPFFN_REQUIRE(dim <= max_elements, overflow);
      info.shape.push_back(static_cast<int64_t>(dim));
      if (dim == 0) {
        empty = true;
        continue;
      }
      SWAPFFN_REQUIRE(dim <= max_elements / nonzero, overflow);
      nonzero *= dim;
    }
    const uint64_t bytes = empty ? 0 : nonzero * dtype_size(info.dtype);
    for (const auto& o : entry["data_offsets"])
      SWAPFFN_REQUIRE(o.is_number_unsigned(),
                      t + "data offset " + printable(o.dump()) +
                          " is not a non-negative integer");
    info.begin = entry["data_offsets"][0].get<uint64_t>();
    info.end = entry["data_offsets"][1].get<uint64_t>();
    const std::string span = "data_offsets [" + std::to_string(info.begin) + ", " +
                             std::to_string(info.end) + ")";
    SWAPFFN_REQUIRE(info.begin <= info.end, t + span + " end before begin");
    SWAPFFN_REQUIRE(info.end <= data_size,
                    t + span + " out of range: past the end of the " + std::to_string(data_size) +
                        "-byte data section (file truncated?)");
    SWAPFFN_REQUIRE(info.end - info.begin == bytes,
                    t + "byte count mismatch: " + span + " holds " +
                        std::to_string(info.end - info.begin) + " bytes but shape " +
                        shape_string(info.shape) + " of " + dtype_name(info.dtype) + " needs " +
                        std::to_string(bytes));
    tensors_.push_back(std::move(info));
  }

  // Tensors must tile the data section: no overlap, no unindexed bytes.
  std::vector<const TensorInfo*> order;
  for (const auto& t : tensors_)
    if (t.end > t.begin) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : order) {
    SWAPFFN_REQUIRE(t->begin >= covered,
                    f + "tensors " + in_quotes(prev->name) + " and " + in_quotes(t->name) +
                        " have overlapping data_offsets");
    SWAPFFN_REQUIRE(t->begin == covered, f + "bytes [" + std::to_string(covered) + ", " +
                                             std::to_string(t->begin) +
                                             ") of the data section belong to no tensor");
    covered = t->end;
    prev = t;
  }
  SWAPFFN_REQUIRE(covered == data_size, f + "bytes [" + std::to_string(covered) + ", " +
                                            std::to_string(data_size) +
                                            ") at the end of the data section belong to no tensor");
}

const TensorInfo* Reader::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const TensorInfo& Reader::at(std::string_view name) const {
  const TensorInfo* t = find(name);
  SWAPFFN_REQUIRE(t != nullptr, "safetensors file " + path_ + ": missing tensor " + in_quotes(name));
  return *t;
}

const std::string& Reader::metadata_at(const std::string& key) const {
  auto it = metadata_.find(key);
  SWAPFFN_REQUIRE(it != metadata_.end(),
                  "safetensors file " + path_ + ": __metadata__ has no key " + in_quotes(key));
  return it->second;
}

void Reader::require_shape(const TensorInfo& t, const std::vector<int64_t>& shape) const {
  SWAPFFN_REQUIRE(t.shape == shape, "safetensors file " + path_ + ": tensor " + in_quotes(t.name) +
                                        " has wrong shape " + shape_string(t.shape) +
                                        ", expected " + shape_string(shape));
}

std::vector<double> Reader::to_double(std::string_view name) const {
  const TensorInfo& t = at(name);
  SWAPFFN_REQUIRE(t.dtype != DType::U8, "safetensors file " + path_ + ": tensor " + in_quotes(name) +
                                            " has wrong dtype U8, expected a floating dtype");
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<size_t>(i)] = element_as_double(t.dtype, data(t), i);
  return out;
}

std::vector<float> Reader::to_float(std::string_view name) const {
  const TensorInfo& t = at(name);
  SWAPFFN_REQUIRE(t.dtype != DType::U8, "safetensors file " + path_ + ": tensor " + in_quotes(name) +
                                            " has wrong dtype U8, expected a floating dtype");
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)  // F64 narrows to nearest even; the rest are exact
    out[static_cast<size_t>(i)] = static_cast<float>(element_as_double(t.dtype, data(t), i));
  return out;
}

std::vector<bf16> Reader::to_bf16(std::string_view name) const {
  const TensorInfo& t = at(name);
  std::vector<bf16> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::BF16) {
    if (!out.empty()) std::memcpy(out.data(), data(t), out.size() * 2);  // empty: data() is null
    return out;
  }
  const std::vector<float> f = to_float(name);
  for (size_t i = 0; i < f.size(); ++i) out[i] = float_to_bf16(f[i]);
  return out;
}

std::vector<uint8_t> Reader::bytes_of(std::string_view name, DType want) const {
  const TensorInfo& t = at(name);
  SWAPFFN_REQUIRE(t.dtype == want, "safetensors file " + path_ + ": tensor " + in_quotes(name) +
                                       " has wrong dtype " + dtype_name(t.dtype) + ", expected " +
                                       dtype_name(want));
  std::vector<uint8_t> out(static_cast<size_t>(t.numel()));
  if (!out.empty()) std::memcpy(out.data(), data(t), out.size());
  return out;
}

std::vector<uint8_t> Reader::to_u8(std::string_view name) const { return bytes_of(name, DType::U8); }

std::vector<uint8_t> Reader::to_e4m3(std::string_view name) const { return bytes_of(name, DType::F8_E4M3); }

// ---------------------------------------------------------------------------------------------
// Writer

void Writer::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void Writer::add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                 const void* bytes, size_t size) {
  SWAPFFN_REQUIRE(name != "__metadata__" && !name.empty(),
                  "safetensors writer: invalid tensor name " + in_quotes(name));
  for (const auto& e : entries_)
    SWAPFFN_REQUIRE(e.name != name, "safetensors writer: tensor " + in_quotes(name) + " added twice");
  int64_t n = 1;
  for (int64_t d : shape) {
    SWAPFFN_REQUIRE(d >= 0, "safetensors writer: tensor " + in_quotes(name) + " has negative shape " +
                                shape_string(shape));
    n *= d;
  }
  SWAPFFN_REQUIRE(static_cast<uint64_t>(n) * dtype_size(dtype) == size,
                  "safetensors writer: tensor " + in_quotes(name) + " of shape " + shape_string(shape) +
                      " " + dtype_name(dtype) + " needs " +
                      std::to_string(static_cast<uint64_t>(n) * dtype_size(dtype)) +
                      " bytes, got " + std::to_string(size));
  Entry e{name, dtype, shape, std::vector<std::byte>(size)};
  if (size) std::memcpy(e.bytes.data(), bytes, size);
  entries_.push_back(std::move(e));
}

void Writer::add_bf16(const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<bf16>& v) {
  add(name, DType::BF16, shape, v.data(), v.size() * sizeof(bf16));
}

void Writer::add_f32(const std::string& name, const std::vector<int64_t>& shape,
                     const std::vector<float>& v) {
  add(name, DType::F32, shape, v.data(), v.size() * sizeof(float));
}

void Writer::add_u8(const std::string& name, const std::vector<int64_t>& shape,
                    const std::vector<uint8_t>& v) {
  add(name, DType::U8, shape, v.data(), v.size());
}

void Writer::add_e4m3(const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<uint8_t>& v) {
  add(name, DType::F8_E4M3, shape, v.data(), v.size());
}

void Writer::write(const std::string& path) const {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& e : entries_) {
    header[e.name] = {{"dtype", dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string h = header.dump();
  h.append((8 - (h.size() % 8)) % 8, ' ');  // spaces keep the data section 8-byte aligned

  const uint64_t hlen = h.size();
  std::vector<std::span<const std::byte>> parts = {std::as_bytes(std::span(&hlen, 1)), std::as_bytes(std::span(h))};
  for (const auto& e : entries_) parts.emplace_back(e.bytes);
  write_file_atomically(path, parts);
}

}  // namespace swapffn::safetensors

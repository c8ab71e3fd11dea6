// A self-contained safetensors reader and writer: little-endian u64 header length, a JSON header
// (tensor name -> dtype, shape, data_offsets; optional __metadata__ string map), then the data.
// The reader memory-maps the file and validates the whole header, in time linear in its size,
// before anything is read; every error names the file, the tensor (escaped) and the problem. The
// writer replaces its file atomically (write_file_atomically), so a failed save never leaves a
// partial file at the destination.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "swapffn/bf16.hpp"

namespace swapffn::safetensors {

// F8_E4M3: OCP e4m3 (E4M3FN, swapffn/fp8.hpp), one byte an element.
enum class DType { BF16, F16, F32, F64, F8_E4M3, U8 };
inline constexpr const char* kSupportedDtypes = "BF16, F16, F32, F64, F8_E4M3, U8";

const char* dtype_name(DType t);
size_t dtype_size(DType t);
// Throws naming the dtype when it is not one of the supported ones.
DType parse_dtype(std::string_view name);

// IEEE binary16 bits -> float (exact).
float f16_to_float(uint16_t bits);

// Refuses files larger than this (the reader holds the whole file in memory): 8x the largest model.
inline constexpr uint64_t kMaxFileBytes = uint64_t{1} << 36;
// Refuses headers larger than this: a corrupt length must not make us parse gigabytes.
inline constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;
// Caps on the header's structure, far above what a real file needs (a valid header nests 3 deep:
// the object, an entry, its shape): a crafted header is refused before its size costs much.
inline constexpr size_t kMaxHeaderEntries = size_t{1} << 20;  // tensors; keys of __metadata__
inline constexpr size_t kMaxHeaderDepth = 8;                  // nesting of objects and arrays
inline constexpr size_t kMaxRank = 64;                        // dimensions of a shape

struct TensorInfo {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  // Throws when the product overflows (the reader refuses such shapes, zero-size ones included).
  int64_t numel() const;
};

class Reader {
 public:
  // Reads path whole (a regular file only) and validates its header (see docs/FORMATS.md).
  explicit Reader(const std::string& path);
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensors sorted by name (bytewise).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  // Throws naming the file and the tensor when it is absent.
  const TensorInfo& at(std::string_view name) const;
  // Throws naming the file and the key when it is absent.
  const std::string& metadata_at(const std::string& key) const;

  // The raw little-endian bytes of a tensor (not necessarily aligned).
  const std::byte* data(const TensorInfo& t) const { return data_ + t.begin; }

  // Typed copies. to_float/to_double/to_bf16 accept BF16, F16, F32, F64 and F8_E4M3 (narrowing
  // rounds to nearest even); to_u8 accepts U8 only and to_e4m3 (the raw e4m3 codes) F8_E4M3 only.
  // A U8 tensor asked for as a number, or another dtype as bytes, is refused naming the tensor
  // and both dtypes.
  std::vector<float> to_float(std::string_view name) const;
  std::vector<double> to_double(std::string_view name) const;
  std::vector<bf16> to_bf16(std::string_view name) const;
  std::vector<uint8_t> to_u8(std::string_view name) const;
  std::vector<uint8_t> to_e4m3(std::string_view name) const;

  // Throws naming the file and tensor unless it has exactly this shape.
  void require_shape(const TensorInfo& t, const std::vector<int64_t>& shape) const;

 private:
  std::vector<uint8_t> bytes_of(std::string_view name, DType want) const;

  std::string path_;
  std::vector<std::byte> bytes_;  // the whole file: a copy, so that a file changed later cannot fault us
  const std::byte* data_ = nullptr;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
};

class Writer {
 public:
  void set_metadata(const std::string& key, const std::string& value);
  // Adds a tensor whose bytes (little-endian, bytes == numel * dtype_size) are copied now.
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
           const void* bytes, size_t size);
  void add_bf16(const std::string& name, const std::vector<int64_t>& shape,
                const std::vector<bf16>& v);
  void add_f32(const std::string& name, const std::vector<int64_t>& shape,
               const std::vector<float>& v);
  void add_u8(const std::string& name, const std::vector<int64_t>& shape,
              const std::vector<uint8_t>& v);
  void add_e4m3(const std::string& name, const std::vector<int64_t>& shape,
                const std::vector<uint8_t>& v);
  // Replaces path atomically (swapffn/file_output.hpp: mode kept, fsynced, nothing left on error).
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
  };
  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace swapffn::safetensors

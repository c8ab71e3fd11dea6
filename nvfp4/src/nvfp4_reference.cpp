// CPU reference of the NVFP4 operations (issue 5): exact decoding of e2m1 / e4m3fn, the seeded
// input generators, scale-layout conversion and the four operations, written for clarity; the GPU
// kernels are tested bit-exactly against it.
#include "swapffn/nvfp4/reference.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "swapffn/error.hpp"

namespace swapffn::nvfp4 {

namespace {

// splitmix64: tiny, portable and fully specified, so generated inputs are identical everywhere.
struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return static_cast<uint32_t>((next() >> 32) % n); }  // bias < 2^-31
  float unit() { return static_cast<float>(next() >> 40) * 0x1p-24f; }             // [0, 1)
};

}  // namespace

float e2m1_to_float(uint8_t code) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMag[code & 7];
  return (code & 8) ? -m : m;
}

float e4m3fn_to_float(uint8_t bits) {
  const int e = (bits >> 3) & 15, m = bits & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9)  // subnormal: m/8 * 2^-6
                           : std::ldexp(1.0f + m / 8.0f, e - 7);
  return (bits & 0x80) ? -mag : mag;
}

uint8_t float_to_e4m3fn(float f) {
  if (std::isnan(f)) return 0x7F;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  // Candidates are the 127 finite magnitudes (0x00..0x7E); pick the nearest, ties to even code.
  uint8_t best = 0;
  float best_err = std::numeric_limits<float>::infinity();
  for (int c = 0; c <= 0x7E; ++c) {
    const float err = std::fabs(e4m3fn_to_float(static_cast<uint8_t>(c)) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_err = err;
    }
  }
  return sign | best;  // beyond 448 the nearest finite is 448: saturation
}

float fp16_to_float(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) v = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31) v = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else v = std::ldexp(1.0f + m / 1024.0f, e - 15);
  return (h & 0x8000) ? -v : v;
}

uint16_t float_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00;  // NaN (quiet)
  if (a >= 0x477FF000u) return sign | 0x7C00;  // >= 65520 rounds to inf (and inf itself)
  const int e = static_cast<int>(a >> 23) - 127;
  if (e < -25) return sign;  // below half the smallest subnormal: rounds to zero
  uint32_t mant = (a & 0x7FFFFF) | (e >= -126 ? 0x800000u : 0);
  // Target: value = q * 2^-24 for subnormals, or (1024 + m) * 2^(e-10) for normals.
  const int shift = e < -14 ? (-14 - e) + 13 : 13;  // bits to drop from the 24-bit significand
  const uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  uint32_t r = q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
  if (e < -14) return sign | static_cast<uint16_t>(r);  // subnormal (may round up into normal)
  return sign | static_cast<uint16_t>((static_cast<uint32_t>(e + 15) << 10) + (r - 1024));
}

float HostOperand::value(int64_t row, int64_t kk, int64_t b) const {
  const uint8_t byte = data[(b * rows + row) * (k / 2) + kk / 2];
  const uint8_t code = (kk & 1) ? (byte >> 4) : (byte & 15);
  return e2m1_to_float(code) * e4m3fn_to_float(scales[(b * rows + row) * (k / 16) + kk / 16]);
}

std::vector<uint8_t> scales_to_blocked(const std::vector<uint8_t>& plain, int64_t rows,
                                       int64_t kscales, int64_t batches) {
  SWAPFFN_REQUIRE(static_cast<int64_t>(plain.size()) == rows * kscales * batches,
                  "scales_to_blocked: plain scales have " + std::to_string(plain.size()) +
                      " bytes, expected rows*kscales*batches = " + std::to_string(rows * kscales * batches));
  std::vector<uint8_t> out(scale_bytes(ScaleLayout::blocked_128x4, rows, kscales, batches), 0);
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < kscales; ++j)
        out[scale_offset(ScaleLayout::blocked_128x4, rows, kscales, i, j, b)] =
            plain[scale_offset(ScaleLayout::plain, rows, kscales, i, j, b)];
  return out;
}

std::vector<uint8_t> scales_to_plain(const std::vector<uint8_t>& blocked, int64_t rows,
                                     int64_t kscales, int64_t batches) {
  SWAPFFN_REQUIRE(static_cast<int64_t>(blocked.size()) ==
                      scale_bytes(ScaleLayout::blocked_128x4, rows, kscales, batches),
                  "scales_to_plain: blocked scales have " + std::to_string(blocked.size()) + " bytes, expected " +
                      std::to_string(scale_bytes(ScaleLayout::blocked_128x4, rows, kscales, batches)));
  std::vector<uint8_t> out(rows * kscales * batches);
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < kscales; ++j)
        out[scale_offset(ScaleLayout::plain, rows, kscales, i, j, b)] =
            blocked[scale_offset(ScaleLayout::blocked_128x4, rows, kscales, i, j, b)];
  return out;
}

HostOperand make_operand(InputKind kind, int64_t rows, int64_t k, int64_t batches, uint64_t seed) {
  SWAPFFN_REQUIRE(rows > 0 && batches > 0 && k > 0 && k % 16 == 0,
                  "make_operand: need rows, batches > 0 and K a positive multiple of 16, got rows=" +
                      std::to_string(rows) + " K=" + std::to_string(k) + " L=" + std::to_string(batches));
  HostOperand op;
  op.rows = rows;
  op.k = k;
  op.batches = batches;
  op.data.resize(rows * (k / 2) * batches);
  op.scales.resize(rows * (k / 16) * batches);
  SplitMix64 rng{seed};
  for (auto& byte : op.data) {
    switch (kind) {
      case InputKind::gemv: byte = static_cast<uint8_t>(rng.below(4)); break;
      case InputKind::gemm: byte = static_cast<uint8_t>(rng.below(256)); break;
      case InputKind::dual:
      case InputKind::grouped: byte = static_cast<uint8_t>(rng.below(255) & 0b1011'1011); break;
    }
  }
  for (auto& s : op.scales) {
    switch (kind) {
      case InputKind::gemv: s = float_to_e4m3fn(static_cast<float>(rng.below(3))); break;
      case InputKind::gemm: s = float_to_e4m3fn(static_cast<float>(rng.below(4))); break;
      case InputKind::dual: s = float_to_e4m3fn(rng.unit()); break;
      case InputKind::grouped: s = float_to_e4m3fn(static_cast<float>(1 + rng.below(2))); break;
    }
  }
  return op;
}

namespace {

// Dequantized rows of one batch: exact, since e2m1 x e4m3 has at most 6 significant bits.
std::vector<float> dequant_batch(const HostOperand& op, int64_t rows, int64_t b) {
  std::vector<float> out(rows * op.k);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < op.k; ++kk) out[r * op.k + kk] = op.value(r, kk, b);
  return out;
}

float dot(const float* x, const float* y, int64_t k) {
  float acc = 0.0f;
  for (int64_t i = 0; i < k; ++i) acc += x[i] * y[i];
  return acc;
}

void require_pair(const HostOperand& a, const HostOperand& b, const char* op) {
  SWAPFFN_REQUIRE(a.k == b.k && a.batches == b.batches,
                  std::string(op) + ": operands disagree: a has K=" + std::to_string(a.k) + " L=" +
                      std::to_string(a.batches) + ", b has K=" + std::to_string(b.k) + " L=" +
                      std::to_string(b.batches));
}

}  // namespace

std::vector<uint16_t> reference_gemv(const HostOperand& a, const HostOperand& b) {
  require_pair(a, b, "reference_gemv");
  std::vector<uint16_t> c(a.rows * a.batches);
  for (int64_t l = 0; l < a.batches; ++l) {
    const auto da = dequant_batch(a, a.rows, l), db = dequant_batch(b, 1, l);  // row 0 of b only
    for (int64_t m = 0; m < a.rows; ++m) c[l * a.rows + m] = float_to_fp16(dot(&da[m * a.k], db.data(), a.k));
  }
  return c;
}

std::vector<uint16_t> reference_gemm(const HostOperand& a, const HostOperand& b) {
  require_pair(a, b, "reference_gemm");
  const int64_t M = a.rows, N = b.rows, K = a.k;
  std::vector<uint16_t> c(M * N * a.batches);
  for (int64_t l = 0; l < a.batches; ++l) {
    const auto da = dequant_batch(a, M, l), db = dequant_batch(b, N, l);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) c[(l * M + m) * N + n] = float_to_fp16(dot(&da[m * K], &db[n * K], K));
  }
  return c;
}

std::vector<uint16_t> reference_dual_gemm_swiglu(const HostOperand& a, const HostOperand& b1,
                                                 const HostOperand& b2) {
  require_pair(a, b1, "reference_dual_gemm_swiglu");
  require_pair(a, b2, "reference_dual_gemm_swiglu");
  SWAPFFN_REQUIRE(b1.rows == b2.rows, "reference_dual_gemm_swiglu: b1 has " + std::to_string(b1.rows) +
                                          " rows, b2 has " + std::to_string(b2.rows));
  const int64_t M = a.rows, N = b1.rows, K = a.k;
  std::vector<uint16_t> c(M * N * a.batches);
  for (int64_t l = 0; l < a.batches; ++l) {
    const auto da = dequant_batch(a, M, l), d1 = dequant_batch(b1, N, l), d2 = dequant_batch(b2, N, l);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const float g = dot(&da[m * K], &d1[n * K], K), u = dot(&da[m * K], &d2[n * K], K);
        c[(l * M + m) * N + n] = float_to_fp16(g / (1.0f + std::exp(-g)) * u);
      }
  }
  return c;
}

std::vector<std::vector<uint16_t>> reference_grouped_gemm(const std::vector<HostOperand>& a,
                                                          const std::vector<HostOperand>& b) {
  SWAPFFN_REQUIRE(a.size() == b.size(), "reference_grouped_gemm: " + std::to_string(a.size()) +
                                            " a operands but " + std::to_string(b.size()) + " b operands");
  std::vector<std::vector<uint16_t>> out;
  for (size_t g = 0; g < a.size(); ++g) out.push_back(reference_gemm(a[g], b[g]));
  return out;
}

}  // namespace swapffn::nvfp4

// Config validation, JSON form, presets and text setters (SPEC section 1), and the cost model
// (SPEC section 6).
#include "swapffn/config.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/io/strict_json.hpp"
#include "core/printable.hpp"
#include "core/weight_tensors.hpp"
#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"

namespace swapffn {
namespace {

// Upper bound on every size; the cost budget below bounds their products.
constexpr int64_t kMaxDim = int64_t{1} << 20;

// The GPU paths add eps to a mean square in fp32: it must stay a normal fp32 value that changes an
// all-zero vector's norm, and must not change the norm of unit-scale activations (SPEC uses 1e-6).
constexpr double kMinNormEps = 1e-12, kMaxNormEps = 1e-2;  // the message below repeats them

// The cost budget: a config past any of these is absurd (each is 30x to 1000x the default's), and a
// corrupt file must not make a load allocate or compute without bound.
constexpr int64_t kMaxStateBytesPerSequence = int64_t{1} << 28;  // default: 4 MiB
constexpr int64_t kMaxWeightBytes = int64_t{1} << 33;            // default: 28 MiB
constexpr int64_t kMaxFlopsPerToken = 10'000'000'000'000;        // default: 2.1e11
constexpr int64_t kMaxDecisionsPerToken = int64_t{1} << 20;      // n_events * core_count; default: 4096
constexpr int64_t kMaxTableFlops = int64_t{1} << 36;             // per-core tables at load; default: 6.7e7

// One table drives JSON, set() and validation so a new field cannot be half-wired.
enum class Kind { Int, Double, Bool };
struct Field {
  const char* name;
  Kind kind;
  int64_t Config::*i = nullptr;
  double Config::*d = nullptr;
  bool Config::*b = nullptr;
  int64_t min = 0;  // Int only: smallest valid value
};

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      {"d_model", Kind::Int, &Config::d_model, nullptr, nullptr, 1},
      {"d_ff", Kind::Int, &Config::d_ff, nullptr, nullptr, 1},
      {"core_count", Kind::Int, &Config::core_count, nullptr, nullptr, 1},
      {"n_banks", Kind::Int, &Config::n_banks, nullptr, nullptr, 4},
      {"n_events", Kind::Int, &Config::n_events, nullptr, nullptr, 0},
      {"k_ffn", Kind::Int, &Config::k_ffn, nullptr, nullptr, 0},
      {"d_router", Kind::Int, &Config::d_router, nullptr, nullptr, 1},
      {"collapse_k", Kind::Int, &Config::collapse_k, nullptr, nullptr, 1},
      {"collapse_r", Kind::Int, &Config::collapse_r, nullptr, nullptr, 1},
      {"core_embed_dim", Kind::Int, &Config::core_embed_dim, nullptr, nullptr, 1},
      {"norm_eps", Kind::Double, nullptr, &Config::norm_eps, nullptr, 0},
      {"ffn_residual", Kind::Bool, nullptr, nullptr, &Config::ffn_residual, 0},
      {"collapse_silu", Kind::Bool, nullptr, nullptr, &Config::collapse_silu, 0},
  };
  return f;
}

const Field* find_field(std::string_view name) {
  for (const auto& f : fields())
    if (name == f.name) return &f;
  return nullptr;
}

std::string known_keys() {
  std::string s;
  for (const auto& f : fields()) s += (s.empty() ? "" : ", ") + std::string(f.name);
  return s;
}

std::string format_double(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// Throws naming the first cost past its budget and the fields it comes from.
void check_budget(const Config& c) {
  auto require = [](int64_t cost, int64_t budget, const std::string& what) {
    SWAPFFN_REQUIRE(cost <= budget, "config is too costly: " + what + " = " +
                                        (cost == INT64_MAX ? std::string("at least 2^63") : std::to_string(cost)) +
                                        " exceeds the budget of " + std::to_string(budget));
  };
  const int64_t D = c.d_model, F = c.d_ff, C = c.core_count, E = c.n_events, R = c.d_router;
  const int64_t K = c.collapse_k, Rc = c.collapse_r, Ce = c.core_embed_dim, B4 = c.n_banks;
  require(saturating_sum({saturating_product({C, B4, D, 2}), C}), kMaxStateBytesPerSequence,
          "state bytes per sequence (core_count " + std::to_string(C) + " * n_banks * d_model " +
              std::to_string(D) + " * 2 + core_count)");

  Weights shapes;
  shapes.cfg = c;
  int64_t weight_bytes = 0;
  for_each_weight_tensor(shapes, [&](std::string_view, const std::vector<int64_t>& shape, const std::vector<bf16>&) {
    int64_t n = 1;
    for (int64_t d : shape) n = saturating_product({n, d});
    weight_bytes = saturating_sum({weight_bytes, saturating_product({n, 2})});
  });
  require(weight_bytes, kMaxWeightBytes,
          "weight bytes (the tensors' sizes from d_model " + std::to_string(D) + ", d_ff " + std::to_string(F) +
              ", core_count " + std::to_string(C) + ", d_router " + std::to_string(R) + ", collapse_k " +
              std::to_string(K) + ", collapse_r " + std::to_string(Rc) + ", core_embed_dim " + std::to_string(Ce) +
              ")");

  const int64_t ffn = saturating_product({E, c.k_ffn, 6, C, D, F});
  const int64_t router = saturating_product({E, 2, C, D, R});
  const int64_t collapse = saturating_sum(
      {saturating_product({2, C, K, D}), saturating_product({2, K, Rc, D}), saturating_product({2, D, Rc})});
  require(saturating_sum({ffn, router, collapse}), kMaxFlopsPerToken,
          "FLOPs per token (n_events " + std::to_string(E) + " * k_ffn " + std::to_string(c.k_ffn) +
              " * 6 * core_count " + std::to_string(C) + " * d_model " + std::to_string(D) + " * d_ff " +
              std::to_string(F) + " + router with d_router " + std::to_string(R) + " + collapse)");
  require(saturating_product({E, C}), kMaxDecisionsPerToken,
          "decisions per token (n_events " + std::to_string(E) + " * core_count " + std::to_string(C) + ")");
  require(saturating_product({2, C, saturating_sum({saturating_product({2, D}), K}), Ce}), kMaxTableFlops,
          "FLOPs of the per-core tables (2 * core_count " + std::to_string(C) + " * (2 * d_model " +
              std::to_string(D) + " + collapse_k " + std::to_string(K) + ") * core_embed_dim " +
              std::to_string(Ce) + ")");
}

}  // namespace

void Config::validate() const {
  for (const auto& f : fields()) {
    if (f.kind != Kind::Int) continue;
    const int64_t v = this->*f.i;
    const std::string what = std::string("config field ") + f.name + " = " + std::to_string(v);
    if (std::string_view(f.name) == "n_banks")
      SWAPFFN_REQUIRE(v == 4, what + " is invalid: must be exactly 4 (lanes are 2 bits of one byte)");
    else if (f.min == 0)
      SWAPFFN_REQUIRE(v >= 0, what + " is invalid: must be >= 0");
    else
      SWAPFFN_REQUIRE(v >= f.min, what + " is invalid: must be > 0");
    SWAPFFN_REQUIRE(v <= kMaxDim, what + " is invalid: must be <= " + std::to_string(kMaxDim));
  }
  SWAPFFN_REQUIRE(std::isfinite(norm_eps) && norm_eps >= kMinNormEps && norm_eps <= kMaxNormEps,
                  "config field norm_eps = " + format_double(norm_eps) + " is invalid: must be in [1e-12, 1e-2]");
  check_budget(*this);
}

nlohmann::json Config::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : fields()) {
    switch (f.kind) {
      case Kind::Int: j[f.name] = this->*f.i; break;
      case Kind::Double: j[f.name] = this->*f.d; break;
      case Kind::Bool: j[f.name] = this->*f.b; break;
    }
  }
  return j;
}

Config Config::from_json(const nlohmann::json& j) {
  SWAPFFN_REQUIRE(j.is_object(), std::string("config JSON must be an object, got ") + j.type_name());
  for (const auto& [key, value] : j.items())
    SWAPFFN_REQUIRE(find_field(key) != nullptr,
                    "config JSON has unknown key " + in_quotes(key) + " (known: " + known_keys() + ")");
  Config c;
  for (const auto& f : fields()) {
    auto it = j.find(f.name);
    SWAPFFN_REQUIRE(it != j.end(), std::string("config JSON is missing field ") + f.name);
    const nlohmann::json& v = *it;
    const std::string bad = std::string("config field ") + f.name + " has the wrong JSON type (" +
                            v.type_name() + ", value " + printable(v.dump()) + "): expected ";
    switch (f.kind) {
      case Kind::Int:
        SWAPFFN_REQUIRE(v.is_number_integer(), bad + "an integer");
        if (v.is_number_unsigned())
          SWAPFFN_REQUIRE(v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
                          std::string("config field ") + f.name + " = " + v.dump() + " is too large");
        c.*f.i = v.get<int64_t>();
        break;
      case Kind::Double:
        SWAPFFN_REQUIRE(v.is_number(), bad + "a number");
        c.*f.d = v.get<double>();
        break;
      case Kind::Bool:
        SWAPFFN_REQUIRE(v.is_boolean(), bad + "true or false");
        c.*f.b = v.get<bool>();
        break;
    }
  }
  c.validate();
  return c;
}

std::string Config::to_json_string() const { return to_json().dump(); }

Config Config::from_json_string(std::string_view text) {
  // A flat object of known keys: the caps only keep a hostile text from costing much to refuse.
  StrictJson parsed = parse_strict_json(text, {4, 64, 64});
  SWAPFFN_REQUIRE(parsed.error.empty(),
                  "config is not valid JSON (" + parsed.error + "): " + in_quotes(text));
  return from_json(parsed.value);
}

Config Config::preset(std::string_view name) {
  Config c;
  if (name == "default") return c;
  if (name == "tiny") {
    // Every size distinct so a transposed index shows; D and F multiples of 128 so GPU paths run it.
    c.d_model = 128;
    c.d_ff = 384;
    c.core_count = 40;
    c.n_events = 3;
    c.k_ffn = 2;
    c.d_router = 16;
    c.collapse_k = 5;
    c.collapse_r = 24;
    c.core_embed_dim = 8;
    return c;
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  SWAPFFN_FAIL("unknown config preset '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> Config::preset_names() { return {"default", "tiny"}; }

void Config::set(std::string_view key_equals_value) {
  const auto eq = key_equals_value.find('=');
  SWAPFFN_REQUIRE(eq != std::string_view::npos,
                  "config setting '" + std::string(key_equals_value) + "' must be key=value");
  const std::string key(key_equals_value.substr(0, eq));
  const std::string value(key_equals_value.substr(eq + 1));
  const Field* f = find_field(key);
  SWAPFFN_REQUIRE(f != nullptr, "unknown config key '" + key + "' (known: " + known_keys() + ")");
  const std::string bad = "config key " + key + ": cannot parse '" + value + "' as ";
  switch (f->kind) {
    case Kind::Int: {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      SWAPFFN_REQUIRE(!value.empty() && ec == std::errc() && p == value.data() + value.size(),
                      bad + "an integer");
      this->*f->i = v;
      break;
    }
    case Kind::Double: {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      SWAPFFN_REQUIRE(!value.empty() && end == value.c_str() + value.size(), bad + "a number");
      this->*f->d = v;
      break;
    }
    case Kind::Bool:
      if (value == "true" || value == "1")
        this->*f->b = true;
      else if (value == "false" || value == "0")
        this->*f->b = false;
      else
        SWAPFFN_FAIL(bad + "a bool (true/false/1/0)");
      break;
  }
}

double Config::ffn_flops_per_token() const {
  return static_cast<double>(n_events) * static_cast<double>(k_ffn) * 3.0 * 2.0 *
         static_cast<double>(core_count) * static_cast<double>(d_model) * static_cast<double>(d_ff);
}

double Config::flops_per_token() const {
  const double C = static_cast<double>(core_count), D = static_cast<double>(d_model);
  const double K = static_cast<double>(collapse_k), Rc = static_cast<double>(collapse_r);
  const double router = static_cast<double>(n_events) * 2.0 * C * D * static_cast<double>(d_router);
  const double collapse = 2.0 * C * K * D + 2.0 * K * Rc * D + 2.0 * D * Rc;
  return ffn_flops_per_token() + router + collapse;
}

}  // namespace swapffn

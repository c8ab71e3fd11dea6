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
#include "swapffn/error.hpp"

namespace swapffn {
namespace {

// Upper bound on every size: keeps products such as B*C*4*D and K*Rc*D far from int64 overflow
// and turns a corrupt config into an error instead of an enormous allocation.
constexpr int64_t kMaxDim = int64_t{1} << 20;

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
  SWAPFFN_REQUIRE(std::isfinite(norm_eps) && norm_eps > 0,
                  "config field norm_eps = " + format_double(norm_eps) +
                      " is invalid: must be finite and > 0");
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

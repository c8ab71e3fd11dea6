#include "swapffn/fused_options.hpp"

#include <cstddef>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "swapffn/error.hpp"
#include "swapffn/file_input.hpp"

namespace swapffn {
namespace {

constexpr size_t kMaxTuningCacheBytes = size_t{64} << 20;  // a cache holds a few hundred entries: KBs

DualGemmTile parse_tile(const std::string& v) {
  std::string known;
  for (const DualGemmTile t : kDualGemmTiles) {
    if (v == to_string(t)) return t;
    known += (known.empty() ? "" : ", ") + std::string(to_string(t));
  }
  SWAPFFN_FAIL("kernel choice up=" + v + ": no such dual GEMM tile (known: " + known + ")");
}

EventHead parse_head(const std::string& v) {
  if (v == "folded") return EventHead::folded;
  if (v == "cublas") return EventHead::cublas;
  SWAPFFN_FAIL("kernel choice router=" + v + ": must be folded or cublas");
}

Fp8UpGemm parse_fp8_up(const std::string& v) {
  if (v == "cublas") return Fp8UpGemm::cublas;
  if (v == "sm90") return Fp8UpGemm::sm90;
  SWAPFFN_FAIL("kernel choice fp8up=" + v + ": must be cublas or sm90");
}

fp8::Scaling parse_fp8_scales(const std::string& v) {
  try {
    return fp8::parse_scaling(v);
  } catch (const Error& e) {
    SWAPFFN_FAIL("kernel choice scales=" + v + ": " + e.what());
  }
}

int parse_groups(const std::string& v) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SWAPFFN_REQUIRE(used == v.size() && !v.empty() && n >= 1 && n <= kMaxRowGroups,
                  "kernel choice groups=" + v + ": must be a group count from 1 to " + std::to_string(kMaxRowGroups));
  return n;
}

// A field of a tuning-cache object, or an error naming it (not nlohmann's bare type error).
template <class T>
T field(const nlohmann::json& obj, const std::string& key, const std::string& where) {
  SWAPFFN_REQUIRE(obj.is_object(), where + " is not a JSON object");
  SWAPFFN_REQUIRE(obj.contains(key), where + " has no field '" + key + "'");
  try {
    return obj.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    SWAPFFN_FAIL(where + ": field '" + key + "' has the wrong type (" + obj.at(key).dump() + ")");
  }
}

}  // namespace

const char* to_string(DualGemmTile t) {
  switch (t) {
    case DualGemmTile::bn256: return "bn256_st4_sk1_mc1";
    case DualGemmTile::bn256_persistent: return "bn256_st4_sk1_mc1_p";
    case DualGemmTile::bn256_persistent_mc2: return "bn256_st4_sk1_mc2_p";
  }
  return "?";
}

const char* to_string(EventHead h) { return h == EventHead::folded ? "folded" : "cublas"; }

const char* to_string(Fp8UpGemm g) { return g == Fp8UpGemm::cublas ? "cublas" : "sm90"; }

std::string FusedChoice::describe() const {
  std::string s;
  const auto add = [&](const std::string& part) { s += (s.empty() ? "" : ",") + part; };
  if (up) add(std::string("up=") + to_string(*up));
  if (router) add(std::string("router=") + to_string(*router));
  if (row_groups) add("groups=" + std::to_string(*row_groups));
  if (fp8_up) add(std::string("fp8up=") + to_string(*fp8_up));
  if (fp8_scales) add(std::string("scales=") + fp8::scaling_name(*fp8_scales));
  return s;
}

FusedChoice FusedOptions::at(int64_t batch) const {
  const TunedChoice* entry = nullptr;
  for (const TunedChoice& t : tuned)
    if (t.batch <= batch && (!entry || t.batch > entry->batch)) entry = &t;
  FusedChoice c = entry ? entry->choice : FusedChoice{};
  if (pinned.up) c.up = pinned.up;
  if (pinned.router) c.router = pinned.router;
  if (pinned.row_groups) c.row_groups = pinned.row_groups;
  if (pinned.fp8_up) c.fp8_up = pinned.fp8_up;
  if (pinned.fp8_scales) c.fp8_scales = pinned.fp8_scales;
  return c;
}

std::string FusedOptions::describe() const {
  std::string s = pinned.describe();
  if (!tuned.empty()) s += (s.empty() ? "" : ", ") + std::to_string(tuned.size()) + " tuned batch sizes";
  return s;
}

FusedChoice parse_fused_choice(const std::string& spec) {
  FusedChoice c;
  size_t pos = 0;
  while (pos < spec.size()) {
    const size_t end = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, end - pos);
    const size_t eq = item.find('=');
    SWAPFFN_REQUIRE(eq != std::string::npos, "kernel choice '" + item + "' is not key=value");
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    if (key == "up")
      c.up = parse_tile(val);
    else if (key == "router")
      c.router = parse_head(val);
    else if (key == "groups")
      c.row_groups = parse_groups(val);
    else if (key == "fp8up")
      c.fp8_up = parse_fp8_up(val);
    else if (key == "scales")
      c.fp8_scales = parse_fp8_scales(val);
    else
      SWAPFFN_FAIL("unknown kernel choice '" + key + "' (known: up, router, groups, fp8up, scales)");
    pos = end + 1;
  }
  return c;
}

std::vector<TunedChoice> load_tuning(const std::string& path, const std::string& device, int64_t d_model, int64_t d_ff) {
  const std::vector<std::byte> bytes = read_regular_file(path, "tuning cache " + path, kMaxTuningCacheBytes);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(reinterpret_cast<const char*>(bytes.data()),
                              reinterpret_cast<const char*>(bytes.data()) + bytes.size());
  } catch (const std::exception& e) {
    SWAPFFN_FAIL("tuning cache " + path + " is not valid JSON: " + e.what());
  }
  const std::string where = "tuning cache " + path;
  if (field<std::string>(j, "device", where) != device || field<int64_t>(j, "d_model", where) != d_model ||
      field<int64_t>(j, "d_ff", where) != d_ff)
    return {};
  const auto entries = field<nlohmann::json>(j, "entries", where);
  SWAPFFN_REQUIRE(entries.is_array(), where + ": field 'entries' is not an array");
  std::vector<TunedChoice> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string at = where + ", entry " + std::to_string(i);
    TunedChoice t;
    t.batch = field<int64_t>(entries[i], "batch", at);
    SWAPFFN_REQUIRE(t.batch >= 1, at + ": batch must be >= 1");
    try {
      t.choice.up = parse_tile(field<std::string>(entries[i], "up", at));
      t.choice.router = parse_head(field<std::string>(entries[i], "router", at));
      t.choice.row_groups = parse_groups(std::to_string(field<int>(entries[i], "groups", at)));
    } catch (const Error& e) {
      SWAPFFN_FAIL(at + ": " + e.what());
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace swapffn

// State::save / State::load: the state file of SPEC section 3 (tensors `ram` and `stream_map`) and
// the fingerprint of the model it belongs to.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <optional>

#include "core/printable.hpp"
#include "swapffn/error.hpp"
#include "swapffn/safetensors.hpp"
#include "swapffn/state.hpp"

namespace swapffn {

namespace st = safetensors;

namespace {

constexpr const char* kModelKey = "swapffn.model_fingerprint";

std::string fingerprint_text(uint64_t fp) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, fp);
  return hex;
}

// The fingerprint recorded in the file, nullopt in a file saved before they were recorded.
std::optional<uint64_t> recorded_fingerprint(const st::Reader& r, const std::string& f) {
  const auto it = r.metadata().find(kModelKey);
  if (it == r.metadata().end()) return std::nullopt;
  const std::string& v = it->second;
  SWAPFFN_REQUIRE(v.size() == 16 && v.find_first_not_of("0123456789abcdef") == std::string::npos,
                  f + "metadata '" + kModelKey + "' is " + in_quotes(v) + ", expected 16 lowercase hex digits");
  return std::stoull(v, nullptr, 16);
}

State read_state(const st::Reader& r, const std::string& path) {
  const std::string f = "state " + path + ": ";
  for (const auto& t : r.tensors())
    SWAPFFN_REQUIRE(t.name == "ram" || t.name == "stream_map",
                    f + "extra tensor " + in_quotes(t.name) + " (a state holds only ram and stream_map)");
  const st::TensorInfo* ram = r.find("ram");
  const st::TensorInfo* map = r.find("stream_map");
  SWAPFFN_REQUIRE(ram != nullptr, f + "missing tensor 'ram'");
  SWAPFFN_REQUIRE(map != nullptr, f + "missing tensor 'stream_map'");
  SWAPFFN_REQUIRE(ram->dtype == st::DType::BF16,
                  f + "tensor 'ram' has wrong dtype " + st::dtype_name(ram->dtype) + ", expected BF16");
  SWAPFFN_REQUIRE(map->dtype == st::DType::U8, f + "tensor 'stream_map' has wrong dtype " +
                                                   st::dtype_name(map->dtype) + ", expected U8");
  SWAPFFN_REQUIRE(ram->shape.size() == 4 && ram->shape[2] == 4 && ram->shape[0] > 0 &&
                      ram->shape[1] > 0 && ram->shape[3] > 0,
                  f + "tensor 'ram' has wrong shape " + st::shape_string(ram->shape) +
                      ", expected [B, C, 4, D] with B, C, D > 0");
  const std::vector<int64_t> want_map = {ram->shape[0], ram->shape[1]};
  SWAPFFN_REQUIRE(map->shape == want_map, f + "tensor 'stream_map' has wrong shape " +
                                              st::shape_string(map->shape) + ", expected " +
                                              st::shape_string(want_map) + " to match ram");
  State s;
  s.batch = ram->shape[0];
  s.cores = ram->shape[1];
  s.d_model = ram->shape[3];
  s.ram = r.to_bf16("ram");
  s.stream_map = r.to_u8("stream_map");
  try {
    s.check_ram_values();
    s.validate();
  } catch (const Error& e) {
    SWAPFFN_FAIL(f + e.what());
  }
  return s;
}

}  // namespace

void State::save(const std::string& path, uint64_t model_fingerprint) const {
  validate();
  check_ram_values();  // never a file that load refuses
  st::Writer wr;
  wr.set_metadata(kModelKey, fingerprint_text(model_fingerprint));
  wr.add_bf16("ram", {batch, cores, 4, d_model}, ram);
  wr.add_u8("stream_map", {batch, cores}, stream_map);
  wr.write(path);
}

State State::load(const std::string& path) {
  const st::Reader r(path);
  recorded_fingerprint(r, "state " + path + ": ");
  return read_state(r, path);
}

State State::load(const std::string& path, uint64_t model_fingerprint, const std::string& model_name) {
  const st::Reader r(path);
  const std::optional<uint64_t> recorded = recorded_fingerprint(r, "state " + path + ": ");
  State s = read_state(r, path);
  const std::string model =
      (model_name.empty() ? "this model" : "model " + model_name) + " (fingerprint " + fingerprint_text(model_fingerprint) + ")";
  if (!recorded)
    throw ForeignStateError("state " + path + " records no model fingerprint (saved before swapffn recorded them), " +
                            "so it cannot be shown to belong to " + model);
  if (*recorded != model_fingerprint)
    throw ForeignStateError("state " + path + " belongs to the model with fingerprint " + fingerprint_text(*recorded) +
                            ", not to " + model);
  return s;
}

}  // namespace swapffn

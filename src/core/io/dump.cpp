// The run dump file (see include/swapffn/dump.hpp and docs/FORMATS.md).
#include "swapffn/dump.hpp"

#include <algorithm>

#include "core/printable.hpp"
#include "swapffn/error.hpp"
#include "swapffn/safetensors.hpp"

namespace swapffn {

namespace st = safetensors;

namespace {

void require_size(const char* name, size_t have, int64_t want) {
  SWAPFFN_REQUIRE(have == static_cast<size_t>(want),
                  std::string("dump array ") + name + " holds " + std::to_string(have) +
                      " values, expected " + std::to_string(want));
}

}  // namespace

void Dump::set_traces(const std::vector<Trace>& traces) {
  const int64_t E = cfg.n_events, C = cfg.core_count;
  SWAPFFN_REQUIRE(static_cast<int64_t>(traces.size()) == tokens,
                  "dump: " + std::to_string(traces.size()) + " traces for " +
                      std::to_string(tokens) + " tokens");
  gate.clear();
  slot.clear();
  for (size_t t = 0; t < traces.size(); ++t) {
    const Trace& tr = traces[t];
    SWAPFFN_REQUIRE(tr.events == E && tr.batch == batch && tr.cores == C &&
                        tr.gate.size() == static_cast<size_t>(E * batch * C) &&
                        tr.slot.size() == tr.gate.size(),
                    "dump: trace of token " + std::to_string(t) + " has shape [" +
                        std::to_string(tr.events) + ", " + std::to_string(tr.batch) + ", " +
                        std::to_string(tr.cores) + "], expected [" + std::to_string(E) + ", " +
                        std::to_string(batch) + ", " + std::to_string(C) + "]");
    gate.insert(gate.end(), tr.gate.begin(), tr.gate.end());
    slot.insert(slot.end(), tr.slot.begin(), tr.slot.end());
  }
}

std::vector<Trace> Dump::traces() const {
  const int64_t E = cfg.n_events, C = cfg.core_count, n = E * batch * C;
  require_size("gate", gate.size(), tokens * n);
  require_size("slot", slot.size(), tokens * n);
  std::vector<Trace> out(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    Trace& tr = out[static_cast<size_t>(t)];
    tr.resize(E, batch, C);
    std::copy_n(gate.begin() + t * n, n, tr.gate.begin());
    std::copy_n(slot.begin() + t * n, n, tr.slot.begin());
  }
  return out;
}

void Dump::validate() const {
  cfg.validate();
  SWAPFFN_REQUIRE(tokens >= 0 && batch > 0, "dump: tokens " + std::to_string(tokens) +
                                                " and batch " + std::to_string(batch) +
                                                " must be >= 0 and > 0");
  const int64_t D = cfg.d_model, E = cfg.n_events, C = cfg.core_count;
  require_size("x", x.size(), tokens * batch * D);
  require_size("delta", delta.size(), tokens * batch * D);
  require_size("gate", gate.size(), tokens * E * batch * C);
  require_size("slot", slot.size(), tokens * E * batch * C);
  for (size_t i = 0; i < gate.size(); ++i)
    SWAPFFN_REQUIRE(gate[i] <= 1, "dump: gate value " + std::to_string(gate[i]) + " at index " +
                                      std::to_string(i) + " is not 0 or 1");
  for (size_t i = 0; i < slot.size(); ++i)
    SWAPFFN_REQUIRE(slot[i] <= 3, "dump: slot value " + std::to_string(slot[i]) + " at index " +
                                      std::to_string(i) + " is not in 0..3");
  final_state.check_matches(cfg, batch);
  if (initial_state) initial_state->check_matches(cfg, batch);
}

void write_dump(const std::string& path, const Dump& d) {
  d.validate();
  const int64_t T = d.tokens, B = d.batch, D = d.cfg.d_model, E = d.cfg.n_events;
  const int64_t C = d.cfg.core_count;
  st::Writer wr;
  wr.set_metadata("swapffn.config", d.cfg.to_json_string());
  wr.set_metadata("swapffn.backend", d.backend);
  wr.add_f32("x", {T, B, D}, d.x);
  wr.add_f32("delta", {T, B, D}, d.delta);
  wr.add_u8("gate", {T, E, B, C}, d.gate);
  wr.add_u8("slot", {T, E, B, C}, d.slot);
  wr.add_bf16("ram", {B, C, 4, D}, d.final_state.ram);
  wr.add_u8("stream_map", {B, C}, d.final_state.stream_map);
  if (d.initial_state) {
    wr.add_bf16("ram0", {B, C, 4, D}, d.initial_state->ram);
    wr.add_u8("stream_map0", {B, C}, d.initial_state->stream_map);
  }
  wr.write(path);
}

Dump read_dump(const std::string& path) {
  st::Reader r(path);
  const std::string f = "dump " + path + ": ";
  Dump d;
  try {
    d.cfg = Config::from_json_string(r.metadata_at("swapffn.config"));
  } catch (const Error& e) {
    SWAPFFN_FAIL(f + "invalid swapffn.config: " + e.what());
  }
  d.backend = r.metadata_at("swapffn.backend");
  for (const auto& t : r.tensors())
    SWAPFFN_REQUIRE(t.name == "x" || t.name == "delta" || t.name == "gate" || t.name == "slot" ||
                        t.name == "ram" || t.name == "stream_map" || t.name == "ram0" ||
                        t.name == "stream_map0",
                    f + "extra tensor " + in_quotes(t.name));
  const st::TensorInfo& x = r.at("x");
  SWAPFFN_REQUIRE(x.shape.size() == 3 && x.shape[2] == d.cfg.d_model && x.shape[1] > 0,
                  f + "tensor 'x' has wrong shape " + st::shape_string(x.shape) +
                      ", expected [T, B, " + std::to_string(d.cfg.d_model) + "]");
  d.tokens = x.shape[0];
  d.batch = x.shape[1];
  const int64_t T = d.tokens, B = d.batch, D = d.cfg.d_model, E = d.cfg.n_events;
  const int64_t C = d.cfg.core_count;
  auto take = [&](const char* name, st::DType dtype, const std::vector<int64_t>& shape) {
    const st::TensorInfo& t = r.at(name);
    SWAPFFN_REQUIRE(t.dtype == dtype, f + "tensor '" + name + "' has wrong dtype " +
                                          st::dtype_name(t.dtype) + ", expected " +
                                          st::dtype_name(dtype));
    r.require_shape(t, shape);
  };
  take("x", st::DType::F32, {T, B, D});
  take("delta", st::DType::F32, {T, B, D});
  take("gate", st::DType::U8, {T, E, B, C});
  take("slot", st::DType::U8, {T, E, B, C});
  take("ram", st::DType::BF16, {B, C, 4, D});
  take("stream_map", st::DType::U8, {B, C});
  d.x = r.to_float("x");
  d.delta = r.to_float("delta");
  d.gate = r.to_u8("gate");
  d.slot = r.to_u8("slot");
  auto state = [&](const char* ram, const char* map) {
    State s;
    s.batch = B;
    s.cores = C;
    s.d_model = D;
    s.ram = r.to_bf16(ram);
    s.stream_map = r.to_u8(map);
    return s;
  };
  d.final_state = state("ram", "stream_map");
  const bool has_ram0 = r.find("ram0") != nullptr, has_map0 = r.find("stream_map0") != nullptr;
  SWAPFFN_REQUIRE(has_ram0 == has_map0, f + "'ram0' and 'stream_map0' must come together");
  if (has_ram0) {
    take("ram0", st::DType::BF16, {B, C, 4, D});
    take("stream_map0", st::DType::U8, {B, C});
    d.initial_state = state("ram0", "stream_map0");
  }
  try {
    d.validate();
  } catch (const Error& e) {
    SWAPFFN_FAIL(f + e.what());
  }
  return d;
}

}  // namespace swapffn

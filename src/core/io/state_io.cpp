// State::save / State::load: the state file of SPEC section 3 (tensors `ram` and `stream_map`).
#include <cmath>

#include "core/printable.hpp"
#include "swapffn/error.hpp"
#include "swapffn/safetensors.hpp"
#include "swapffn/state.hpp"

namespace swapffn {

namespace st = safetensors;

void State::save(const std::string& path) const {
  validate();
  st::Writer wr;
  wr.add_bf16("ram", {batch, cores, 4, d_model}, ram);
  wr.add_u8("stream_map", {batch, cores}, stream_map);
  wr.write(path);
}

State State::load(const std::string& path) {
  st::Reader r(path);
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
  for (size_t i = 0; i < s.ram.size(); ++i)
    SWAPFFN_REQUIRE(std::isfinite(bf16_to_float(s.ram[i])),
                    f + "tensor 'ram' has a non-finite value at index " + std::to_string(i));
  try {
    s.validate();
  } catch (const Error& e) {
    SWAPFFN_FAIL(f + e.what());
  }
  return s;
}

}  // namespace swapffn

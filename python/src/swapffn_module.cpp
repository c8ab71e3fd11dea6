// The `swapffn._swapffn` extension: the engine, its state pools and slot steps, for the Python
// package (python/swapffn). (The NVFP4 kernels are another module, swapffn._nvfp4: nvfp4/python.)
// Arrays cross by DLPack (nanobind ndarrays): NumPy and torch CPU arrays take the host path, CUDA
// arrays (torch, CuPy, JAX) the device path on the caller's stream. The Python layer checks dtypes,
// shapes, devices and slot ids and names the argument; this layer checks again what it must to stay
// memory-safe. Every call that touches an engine or its pools holds the engine's mutex with the GIL
// released, so threads that share an engine take turns (no step is lost, no buffer shared).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "swapffn/backends.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"
#include "swapffn/file_input.hpp"
#include "swapffn/limits.hpp"
#include "swapffn/weights.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace swapffn::python {
namespace {

using HostX = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using HostF32 = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using HostIds = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using CudaF32 = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cuda>;
using CudaIds = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cuda>;
using CudaSteps = nb::ndarray<float, nb::ndim<3>, nb::c_contig, nb::device::cuda>;
using Ram = nb::ndarray<nb::numpy, uint16_t, nb::ndim<3>>;
using Map = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>;

struct PyEngine {
  Weights weights;
  std::string path;
  uint64_t fingerprint = 0;  // of weights, which the pool's state files record
  std::string backend;
  std::string backend_why;  // what "auto" picked and why, else empty
  int device;
  std::unique_ptr<Engine> engine;
  std::mutex turn;  // one call at a time on this engine and its pools
};

struct PyPool {
  std::shared_ptr<PyEngine> owner;  // the pool's memory is the engine's device's
  std::unique_ptr<StatePool> pool;
};

// Runs f() holding e's mutex with the GIL released (f must not touch Python objects). Releasing the
// GIL first means a thread waiting for the mutex never holds the GIL that its holder needs. (The
// engine and its pools run on their device, whatever device is current: DeviceSteps.)
template <class F>
auto taking_turns(PyEngine& e, F&& f) {
  nb::gil_scoped_release release;
  const std::lock_guard<std::mutex> lock(e.turn);
  return f();
}

// A slot index of pool p as int32, refused naming it when it is outside [0, S).
int32_t slot_of(const PyPool& p, int64_t slot) {
  require_in_range(slot, 0, p.pool->slots() - 1, "slot");
  return static_cast<int32_t>(slot);
}

std::shared_ptr<PyEngine> load_engine(const std::string& path, const std::string& backend, int device, int threads,
                                      bool graph, const std::string& kernels) {
  const DeviceScope on_device(device);  // the engine is made there and stays there
  auto e = std::make_shared<PyEngine>();
  e->weights = Weights::load(path);
  e->path = path;
  e->fingerprint = e->weights.fingerprint();
  const ResolvedBackend r = resolve_backend(backend, query_gpu(), e->weights.fp8_ffn.has_value());
  e->backend = r.name;
  e->backend_why = r.why;
  e->device = device;
  EngineOptions opt;
  opt.threads = threads;
  opt.graph = graph;
  opt.fused.pinned = parse_fused_choice(kernels);
  e->engine = make_engine(e->backend, e->weights, opt);
  return e;
}

void check_rows(const PyEngine& e, size_t rows, size_t cols, size_t ids, const char* what) {
  const auto D = static_cast<size_t>(e.weights.cfg.d_model);
  SWAPFFN_REQUIRE(cols == D, std::string(what) + ": rows of " + std::to_string(cols) + " values, the model's d_model is " +
                                 std::to_string(D));
  SWAPFFN_REQUIRE(rows == ids, std::string(what) + ": " + std::to_string(rows) + " rows for " + std::to_string(ids) +
                                   " slot ids");
}

// Host arrays: Engine::step_slots (every backend; GPU engines copy to their device).
nb::tuple step_host(PyEngine& e, PyPool& p, HostX x, HostIds ids, HostF32 out, bool record) {
  check_rows(e, x.shape(0), x.shape(1), ids.shape(0), "x");
  check_rows(e, out.shape(0), out.shape(1), ids.shape(0), "out");
  std::vector<int32_t> slot_ids(ids.data(), ids.data() + ids.shape(0));
  Trace trace;
  StepOptions opt;
  if (record) opt.record = &trace;
  taking_turns(e, [&] { e.engine->step_slots(x.data(), slot_ids, out.data(), *p.pool, opt); });
  if (!record) return nb::make_tuple(nb::none(), nb::none());
  const size_t shape[3] = {size_t(trace.events), size_t(trace.batch), size_t(trace.cores)};
  auto* gate = new std::vector<uint8_t>(std::move(trace.gate));
  auto* slot = new std::vector<uint8_t>(std::move(trace.slot));
  nb::capsule own_gate(gate, [](void* v) noexcept { delete static_cast<std::vector<uint8_t>*>(v); });
  nb::capsule own_slot(slot, [](void* v) noexcept { delete static_cast<std::vector<uint8_t>*>(v); });
  return nb::make_tuple(nb::ndarray<nb::numpy, uint8_t, nb::ndim<3>>(gate->data(), 3, shape, own_gate),
                        nb::ndarray<nb::numpy, uint8_t, nb::ndim<3>>(slot->data(), 3, shape, own_slot));
}

// The engine's device face, for CUDA arrays that must all be on its device (names: theirs, for the
// error).
DeviceSteps& device_engine(PyEngine& e, std::initializer_list<int32_t> devices, const char* names) {
  DeviceSteps* g = e.engine->device_steps();
  SWAPFFN_REQUIRE(g != nullptr, "backend '" + e.backend + "' runs on the host: pass host arrays");
  for (const int32_t d : devices)
    SWAPFFN_REQUIRE(d == g->device(), std::string(names) + " must be on the engine's device cuda:" +
                                          std::to_string(g->device()));
  return *g;
}

// CUDA arrays: the slot step enqueued on the caller's stream (capturable once the batch size has run).
void step_device(PyEngine& e, PyPool& p, CudaF32 x, CudaIds ids, CudaF32 out, uintptr_t stream) {
  check_rows(e, x.shape(0), x.shape(1), ids.shape(0), "x");
  check_rows(e, out.shape(0), out.shape(1), ids.shape(0), "out");
  DeviceSteps& g = device_engine(e, {x.device_id(), ids.device_id(), out.device_id()}, "x, slot_ids and out");
  taking_turns(e, [&] {
    g.enqueue_step_slots(x.data(), ids.data(), int64_t(ids.shape(0)), out.data(), *p.pool,
                         reinterpret_cast<DeviceSteps::Stream>(stream));
  });
}

// CUDA arrays [T, B, D]: T replays of the engine's slot-step graph on its own stream, joined to the
// caller's stream before and after (no host synchronisation).
void decode_device(PyEngine& e, PyPool& p, CudaSteps xs, CudaIds ids, CudaSteps out, uintptr_t stream) {
  check_rows(e, xs.shape(1), xs.shape(2), ids.shape(0), "xs");
  check_rows(e, out.shape(1), out.shape(2), ids.shape(0), "out");
  SWAPFFN_REQUIRE(xs.shape(0) == out.shape(0), "out: " + std::to_string(out.shape(0)) + " steps for " +
                                                   std::to_string(xs.shape(0)) + " steps of xs");
  DeviceSteps& g = device_engine(e, {xs.device_id(), ids.device_id(), out.device_id()}, "xs, slot_ids and out");
  taking_turns(e, [&] {
    g.enqueue_decode_slots(xs.data(), out.data(), int64_t(xs.shape(0)), *p.pool, ids.data(), int64_t(ids.shape(0)),
                           reinterpret_cast<DeviceSteps::Stream>(stream));
  });
}

nb::tuple pool_get(PyPool& p, int64_t slot) {
  const int32_t s = slot_of(p, slot);
  State one = taking_turns(*p.owner, [&] { return p.pool->get(s); });
  const size_t ram_shape[3] = {size_t(one.cores), 4, size_t(one.d_model)};
  const size_t map_shape[1] = {size_t(one.cores)};
  auto* ram = new std::vector<bf16>(std::move(one.ram));
  auto* map = new std::vector<uint8_t>(std::move(one.stream_map));
  nb::capsule own_ram(ram, [](void* v) noexcept { delete static_cast<std::vector<bf16>*>(v); });
  nb::capsule own_map(map, [](void* v) noexcept { delete static_cast<std::vector<uint8_t>*>(v); });
  return nb::make_tuple(Ram(reinterpret_cast<uint16_t*>(ram->data()), 3, ram_shape, own_ram),
                        Map(map->data(), 1, map_shape, own_map));
}

// ram as bf16 bits (uint16), or fp32 values rounded to bf16 as a RAM write rounds them (SPEC
// section 4: float_to_bf16; a NaN stays one, and the pool's check refuses it).
template <typename T>
void pool_set(PyPool& p, int64_t slot, nb::ndarray<const T, nb::ndim<3>, nb::c_contig, nb::device::cpu> ram,
              nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> map) {
  const int32_t s = slot_of(p, slot);
  const Config& cfg = p.owner->weights.cfg;
  const auto C = size_t(cfg.core_count), D = size_t(cfg.d_model);
  SWAPFFN_REQUIRE(ram.shape(0) == C && ram.shape(1) == 4 && ram.shape(2) == D,
                  "ram: shape (" + std::to_string(ram.shape(0)) + ", " + std::to_string(ram.shape(1)) + ", " +
                      std::to_string(ram.shape(2)) + "), a slot holds [C, 4, D] = (" + std::to_string(C) + ", 4, " +
                      std::to_string(D) + ")");
  SWAPFFN_REQUIRE(map.shape(0) == C, "stream_map: shape (" + std::to_string(map.shape(0)) +
                                         ",), a slot holds [C] = (" + std::to_string(C) + ",)");
  State one = State::init(cfg, 1);
  if constexpr (std::is_same_v<T, float>) {
    for (size_t i = 0; i < one.ram.size(); ++i) one.ram[i] = float_to_bf16(ram.data()[i]);
  } else {
    std::memcpy(one.ram.data(), ram.data(), one.ram.size() * sizeof(uint16_t));
  }
  std::memcpy(one.stream_map.data(), map.data(), one.stream_map.size());
  taking_turns(*p.owner, [&] { p.pool->set(s, one); });
}

void pool_load(PyPool& p, int64_t slot, const std::string& path) {
  const int32_t s = slot_of(p, slot);
  check_path(path, "state file");
  taking_turns(*p.owner, [&] {
    const State one = State::load(path, p.owner->fingerprint, p.owner->path);
    one.check_matches(p.owner->weights.cfg, 1);
    p.pool->set(s, one);
  });
}

void pool_save(PyPool& p, int64_t slot, const std::string& path) {
  const int32_t s = slot_of(p, slot);
  check_path(path, "state file");
  SWAPFFN_REQUIRE(!same_file(path, p.owner->path),
                  "path: " + path + " is the engine's model file; save the state to another file");
  taking_turns(*p.owner, [&] { p.pool->get(s).save(path, p.owner->fingerprint); });
}

}  // namespace

NB_MODULE(_swapffn, m) {
  m.doc() = "swapffn engine bindings (use the swapffn package, not this module)";
  // Registered base first: a subclass's translator, registered later, is tried before it.
  const nb::exception<Error> error(m, "Error", PyExc_ValueError);
  nb::exception<FileError>(m, "FileError", nb::make_tuple(error, nb::handle(PyExc_OSError)));
  nb::exception<NoGpuError>(m, "NoGpuError", error);
  m.def("backends", &backend_names);
  m.def("runnable_backends", [] { return runnable_backends(query_gpu()); });
  m.def("config_presets", &Config::preset_names);
  m.def("config_preset", [](const std::string& name) { return Config::preset(name).to_json_string(); });
  m.attr("version") = SWAPFFN_VERSION;
  m.attr("max_value") = double(kMaxValueMagnitude);  // the engines' bound on |x| (limits.hpp)
#ifdef SWAPFFN_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
  m.def("gpu", [] {
    const GpuInfo g = query_gpu();
    return nb::make_tuple(g.present, g.present ? g.name : g.why_absent, g.is_hopper());
  });

  nb::class_<PyEngine>(m, "Engine")
      .def_prop_ro("name", [](const PyEngine& e) { return e.engine->name(); })
      .def_prop_ro("device", [](const PyEngine& e) { return e.device; })
      .def_prop_ro("backend_why", [](const PyEngine& e) { return e.backend_why; })
      .def_prop_ro("config_json", [](const PyEngine& e) { return e.weights.cfg.to_json_string(); })
      .def_prop_ro("on_host", [](const PyEngine& e) { return e.engine->device_steps() == nullptr; })
      .def_prop_ro("buffers_generation", [](const PyEngine& e) -> std::optional<uint64_t> {
        if (const DeviceSteps* g = e.engine->device_steps()) return g->buffers_generation();
        return std::nullopt;
      });
  m.def("init_model", [](const std::string& path, const std::string& preset, uint64_t seed) {
    Weights::random(Config::preset(preset), seed).save(path);
  });
  m.def("load_engine", &load_engine, "path"_a, "backend"_a, "device"_a, "threads"_a, "graph"_a, "kernels"_a);

  nb::class_<PyPool>(m, "Pool")
      .def_prop_ro("slots", [](const PyPool& p) { return p.pool->slots(); })
      .def("reset", [](PyPool& p, const std::vector<int32_t>& ids) { taking_turns(*p.owner, [&] { p.pool->reset(ids); }); })
      .def("get", &pool_get)
      .def("set", &pool_set<uint16_t>)
      .def("set_f32", &pool_set<float>)
      .def("load", &pool_load)
      .def("save", &pool_save);
  m.def("make_pool", [](std::shared_ptr<PyEngine> e, int64_t slots) {
    require_in_range(slots, 1, kMaxBatch, "slots");
    auto p = std::make_unique<PyPool>();
    p->owner = e;
    p->pool = taking_turns(*e, [&] { return e->engine->make_pool(slots); });
    return p;
  });
  m.def("step_host", &step_host);
  m.def("step_device", &step_device);
  m.def("decode_device", &decode_device);
  m.def("check_slot_ids", [](const std::vector<int32_t>& ids, int64_t slots) { check_slot_ids(ids, slots, true); });
}

}  // namespace swapffn::python

// `swapffn._swapffn.nvfp4`: the NVFP4 kernels (include/swapffn/nvfp4/nvfp4.hpp) on CUDA arrays laid
// out as the GPU MODE competition builds them, for python/swapffn/nvfp4.py. Arrays cross by DLPack:
// packed e2m1 data and e4m3 scales as uint8 views, c as fp16. The Python layer checks dtypes,
// shapes, strides and devices and names the argument; this layer checks again that every array has
// the layout the kernels index (so they read and write only inside the arrays), takes the library's
// default config and launches on the caller's stream. The split-K / fp16-A workspace is the
// caller's zeroed memory: a call that finds it too small launches nothing and returns the bytes it
// needs (0 once launched).
#include "nvfp4_module.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "swapffn/device.hpp"
#include "swapffn/error.hpp"
#include "swapffn/nvfp4/nvfp4.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace swapffn::python {
namespace {

namespace nv = swapffn::nvfp4;

using Bytes = nb::ndarray<const uint8_t, nb::device::cuda>;  // packed e2m1 data or e4m3 scales
using Half = nb::ndarray<nb::device::cuda>;                  // c, fp16 (checked in output())

// The arrays' device made current for each launch (this module's CUDA runtime keeps its own current
// device, whatever torch's is).

std::string str(int64_t v) { return std::to_string(v); }

// `x` on `device` with `shape` and, in every dimension of extent > 1, `strides` (in elements).
template <class Array>
void require_layout(const Array& x, const std::string& name, std::initializer_list<int64_t> shape,
                    std::initializer_list<int64_t> strides, int device) {
  SWAPFFN_REQUIRE(x.device_id() == device, name + ": on cuda:" + str(x.device_id()) + ", c is on cuda:" + str(device));
  SWAPFFN_REQUIRE(x.ndim() == shape.size(), name + ": " + str(int64_t(x.ndim())) + " dimensions, expected " +
                                                str(int64_t(shape.size())));
  size_t i = 0;
  for (auto s = shape.begin(), t = strides.begin(); s != shape.end(); ++s, ++t, ++i) {
    SWAPFFN_REQUIRE(int64_t(x.shape(i)) == *s, name + ": dimension " + str(int64_t(i)) + " has extent " +
                                                   str(int64_t(x.shape(i))) + ", expected " + str(*s));
    SWAPFFN_REQUIRE(*s == 1 || x.stride(i) == *t, name + ": dimension " + str(int64_t(i)) + " has stride " +
                                                      str(x.stride(i)) + ", expected " + str(*t));
  }
}

struct Dims {
  int64_t k, l;
};

// K and L of a data array (rows, K/2, L).
Dims dims_of(const Bytes& data, const std::string& name) {
  SWAPFFN_REQUIRE(data.ndim() == 3, name + ": " + str(int64_t(data.ndim())) + " dimensions, expected 3 (rows, K/2, L)");
  return {2 * int64_t(data.shape(1)), int64_t(data.shape(2))};
}

// data (rows, K/2, L) with strides (K/2, 1, rows*K/2); scales plain (rows, K/16, L) with strides
// (K/16, 1, rows*K/16), or blocked: the (32, 4, rm, 4, rk, L) view of 128x4 blocks stored as
// scale_offset() lays them out. `rows` is what each batch stores (the GEMV's b may store 128).
nv::Operand operand(const Bytes& data, const Bytes& scales, bool blocked, Dims d, int device, const std::string& name) {
  SWAPFFN_REQUIRE(data.ndim() == 3, name + ": " + str(int64_t(data.ndim())) + " dimensions, expected 3 (rows, K/2, L)");
  const int64_t rows = int64_t(data.shape(0)), kb = d.k / 2, ks = d.k / 16;
  require_layout(data, name, {rows, kb, d.l}, {kb, 1, rows * kb}, device);
  if (blocked) {
    const int64_t rm = (rows + 127) / 128, rk = (ks + 3) / 4;
    require_layout(scales, name + " scales (blocked)", {32, 4, rm, 4, rk, d.l},
                   {16, 4, rk * 512, 1, 512, rm * rk * 512}, device);
  } else {
    require_layout(scales, name + " scales (plain)", {rows, ks, d.l}, {ks, 1, rows * ks}, device);
  }
  return {data.data(), scales.data(), blocked ? nv::ScaleLayout::blocked_128x4 : nv::ScaleLayout::plain, rows};
}

// c (M, N, L) fp16 with strides (N, 1, M*N).
void* output(const Half& c, int64_t m, int64_t n, int64_t l) {
  const nb::dlpack::dtype t = c.dtype();
  SWAPFFN_REQUIRE(t.code == uint8_t(nb::dlpack::dtype_code::Float) && t.bits == 16 && t.lanes == 1,
                  "c: expected float16 values");
  require_layout(c, "c", {m, n, l}, {n, 1, m * n}, c.device_id());
  return c.data();
}

// Validates `p`, then launches `run` with the default config and the caller's workspace, or returns
// the bytes that config needs when the workspace is smaller (nothing launched).
template <class Problem, class Choose, class Run>
int64_t launch(const Problem& p, int device, Choose choose, Run run, uintptr_t ws, int64_t ws_bytes, uintptr_t stream) {
  nv::validate(p);
  const auto cfg = choose(p, gpu_sm_count(device));
  const size_t need = nv::workspace_bytes(p, cfg);
  if (ws_bytes < 0 || need > size_t(ws_bytes)) return int64_t(need);
  nb::gil_scoped_release release;
  run(p, cfg, nv::Workspace{reinterpret_cast<void*>(ws), size_t(ws_bytes)}, reinterpret_cast<nv::Stream>(stream));
  return 0;
}

int64_t gemv(Bytes a, Bytes sfa, bool a_blocked, Bytes b, Bytes sfb, bool b_blocked, Half c, uintptr_t ws,
             int64_t ws_bytes, uintptr_t stream) {
  const int dev = c.device_id();
  const DeviceScope on_device(dev);
  const Dims d = dims_of(a, "a");
  nv::GemvProblem p;
  p.m = int64_t(a.shape(0));
  p.k = d.k;
  p.l = d.l;
  p.a = operand(a, sfa, a_blocked, d, dev, "a");
  p.b = operand(b, sfb, b_blocked, d, dev, "b");
  p.c = output(c, p.m, 1, d.l);
  return launch(p, dev, [](const auto& q, int sms) { return nv::choose_gemv_config(q, sms); },
                [](const auto&... x) { nv::gemv(x...); }, ws, ws_bytes, stream);
}

int64_t gemm(Bytes a, Bytes sfa, bool a_blocked, Bytes b, Bytes sfb, bool b_blocked, Half c, uintptr_t ws,
             int64_t ws_bytes, uintptr_t stream) {
  const int dev = c.device_id();
  const DeviceScope on_device(dev);
  const Dims d = dims_of(a, "a");
  nv::GemmProblem p;
  p.m = int64_t(a.shape(0));
  p.k = d.k;
  p.l = d.l;
  p.a = operand(a, sfa, a_blocked, d, dev, "a");
  p.b = operand(b, sfb, b_blocked, d, dev, "b");
  p.n = int64_t(b.shape(0));
  p.c = output(c, p.m, p.n, d.l);
  return launch(p, dev, [](const auto& q, int sms) { return nv::choose_gemm_config(q, sms); },
                [](const auto&... x) { nv::gemm(x...); }, ws, ws_bytes, stream);
}

int64_t dual_gemm_swiglu(Bytes a, Bytes sfa, bool a_blocked, Bytes b1, Bytes sfb1, bool b1_blocked, Bytes b2,
                         Bytes sfb2, bool b2_blocked, Half c, uintptr_t ws, int64_t ws_bytes, uintptr_t stream) {
  const int dev = c.device_id();
  const DeviceScope on_device(dev);
  const Dims d = dims_of(a, "a");
  nv::DualGemmProblem p;
  p.m = int64_t(a.shape(0));
  p.k = d.k;
  p.l = d.l;
  p.a = operand(a, sfa, a_blocked, d, dev, "a");
  p.b1 = operand(b1, sfb1, b1_blocked, d, dev, "b1");
  p.b2 = operand(b2, sfb2, b2_blocked, d, dev, "b2");
  p.n = int64_t(b1.shape(0));
  SWAPFFN_REQUIRE(int64_t(b2.shape(0)) == p.n, "b2: " + str(int64_t(b2.shape(0))) + " rows, b1 has " + str(p.n));
  p.c = output(c, p.m, p.n, d.l);
  return launch(p, dev, [](const auto& q, int sms) { return nv::choose_dual_config(q, sms); },
                [](const auto&... x) { nv::dual_gemm_swiglu(x...); }, ws, ws_bytes, stream);
}

int64_t grouped_gemm(const std::vector<Bytes>& a, const std::vector<Bytes>& sfa, const std::vector<bool>& a_blocked,
                     const std::vector<Bytes>& b, const std::vector<Bytes>& sfb, const std::vector<bool>& b_blocked,
                     const std::vector<Half>& c, uintptr_t ws, int64_t ws_bytes, uintptr_t stream) {
  const size_t g = c.size();
  SWAPFFN_REQUIRE(g > 0, "grouped_gemm: no groups");
  SWAPFFN_REQUIRE(a.size() == g && sfa.size() == g && a_blocked.size() == g && b.size() == g && sfb.size() == g &&
                      b_blocked.size() == g,
                  "grouped_gemm: the lists of a, sfa, b, sfb and c differ in length");
  const int dev = c[0].device_id();
  const DeviceScope on_device(dev);
  nv::GroupedGemmProblem p;
  for (size_t i = 0; i < g; ++i) {
    const std::string group = "group " + str(int64_t(i)) + ": ";
    const Dims d = dims_of(a[i], group + "a");
    nv::GemmProblem q;
    q.m = int64_t(a[i].shape(0));
    q.k = d.k;
    q.l = d.l;
    q.a = operand(a[i], sfa[i], a_blocked[i], d, dev, group + "a");
    q.b = operand(b[i], sfb[i], b_blocked[i], d, dev, group + "b");
    q.n = int64_t(b[i].shape(0));
    SWAPFFN_REQUIRE(c[i].device_id() == dev,
                    group + "c: on cuda:" + str(c[i].device_id()) + ", group 0's c is on cuda:" + str(dev));
    q.c = output(c[i], q.m, q.n, d.l);
    p.groups.push_back(q);
  }
  return launch(p, dev, [](const auto& q, int sms) { return nv::choose_grouped_config(q, sms); },
                [](const auto&... x) { nv::grouped_gemm(x...); }, ws, ws_bytes, stream);
}

// Whether `stream` is capturing a CUDA graph (then the caller gives each call its own workspace).
bool capturing(uintptr_t stream) { return stream_capturing(reinterpret_cast<void*>(stream)); }

}  // namespace

void bind_nvfp4(nb::module_& m) {
  nb::module_ s = m.def_submodule("nvfp4", "NVFP4 kernels (use swapffn.nvfp4, not this module)");
  s.attr("gemv_k_multiple") = nv::kGemvKMultiple;
  s.attr("gemm_k_multiple") = nv::kGemmKMultiple;
  s.attr("max_groups") = nv::kMaxGroups;
  s.def("stream_capturing", &capturing);
  s.def("gemv", &gemv);
  s.def("gemm", &gemm);
  s.def("dual_gemm_swiglu", &dual_gemm_swiglu);
  s.def("grouped_gemm", &grouped_gemm);
}

}  // namespace swapffn::python

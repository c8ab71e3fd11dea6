// `swapffn._nvfp4`: the NVFP4 kernels (swapffn/nvfp4/nvfp4.hpp) on torch tensors laid out as the GPU
// MODE competition builds them, for python/nvfp4.py (installed as swapffn/nvfp4.py), which calls
// straight into it. A call checks its arguments (nvfp4_arguments.hpp), the build and the device, takes
// the library's default config and launches on torch's current stream of the tensors' device, with the
// workspace of that stream (workspaces.hpp); all of it in C++ and with the GIL held, so that an eager
// call costs about what the launches cost. A build without CUDA checks the arguments, then refuses.
// Refusals are TypeError, swapffn.Error (a ValueError) or RuntimeError, naming the function and the
// argument.
#include <nanobind/nanobind.h>

#include <map>
#include <string>

#include "nvfp4_arguments.hpp"
#include "swapffn/error.hpp"
#include "swapffn/nvfp4/nvfp4.hpp"
#include "torch_tensors.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/runtime/cuda_check.hpp"
#include "swapffn/device.hpp"
#include "workspaces.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace swapffn::nvfp4::python {
namespace {

// swapffn.Error, imported on the first refusal (so that the module loads alone, for its stubs).
PyObject* error_class() {
  static PyObject* e = nb::object(nb::module_::import_("swapffn._swapffn").attr("Error")).release().ptr();
  return e;
}

// Runs `body`, raising what it throws as the Python exception of the refusal.
template <class F>
nb::object translating(F&& body) {
  try {
    return body();
  } catch (const Refusal& r) {
    PyErr_SetString(r.kind == Refusal::Kind::type    ? PyExc_TypeError
                    : r.kind == Refusal::Kind::value ? error_class()
                                                     : PyExc_RuntimeError,
                    r.message.c_str());
  } catch (const Error& e) {  // the library's checks and CUDA failures, as swapffn.Error as in the rest of the package
    PyErr_SetString(error_class(), e.what());
  }
  throw nb::python_error();
}

#ifdef SWAPFFN_WITH_CUDA
// Per device: the SM count, and why the kernels cannot run there ("" on a Hopper GPU).
struct DeviceFacts {
  int sm_count = 0;
  std::string why_not;
};

const DeviceFacts& device_facts(int device) {
  // Under the GIL, kept to exit; a map, so that a reference handed out stays valid as devices are added.
  static auto* facts = new std::map<int, DeviceFacts>;
  DeviceFacts& f = (*facts)[device];
  if (f.sm_count == 0) {
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    f.sm_count = p.multiProcessorCount;
    if (p.major != 9 || p.minor != 0)
      f.why_not = "cuda:" + std::to_string(device) + " is a " + p.name + " of compute capability " +
                  std::to_string(p.major) + "." + std::to_string(p.minor) + "; the kernels need Hopper (9.0)";
  }
  return f;
}

// After the arguments: the tensors' device and whether it runs the kernels; then `run` with the
// default config and the workspace of torch's current stream there.
template <class Problem, class Choose, class Run>
void launch(const Call& call, const Problem& p, Choose choose, Run run) {
  const int device = call.device();
  const DeviceFacts& facts = device_facts(device);
  if (!facts.why_not.empty())
    throw Refusal{Refusal::Kind::runtime, std::string("nvfp4.") + call.op() + ": " + facts.why_not};
  const DeviceScope on_device(device);
  const auto config = choose(p, facts.sm_count);
  const auto stream = static_cast<cudaStream_t>(current_stream(device));
  const WorkspaceLease ws(device, stream, workspace_bytes(p, config));
  run(p, config, ws.get(), stream);
  ws.launched();
}
#else
template <class Problem, class Choose, class Run>
void launch(const Call& call, const Problem&, Choose, Run) {
  throw Refusal{Refusal::Kind::runtime, std::string("nvfp4.") + call.op() +
                                            ": this build of swapffn has no CUDA (built without CUDA); the NVFP4 "
                                            "kernels need a CUDA build and a Hopper GPU"};
}
#endif

nb::object gemv_call(nb::handle a, nb::handle b, nb::handle sfa, nb::handle sfb, nb::handle sfa_permuted,
                     nb::handle sfb_permuted, nb::handle c) {
  return translating([&] {
    Call call("gemv", 5);
    const GemvProblem p = gemv_problem(call, a.ptr(), b.ptr(), sfa.ptr(), sfb.ptr(), sfa_permuted.ptr(),
                                       sfb_permuted.ptr(), c.ptr());
    launch(call, p, choose_gemv_config, [](const auto&... x) { gemv(x...); });
    return nb::borrow(c);
  });
}

nb::object gemm_call(nb::handle a, nb::handle b, nb::handle sfa, nb::handle sfb, nb::handle sfa_permuted,
                     nb::handle sfb_permuted, nb::handle c) {
  return translating([&] {
    Call call("gemm", 5);
    const GemmProblem p = gemm_problem(call, a.ptr(), b.ptr(), sfa.ptr(), sfb.ptr(), sfa_permuted.ptr(),
                                       sfb_permuted.ptr(), c.ptr());
    launch(call, p, choose_gemm_config, [](const auto&... x) { gemm(x...); });
    return nb::borrow(c);
  });
}

nb::object dual_call(nb::handle a, nb::handle b1, nb::handle b2, nb::handle sfa, nb::handle sfb1, nb::handle sfb2,
                     nb::handle sfa_permuted, nb::handle sfb1_permuted, nb::handle sfb2_permuted, nb::handle c) {
  return translating([&] {
    Call call("dual_gemm_swiglu", 7);
    const DualGemmProblem p =
        dual_problem(call, a.ptr(), b1.ptr(), b2.ptr(), sfa.ptr(), sfb1.ptr(), sfb2.ptr(), sfa_permuted.ptr(),
                     sfb1_permuted.ptr(), sfb2_permuted.ptr(), c.ptr());
    launch(call, p, choose_dual_config, [](const auto&... x) { dual_gemm_swiglu(x...); });
    return nb::borrow(c);
  });
}

nb::object grouped_call(nb::handle abc_tensors, nb::handle sfasfb_tensors, nb::handle sfasfb_reordered_tensors,
                        nb::handle problem_sizes) {
  return translating([&] {
    Call call("grouped_gemm", 5 * size_t(kMaxGroups));
    nb::list cs;
    const GroupedGemmProblem p = grouped_problem(call, abc_tensors.ptr(), sfasfb_tensors.ptr(),
                                                 sfasfb_reordered_tensors.ptr(), problem_sizes.ptr(), cs);
    launch(call, p, choose_grouped_config, [](const auto&... x) { grouped_gemm(x...); });
    return nb::object(cs);
  });
}

}  // namespace
}  // namespace swapffn::nvfp4::python

NB_MODULE(_nvfp4, m) {
  using namespace swapffn::nvfp4;
  using namespace swapffn::nvfp4::python;
  m.doc() = "NVFP4 kernels on torch tensors (use swapffn.nvfp4, not this module)";
#ifdef SWAPFFN_WITH_CUDA
  m.attr("with_cuda") = true;
  m.def("_stream_workspaces", &stream_workspaces, "device"_a, "How many streams of the device keep a workspace.");
  m.def("_stream_workspace_limit", &stream_workspace_limit, "At most how many streams per device keep one.");
  m.def("_set_stream_workspace_limit", &set_stream_workspace_limit, "n"_a,
        "Lower or raise that limit (for the tests: streams beyond it evict each other).");
#else
  m.attr("with_cuda") = false;
#endif
  m.attr("gemv_k_multiple") = kGemvKMultiple;
  m.attr("gemm_k_multiple") = kGemmKMultiple;
  m.attr("max_groups") = kMaxGroups;
  m.def("exchange", &exchange, "How tensors are read: 'dlpack_c_exchange_api' (torch 2.10+) or 'attributes'.");
  // Every argument may be None (nanobind would refuse None unnamed): the checks name it.
  m.def("gemv", &gemv_call, "a"_a.none(), "b"_a.none(), "sfa"_a.none(), "sfb"_a.none(), "sfa_permuted"_a.none(),
        "sfb_permuted"_a.none(), "c"_a.none());
  m.def("gemm", &gemm_call, "a"_a.none(), "b"_a.none(), "sfa"_a.none(), "sfb"_a.none(), "sfa_permuted"_a.none(),
        "sfb_permuted"_a.none(), "c"_a.none());
  m.def("dual_gemm_swiglu", &dual_call, "a"_a.none(), "b1"_a.none(), "b2"_a.none(), "sfa"_a.none(), "sfb1"_a.none(),
        "sfb2"_a.none(), "sfa_permuted"_a.none(), "sfb1_permuted"_a.none(), "sfb2_permuted"_a.none(), "c"_a.none());
  m.def("grouped_gemm", &grouped_call, "abc_tensors"_a.none(), "sfasfb_tensors"_a.none(),
        "sfasfb_reordered_tensors"_a.none(), "problem_sizes"_a.none() = nb::none());
}

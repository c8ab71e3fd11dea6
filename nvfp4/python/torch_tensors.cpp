#include "torch_tensors.hpp"

#include <stdexcept>

namespace nb = nanobind;

namespace swapffn::nvfp4::python {
namespace {

// The C exchange API of DLPack 1.3 (dlpack.h: DLPackExchangeAPI), declared here from the standard's
// layout: a version header, then five function pointers, of which this module calls two.
struct ExchangeVersion {
  uint32_t major, minor;
};
struct ExchangeHeader {
  ExchangeVersion version;
  ExchangeHeader* prev_api;
};
struct ExchangeApi {
  ExchangeHeader header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, dl::dltensor* out);  // 0, or -1 with an exception set
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};
constexpr uint32_t kExchangeMajor = 1;

// What the first call finds of torch (under the GIL; kept for the process, as torch is).
struct Torch {
  PyTypeObject* tensor_type = nullptr;
  const ExchangeApi* api = nullptr;  // null: read attributes
  PyObject *uint8 = nullptr, *fp4x2 = nullptr, *e4m3 = nullptr, *fp16 = nullptr;  // torch dtypes
  PyObject* raw_stream = nullptr;  // torch._C._cuda_getCurrentRawStream
  PyObject *data_ptr = nullptr, *shape = nullptr, *stride = nullptr, *dtype = nullptr, *is_cuda = nullptr,
           *get_device = nullptr;  // interned names
};

const ExchangeApi* exchange_api(nb::handle tensor_type) {
  if (!nb::hasattr(tensor_type, "__dlpack_c_exchange_api__")) return nullptr;
  nb::object capsule = tensor_type.attr("__dlpack_c_exchange_api__");
  if (!PyCapsule_IsValid(capsule.ptr(), "dlpack_exchange_api")) return nullptr;
  const auto* api = static_cast<const ExchangeApi*>(PyCapsule_GetPointer(capsule.ptr(), "dlpack_exchange_api"));
  // The newest version first; older ones down the chain (this module knows major version 1).
  for (const ExchangeHeader* h = &api->header; h != nullptr; h = h->prev_api) {
    const auto* a = reinterpret_cast<const ExchangeApi*>(h);
    if (h->version.major == kExchangeMajor)
      return a->dltensor_from_py_object_no_sync && a->current_work_stream ? a : nullptr;
  }
  return nullptr;
}

PyObject* kept(nb::object o) { return o.release().ptr(); }  // a reference held for the process

const Torch& torch() {
  static const Torch t = [] {
    Torch r;
    nb::module_ torch = nb::module_::import_("torch");
    nb::object tensor = torch.attr("Tensor");
    r.tensor_type = reinterpret_cast<PyTypeObject*>(kept(tensor));
    r.api = exchange_api(tensor);
    r.uint8 = kept(torch.attr("uint8"));
    r.fp4x2 = nb::hasattr(torch, "float4_e2m1fn_x2") ? kept(torch.attr("float4_e2m1fn_x2")) : nullptr;
    r.e4m3 = kept(torch.attr("float8_e4m3fn"));
    r.fp16 = kept(torch.attr("float16"));
    nb::object c = torch.attr("_C");
    if (nb::hasattr(c, "_cuda_getCurrentRawStream")) r.raw_stream = kept(c.attr("_cuda_getCurrentRawStream"));
    for (auto [name, slot] : {std::pair{"data_ptr", &r.data_ptr}, {"shape", &r.shape}, {"stride", &r.stride},
                              {"dtype", &r.dtype}, {"is_cuda", &r.is_cuda}, {"get_device", &r.get_device}})
      *slot = PyUnicode_InternFromString(name);
    return r;
  }();
  return t;
}

nb::object call_method(PyObject* o, PyObject* name) { return nb::steal(PyObject_CallMethodNoArgs(o, name)); }
nb::object attribute(PyObject* o, PyObject* name) { return nb::steal(PyObject_GetAttr(o, name)); }

int64_t as_int(const nb::object& o) {
  if (!o.is_valid()) throw nb::python_error();
  const long long v = PyLong_AsLongLong(o.ptr());
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  return v;
}

// A tuple of ints (torch.Size, stride()) into `out`; the count.
int ints(const nb::object& tuple, int64_t* out) {
  if (!tuple.is_valid()) throw nb::python_error();
  const Py_ssize_t n = PyTuple_GET_SIZE(tuple.ptr());
  for (Py_ssize_t i = 0; i < n && i < kMaxDims; ++i) out[i] = as_int(nb::borrow(PyTuple_GET_ITEM(tuple.ptr(), i)));
  return int(n);
}

dl::dtype dtype_of(const Torch& t, PyObject* dtype) {
  if (dtype == t.uint8) return kUint8;
  if (dtype == t.fp4x2) return kFp4x2;
  if (dtype == t.e4m3) return kE4m3;
  if (dtype == t.fp16) return kFp16;
  return {};  // another dtype: refused, and named from Python
}

void view_by_attributes(const Torch& t, PyObject* o, TensorView& v) {
  v.object = o;
  v.data = uintptr_t(as_int(call_method(o, t.data_ptr)));
  v.ndim = ints(attribute(o, t.shape), v.shape);
  ints(call_method(o, t.stride), v.strides);
  v.dtype = dtype_of(t, attribute(o, t.dtype).ptr());
  const nb::object cuda = attribute(o, t.is_cuda);
  if (!cuda.is_valid()) throw nb::python_error();
  v.device = cuda.ptr() == Py_True ? dl::device{int32_t(nb::device::cuda::value), int32_t(as_int(call_method(o, t.get_device)))}
                                   : dl::device{int32_t(nb::device::cpu::value), 0};  // or another: not CUDA
}

std::string text(nb::handle o) { return nb::str(o).c_str(); }

}  // namespace

bool is_torch_tensor(PyObject* o) { return PyObject_TypeCheck(o, torch().tensor_type); }

void view_of(PyObject* o, TensorView& v) {
  const Torch& t = torch();
  // The exchange API is torch.Tensor's own: a subclass (a Parameter, a fake or functional tensor)
  // goes through its Python attributes, which its overrides answer.
  if (t.api == nullptr || Py_TYPE(o) != t.tensor_type) return view_by_attributes(t, o, v);
  dl::dltensor d;
  if (t.api->dltensor_from_py_object_no_sync(o, &d) != 0) throw nb::python_error();
  v.object = o;
  v.data = reinterpret_cast<uintptr_t>(d.data) + d.byte_offset;
  v.ndim = d.ndim;
  const int n = d.ndim < kMaxDims ? d.ndim : kMaxDims;
  for (int i = 0; i < n; ++i) v.shape[i] = d.shape[i];
  if (d.strides != nullptr) {
    for (int i = 0; i < n; ++i) v.strides[i] = d.strides[i];
  } else {  // DLPack allows none for a compact row-major tensor
    for (int64_t i = n - 1, s = 1; i >= 0; s *= v.shape[i--]) v.strides[i] = s;
  }
  v.dtype = d.dtype;
  v.device = d.device;
}

void* current_stream(int device) {
  const Torch& t = torch();
  void* stream = nullptr;
  if (t.api != nullptr) {
    if (t.api->current_work_stream(int32_t(nb::device::cuda::value), device, &stream) != 0) throw nb::python_error();
    return stream;
  }
  if (t.raw_stream == nullptr) throw std::runtime_error("this torch has no CUDA (torch._C._cuda_getCurrentRawStream)");
  return reinterpret_cast<void*>(uintptr_t(as_int(nb::steal(PyObject_CallOneArg(t.raw_stream, nb::int_(device).ptr())))));
}

const char* exchange() { return torch().api != nullptr ? "dlpack_c_exchange_api" : "attributes"; }

std::string type_name(PyObject* o) { return text(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(o))).attr("__name__")); }
std::string shape_text(PyObject* o) {
  return text(nb::repr(nb::steal(PySequence_Tuple(nb::handle(o).attr("shape").ptr()))));  // not torch.Size([...])
}
std::string strides_text(PyObject* o) { return text(nb::repr(nb::handle(o).attr("stride")())); }
std::string dtype_text(PyObject* o) {
  std::string s = text(nb::handle(o).attr("dtype"));
  return s.rfind("torch.", 0) == 0 ? s.substr(6) : s;
}
std::string device_text(PyObject* o) { return text(nb::handle(o).attr("device")); }
std::string address_text(PyObject* o) {
  return text(nb::module_::import_("builtins").attr("hex")(nb::handle(o).attr("data_ptr")()));
}

}  // namespace swapffn::nvfp4::python

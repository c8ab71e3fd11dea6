// What swapffn._nvfp4 needs of a torch tensor argument (data pointer, shape, strides, dtype, device)
// and of torch's current CUDA stream, read without a Python-level call where torch allows it: through
// torch's DLPack C exchange API (`torch.Tensor.__dlpack_c_exchange_api__`, DLPack 1.3, torch 2.10+:
// a non-owning DLTensor in tens of nanoseconds), else through the tensor's attributes (older torch:
// about 1 us a tensor). `Tensor.__dlpack__` costs 3 us a tensor, the whole budget of a call.
// The texts the error messages quote (a shape, a dtype's name) come from Python, on the failure path only.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

namespace swapffn::nvfp4::python {

namespace dl = nanobind::dlpack;

inline constexpr int kMaxDims = 6;  // what any argument has at most (a permuted scale tensor); more: refused

// Left uninitialised where it is filled (view_of): a call reads up to 40 of them.
struct TensorView {
  PyObject* object;  // borrowed: the caller's argument, alive for the call
  uintptr_t data;
  int ndim;
  int64_t shape[kMaxDims], strides[kMaxDims];  // in elements; the first min(ndim, kMaxDims)
  dl::dtype dtype;
  dl::device device;
  bool on_cuda() const { return device.device_type == int32_t(nanobind::device::cuda::value); }
};

// The DLPack dtypes of the arguments (torch's float4_e2m1fn_x2 is two e2m1 lanes of 4 bits).
inline constexpr dl::dtype kUint8{uint8_t(dl::dtype_code::UInt), 8, 1};
inline constexpr dl::dtype kFp4x2{uint8_t(dl::dtype_code::Float4_E2M1FN), 4, 2};
inline constexpr dl::dtype kE4m3{uint8_t(dl::dtype_code::Float8_E4M3FN), 8, 1};
inline constexpr dl::dtype kFp16{uint8_t(dl::dtype_code::Float), 16, 1};

// Whether `o` is a torch.Tensor (torch is imported on first use).
bool is_torch_tensor(PyObject* o);

// Fills `v` with the view of torch tensor `o` (is_torch_tensor(o) must hold).
void view_of(PyObject* o, TensorView& v);

// torch's current CUDA stream of `device` (a cudaStream_t).
void* current_stream(int device);

// How tensors are read: "dlpack_c_exchange_api" or "attributes" (older torch).
const char* exchange();

// Python's texts of `o` for messages: type(o).__name__, tuple(o.shape), o.stride(), the dtype without
// "torch.", str(o.device), hex(o.data_ptr()).
std::string type_name(PyObject* o);
std::string shape_text(PyObject* o);
std::string strides_text(PyObject* o);
std::string dtype_text(PyObject* o);
std::string device_text(PyObject* o);
std::string address_text(PyObject* o);

}  // namespace swapffn::nvfp4::python

// The argument checks of swapffn.nvfp4 (nvfp4.py states the calling convention), in the order the
// arguments come: each refusal names the function and the argument ("nvfp4.gemm: sfb: expected shape
// ..."), a TypeError for what is not a tensor of an accepted dtype, swapffn.Error (a ValueError) for a
// shape, stride, alignment, K, size or device. What passes becomes the library's problem (nvfp4.hpp),
// its pointers into the caller's tensors, which stay alive for the call.
#pragma once
#include <nanobind/nanobind.h>

#include <string>
#include <vector>

#include "swapffn/nvfp4/nvfp4.hpp"
#include "torch_tensors.hpp"

namespace swapffn::nvfp4::python {

// What a call refuses; nvfp4_module.cpp raises it as TypeError, swapffn.Error or RuntimeError.
struct Refusal {
  enum class Kind { type, value, runtime } kind;
  std::string message;
};

// An argument's name in a message: "a", "abc_tensors[1]", "abc_tensors[1].c". Built only to fail.
struct Name {
  const char* base;
  int index = -1;
  const char* field = nullptr;
  std::string str() const;
};

// One call's checks: the function's name for messages and the tensors the kernel will touch.
class Call {
 public:
  // `tensors`: how many the call reads at most (its views stay in place).
  Call(const char* op, size_t tensors) : op_(op) { used_.reserve(tensors); }
  const char* op() const { return op_; }
  [[noreturn]] void fail(const std::string& name, const std::string& msg,
                         Refusal::Kind kind = Refusal::Kind::value) const;
  // The one CUDA device of every tensor used; refused naming the first on the host or another GPU.
  int device() const;

  struct Dims {
    int64_t rows, k, l;
  };
  // A data tensor's (rows, K, L): the problem's sizes come from it.
  Dims dims(Name name, PyObject* t);
  void k_multiple(Name name, int64_t k, int64_t multiple) const;
  // Packed e2m1 (rows, K/2, L) as an operand without scales; rows < 0: any count >= 1 (GEMV's b).
  Operand data(Name name, PyObject* t, int64_t rows, int64_t k, int64_t l);
  // Adds to `op` the scales of its `rows` stored rows: the permuted ones where given, else the plain.
  void scales(Operand& op, Name plain_name, PyObject* plain, Name permuted_name, PyObject* permuted, int64_t rows,
              int64_t k, int64_t l);
  void* output(Name name, PyObject* t, int64_t m, int64_t n, int64_t l);

 private:
  struct Used {
    explicit Used(Name n) : name(n) {}  // the view is filled in place (view_of)
    Name name;
    TensorView view;
  };
  const TensorView& tensor(Name name, PyObject* t, std::initializer_list<dl::dtype> dtypes, const char* dtype_names,
                           const char* what);
  void layout(Name name, const TensorView& v, std::initializer_list<int64_t> shape,
              std::initializer_list<int64_t> strides, const char* what, int align) const;

  const char* op_;
  std::vector<Used> used_;
};

// The problems of the four functions from their arguments (in nvfp4.py's order). The grouped one also
// returns its outputs, [c_0, ..., c_{G-1}].
GemvProblem gemv_problem(Call& call, PyObject* a, PyObject* b, PyObject* sfa, PyObject* sfb, PyObject* sfa_permuted,
                         PyObject* sfb_permuted, PyObject* c);
GemmProblem gemm_problem(Call& call, PyObject* a, PyObject* b, PyObject* sfa, PyObject* sfb, PyObject* sfa_permuted,
                         PyObject* sfb_permuted, PyObject* c);
DualGemmProblem dual_problem(Call& call, PyObject* a, PyObject* b1, PyObject* b2, PyObject* sfa, PyObject* sfb1,
                             PyObject* sfb2, PyObject* sfa_permuted, PyObject* sfb1_permuted, PyObject* sfb2_permuted,
                             PyObject* c);
GroupedGemmProblem grouped_problem(Call& call, PyObject* abc_tensors, PyObject* sfasfb_tensors,
                                   PyObject* sfasfb_reordered_tensors, PyObject* problem_sizes, nanobind::list& cs);

}  // namespace swapffn::nvfp4::python

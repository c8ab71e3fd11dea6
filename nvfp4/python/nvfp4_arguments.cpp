#include "nvfp4_arguments.hpp"

#include <algorithm>

namespace nb = nanobind;

namespace swapffn::nvfp4::python {
namespace {

constexpr int kDataAlign = 16, kScaleAlign = 4, kOutputAlign = 4;  // the library's (nvfp4.hpp)

constexpr const char* kDataWhat = "packed e2m1 data (rows, K/2, L)";
constexpr const char* kDataLayout = "(rows, K/2, L: a contiguous (L, rows, K/2) tensor permuted by (1, 2, 0))";

std::string str(int64_t v) { return std::to_string(v); }

// Python's text of a tuple of ints: "(1, 2, 3)", "(1,)".
std::string tuple_text(std::initializer_list<int64_t> v) {
  std::string s = "(";
  for (int64_t x : v) s += (s.size() > 1 ? ", " : "") + str(x);
  return s + (v.size() == 1 ? ",)" : ")");
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_sequence(PyObject* o) { return PyList_Check(o) || PyTuple_Check(o); }

// Item i of a list or tuple (borrowed).
PyObject* item(PyObject* seq, Py_ssize_t i) {
  return PyList_Check(seq) ? PyList_GET_ITEM(seq, i) : PyTuple_GET_ITEM(seq, i);
}

}  // namespace

std::string Name::str() const {
  std::string s = base;
  if (index >= 0) s += "[" + std::to_string(index) + "]";
  if (field != nullptr) s += std::string(".") + field;
  return s;
}

void Call::fail(const std::string& name, const std::string& msg, Refusal::Kind kind) const {
  throw Refusal{kind, std::string("nvfp4.") + op_ + ": " + name + ": " + msg};
}

const TensorView& Call::tensor(Name name, PyObject* t, std::initializer_list<dl::dtype> dtypes,
                               const char* dtype_names, const char* what) {
  // dims() reads the data tensor that data() checks next: one view serves both.
  if (used_.empty() || used_.back().view.object != t) {
    if (!is_torch_tensor(t))
      fail(name.str(), std::string("expected a torch.Tensor (") + what + "), got " + type_name(t), Refusal::Kind::type);
    view_of(t, used_.emplace_back(name).view);
  }
  const TensorView& v = used_.back().view;
  if (std::find(dtypes.begin(), dtypes.end(), v.dtype) == dtypes.end())
    fail(name.str(), std::string("expected dtype ") + dtype_names + ", got " + dtype_text(t), Refusal::Kind::type);
  return v;
}

void Call::layout(Name name, const TensorView& v, std::initializer_list<int64_t> shape,
                  std::initializer_list<int64_t> strides, const char* what, int align) const {
  bool same = v.ndim == int(shape.size());
  for (size_t i = 0; same && i < shape.size(); ++i) same = v.shape[i] == shape.begin()[i];
  if (!same) fail(name.str(), "expected shape " + tuple_text(shape) + " " + what + ", got " + shape_text(v.object));
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape.begin()[i] > 1 && v.strides[i] != strides.begin()[i])
      fail(name.str(), "expected strides " + tuple_text(strides) + " " + what + ", got " + strides_text(v.object));
  if (v.data % align != 0)
    fail(name.str(), "must start " + str(align) + "-byte aligned, starts at " + address_text(v.object) +
                         " (pass a fresh tensor)");
}

Call::Dims Call::dims(Name name, PyObject* t) {
  const TensorView& v = tensor(name, t, {kFp4x2, kUint8}, "float4_e2m1fn_x2 or uint8", kDataWhat);
  if (v.ndim != 3) fail(name.str(), "expected 3 dimensions (rows, K/2, L), got shape " + shape_text(t));
  const Dims d{v.shape[0], 2 * v.shape[1], v.shape[2]};
  if (std::min({d.rows, d.k, d.l}) < 1) fail(name.str(), "every size must be >= 1, got shape " + shape_text(t));
  return d;
}

void Call::k_multiple(Name name, int64_t k, int64_t multiple) const {
  if (k % multiple != 0)
    fail(name.str(), "K = 2 * " + name.str() + ".shape[1] = " + str(k) + " is not a multiple of " + str(multiple) +
                         " (the " + op_ + " kernels' k step)");
}

Operand Call::data(Name name, PyObject* t, int64_t rows, int64_t k, int64_t l) {
  const TensorView& v = tensor(name, t, {kFp4x2, kUint8}, "float4_e2m1fn_x2 or uint8", kDataWhat);
  const int64_t kb = k / 2;
  if (rows < 0) {
    if (v.ndim != 3 || v.shape[0] < 1)
      fail(name.str(), "expected shape (rows >= 1, " + str(kb) + ", " + str(l) + ") (rows, K/2, L), got " +
                           shape_text(t));
    rows = v.shape[0];
  }
  layout(name, v, {rows, kb, l}, {kb, 1, rows * kb}, kDataLayout, kDataAlign);
  Operand op;
  op.data = reinterpret_cast<const void*>(v.data);
  op.batch_rows = rows;
  return op;
}

void Call::scales(Operand& op, Name plain_name, PyObject* plain, Name permuted_name, PyObject* permuted, int64_t rows,
                  int64_t k, int64_t l) {
  const int64_t ks = k / 16;
  if (permuted != Py_None) {
    const TensorView& v = tensor(permuted_name, permuted, {kE4m3}, "float8_e4m3fn", "blocked 128x4 scales");
    const int64_t rm = ceil_div(rows, 128), rk = ceil_div(ks, 4);
    layout(permuted_name, v, {32, 4, rm, 4, rk, l}, {16, 4, rk * 512, 1, 512, rm * rk * 512},
           "(32, 4, rows/128, 4, K/64, L: a contiguous (L, rows/128, K/64, 32, 4, 4) tensor permuted by "
           "(3, 4, 1, 5, 2, 0))",
           kScaleAlign);
    op.scales = reinterpret_cast<const void*>(v.data);
    op.layout = ScaleLayout::blocked_128x4;
    return;
  }
  if (plain == Py_None)
    fail(plain_name.str() + ", " + permuted_name.str(), "both are None; pass the plain or the permuted scales");
  const TensorView& v = tensor(plain_name, plain, {kE4m3}, "float8_e4m3fn", "plain scales (rows, K/16, L)");
  layout(plain_name, v, {rows, ks, l}, {ks, 1, rows * ks},
         "(rows, K/16, L: a contiguous (L, rows, K/16) tensor permuted by (1, 2, 0))", kScaleAlign);
  op.scales = reinterpret_cast<const void*>(v.data);
  op.layout = ScaleLayout::plain;
}

void* Call::output(Name name, PyObject* t, int64_t m, int64_t n, int64_t l) {
  const TensorView& v = tensor(name, t, {kFp16}, "float16", "the fp16 output (M, N, L)");
  layout(name, v, {m, n, l}, {n, 1, m * n}, "(M, N, L: a contiguous (L, M, N) tensor permuted by (1, 2, 0))",
         kOutputAlign);
  return reinterpret_cast<void*>(v.data);
}

int Call::device() const {
  for (const Used& u : used_)
    if (!u.view.on_cuda()) fail(u.name.str(), "expected a CUDA tensor, got one on " + device_text(u.view.object));
  const Used& first = used_.front();
  for (const Used& u : used_)
    if (u.view.device.device_id != first.view.device.device_id)
      fail(u.name.str(), "on " + device_text(u.view.object) + ", " + first.name.str() + " is on " +
                             device_text(first.view.object) + " (all tensors must be on one GPU)");
  return first.view.device.device_id;
}

GemvProblem gemv_problem(Call& call, PyObject* a, PyObject* b, PyObject* sfa, PyObject* sfb, PyObject* sfa_permuted,
                         PyObject* sfb_permuted, PyObject* c) {
  const Call::Dims d = call.dims({"a"}, a);
  call.k_multiple({"a"}, d.k, kGemvKMultiple);
  GemvProblem p;
  p.m = d.rows;
  p.k = d.k;
  p.l = d.l;
  p.a = call.data({"a"}, a, d.rows, d.k, d.l);
  p.b = call.data({"b"}, b, -1, d.k, d.l);
  call.scales(p.a, {"sfa"}, sfa, {"sfa_permuted"}, sfa_permuted, d.rows, d.k, d.l);
  call.scales(p.b, {"sfb"}, sfb, {"sfb_permuted"}, sfb_permuted, p.b.batch_rows, d.k, d.l);
  p.c = call.output({"c"}, c, d.rows, 1, d.l);
  return p;
}

GemmProblem gemm_problem(Call& call, PyObject* a, PyObject* b, PyObject* sfa, PyObject* sfb, PyObject* sfa_permuted,
                         PyObject* sfb_permuted, PyObject* c) {
  const Call::Dims d = call.dims({"a"}, a);
  call.k_multiple({"a"}, d.k, kGemmKMultiple);
  GemmProblem p;
  p.m = d.rows;
  p.k = d.k;
  p.l = d.l;
  p.a = call.data({"a"}, a, d.rows, d.k, d.l);
  p.n = call.dims({"b"}, b).rows;
  p.b = call.data({"b"}, b, p.n, d.k, d.l);
  call.scales(p.a, {"sfa"}, sfa, {"sfa_permuted"}, sfa_permuted, d.rows, d.k, d.l);
  call.scales(p.b, {"sfb"}, sfb, {"sfb_permuted"}, sfb_permuted, p.n, d.k, d.l);
  p.c = call.output({"c"}, c, d.rows, p.n, d.l);
  return p;
}

DualGemmProblem dual_problem(Call& call, PyObject* a, PyObject* b1, PyObject* b2, PyObject* sfa, PyObject* sfb1,
                             PyObject* sfb2, PyObject* sfa_permuted, PyObject* sfb1_permuted, PyObject* sfb2_permuted,
                             PyObject* c) {
  const Call::Dims d = call.dims({"a"}, a);
  call.k_multiple({"a"}, d.k, kGemmKMultiple);
  DualGemmProblem p;
  p.m = d.rows;
  p.k = d.k;
  p.l = d.l;
  p.a = call.data({"a"}, a, d.rows, d.k, d.l);
  p.n = call.dims({"b1"}, b1).rows;
  p.b1 = call.data({"b1"}, b1, p.n, d.k, d.l);
  p.b2 = call.data({"b2"}, b2, p.n, d.k, d.l);
  call.scales(p.a, {"sfa"}, sfa, {"sfa_permuted"}, sfa_permuted, d.rows, d.k, d.l);
  call.scales(p.b1, {"sfb1"}, sfb1, {"sfb1_permuted"}, sfb1_permuted, p.n, d.k, d.l);
  call.scales(p.b2, {"sfb2"}, sfb2, {"sfb2_permuted"}, sfb2_permuted, p.n, d.k, d.l);
  p.c = call.output({"c"}, c, d.rows, p.n, d.l);
  return p;
}

namespace {

// A list argument of the grouped GEMM: None, or a list or tuple of `groups` entries.
void require_group_list(const Call& call, const char* name, PyObject* items, Py_ssize_t groups) {
  if (items == Py_None) return;
  if (!is_sequence(items))
    call.fail(name, "expected a list with one entry per group, got " + type_name(items), Refusal::Kind::type);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
  if (n != groups) call.fail(name, str(n) + " entries for " + str(groups) + " groups (abc_tensors)");
}

// Group i's pair of a scale list: (sfa, sfb), or (None, None) where the list or its entry is None.
std::pair<PyObject*, PyObject*> scale_pair(const Call& call, const char* name, PyObject* items, int i) {
  PyObject* entry = items == Py_None ? Py_None : item(items, i);
  if (entry == Py_None) return {Py_None, Py_None};
  if (!is_sequence(entry) || PySequence_Fast_GET_SIZE(entry) != 2)
    call.fail(Name{name, i}.str(), "expected (sfa, sfb), got " + type_name(entry), Refusal::Kind::type);
  return {item(entry, 0), item(entry, 1)};
}

// problem_sizes[i] == (m, n, k, l), as Python compares: a list or tuple of four equal ints.
bool same_sizes(PyObject* sizes, std::initializer_list<int64_t> want) {
  if (!is_sequence(sizes) || PySequence_Fast_GET_SIZE(sizes) != Py_ssize_t(want.size())) return false;
  for (size_t j = 0; j < want.size(); ++j) {
    PyObject* v = item(sizes, Py_ssize_t(j));
    int overflow = 0;
    if (PyLong_CheckExact(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) != want.begin()[j] || overflow != 0
                             : PyObject_RichCompareBool(v, nb::int_(want.begin()[j]).ptr(), Py_EQ) != 1) {
      PyErr_Clear();  // a value that does not compare is not equal
      return false;
    }
  }
  return true;
}

}  // namespace

GroupedGemmProblem grouped_problem(Call& call, PyObject* abc_tensors, PyObject* sfasfb_tensors,
                                   PyObject* sfasfb_reordered_tensors, PyObject* problem_sizes, nb::list& cs) {
  if (!is_sequence(abc_tensors))
    call.fail("abc_tensors", "expected a list of (a, b, c) per group, got " + type_name(abc_tensors),
              Refusal::Kind::type);
  const Py_ssize_t g = PySequence_Fast_GET_SIZE(abc_tensors);
  if (g < 1 || g > kMaxGroups) call.fail("abc_tensors", str(g) + " groups; 1 to " + str(kMaxGroups) + " are supported");
  require_group_list(call, "sfasfb_tensors", sfasfb_tensors, g);
  require_group_list(call, "sfasfb_reordered_tensors", sfasfb_reordered_tensors, g);
  require_group_list(call, "problem_sizes", problem_sizes, g);
  GroupedGemmProblem p;
  p.groups.reserve(size_t(g));
  for (int i = 0; i < int(g); ++i) {
    PyObject* abc = item(abc_tensors, i);
    if (!is_sequence(abc) || PySequence_Fast_GET_SIZE(abc) != 3)
      call.fail(Name{"abc_tensors", i}.str(), "expected (a, b, c), got " + type_name(abc), Refusal::Kind::type);
    const auto plain = scale_pair(call, "sfasfb_tensors", sfasfb_tensors, i);
    const auto blocked = scale_pair(call, "sfasfb_reordered_tensors", sfasfb_reordered_tensors, i);
    PyObject *a = item(abc, 0), *b = item(abc, 1), *c = item(abc, 2);
    const Name an{"abc_tensors", i, "a"}, bn{"abc_tensors", i, "b"}, cn{"abc_tensors", i, "c"};
    const Call::Dims d = call.dims(an, a);
    if (d.l != 1) call.fail(an.str(), "L = " + str(d.l) + "; the grouped GEMM takes L = 1 per group");
    call.k_multiple(an, d.k, kGemmKMultiple);
    GemmProblem q;
    q.m = d.rows;
    q.k = d.k;
    q.a = call.data(an, a, d.rows, d.k, 1);
    q.n = call.dims(bn, b).rows;
    q.b = call.data(bn, b, q.n, d.k, 1);
    call.scales(q.a, {"sfasfb_tensors", i, "sfa"}, plain.first, {"sfasfb_reordered_tensors", i, "sfa"}, blocked.first,
                q.m, d.k, 1);
    call.scales(q.b, {"sfasfb_tensors", i, "sfb"}, plain.second, {"sfasfb_reordered_tensors", i, "sfb"},
                blocked.second, q.n, d.k, 1);
    q.c = call.output(cn, c, q.m, q.n, 1);
    if (problem_sizes != Py_None && !same_sizes(item(problem_sizes, i), {q.m, q.n, q.k, 1}))
      call.fail(Name{"problem_sizes", i}.str(),
                std::string(nb::repr(nb::handle(item(problem_sizes, i))).c_str()) +
                    ", the tensors give (m, n, k, l) = " + tuple_text({q.m, q.n, q.k, 1}));
    p.groups.push_back(q);
    cs.append(nb::handle(c));
  }
  return p;
}

}  // namespace swapffn::nvfp4::python

// Owning handles of cuBLASLt's descriptor objects, each released on every path out of its scope (a
// failed check between creation and use throws).
#pragma once
#include <memory>
#include <type_traits>

#include <cublasLt.h>

namespace swapffn::cuda::cublaslt {

struct LayoutDestroy {
  void operator()(cublasLtMatrixLayout_t l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct DescDestroy {
  void operator()(cublasLtMatmulDesc_t d) const { cublasLtMatmulDescDestroy(d); }
};
struct PreferenceDestroy {
  void operator()(cublasLtMatmulPreference_t p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using Layout = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LayoutDestroy>;
using MatmulDesc = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, DescDestroy>;
using Preference = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, PreferenceDestroy>;

}  // namespace swapffn::cuda::cublaslt

// The `swapffn._swapffn.nvfp4` submodule (nvfp4_module.cpp), added to the extension by CUDA builds.
#pragma once
#include <nanobind/nanobind.h>

namespace swapffn::python {

void bind_nvfp4(nanobind::module_& m);

}  // namespace swapffn::python

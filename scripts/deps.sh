#!/usr/bin/env bash
# Installs what building and testing need, from Debian's and PyPI's registries, then builds every
# library once: CMake builds the CLI, the C++ tests and the Python extension into one tree, and
# `pip install .` installs the package from that same tree (nothing left to compile there).
# The tree is build/release (CUDA backends when nvcc is present), or build/cpu with SWAPFFN_CUDA=OFF
# (CMake preset `cpu`, for a machine without nvcc or a quicker build). Prints the tree's path on
# stdout, everything else on stderr. Idempotent; used by run.sh/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
pkgs=(cmake ninja-build g++ git python3 python3-pip python3-venv python3-numpy libgtest-dev libgmock-dev
      libbenchmark-dev libcli11-dev nlohmann-json3-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== deps: apt-get install ${missing[*]}" >&2
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}" >&2
fi

# Debian's python3 refuses pip outside a virtual environment (PEP 668) unless told.
pip_flags=()
if python3 -c "import os, sys, sysconfig; sys.exit(sys.prefix != sys.base_prefix or not os.path.exists(
    os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"; then
  pip_flags=(--break-system-packages)
fi
pip_install() { python3 -m pip install "${pip_flags[@]}" "$@" >&2; }

# The extension's build tools (pip builds without isolation, from this environment) and the tests'.
# ml_dtypes: NumPy's bfloat16, which the API accepts.
if ! python3 -c "import nanobind, scikit_build_core, pytest, numpy, ml_dtypes" >/dev/null 2>&1; then
  echo "== deps: pip install the Python build and test tools" >&2
  pip_install "nanobind==3.1.0" "scikit-build-core==1.1.2" "pytest==9.*" numpy "ml_dtypes==0.5.*"
fi
# torch for the tests of swapffn.torch, which CI must run (python/tests/conftest.py fails on a skipped
# CPU test). PyPI's Linux wheel is a CUDA build and does not import without its nvidia-* libraries,
# so it comes whole (about 3.5 GB downloaded, 2 minutes); it imports and runs on a machine without a
# GPU. 2.8 is the first with float4_e2m1fn_x2 (swapffn.nvfp4); 2.15 the newest tested.
if ! python3 -c "import torch; torch.float4_e2m1fn_x2" >/dev/null 2>&1; then
  echo "== deps: pip install torch (about 3.5 GB with its CUDA libraries; minutes)" >&2
  pip_install "torch>=2.8,<2.16"
fi

cuda=${SWAPFFN_CUDA:-AUTO}
nvcc_bin="$(command -v nvcc || true)"
[ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_bin=/usr/local/cuda/bin/nvcc
if [ -n "$nvcc_bin" ] && [ "$cuda" != OFF ]; then
  # CUTLASS/CuTe headers for the tensor-core kernels (pinned; builds with nvcc 13 for sm_90a).
  if ! python3 -c "import cutlass_library" >/dev/null 2>&1; then
    echo "== deps: pip install nvidia-cutlass" >&2
    pip_install nvidia-cutlass==4.2.0.0
  fi
  # nvml.h for the bench's GPU telemetry (the NVML library itself comes with the driver).
  if ! python3 -c "import nvidia, os, sys; sys.exit(not any(os.path.exists(p + '/cu13/include/nvml.h') for p in nvidia.__path__))" >/dev/null 2>&1; then
    echo "== deps: pip install nvidia-nvml-dev" >&2
    pip_install nvidia-nvml-dev==13.5.37
  fi
fi

if [ "$cuda" = OFF ]; then
  preset=cpu build=build/cpu
else
  preset=release build=build/release
fi
# SWAPFFN_PYTHON: the extension in this tree too. Python_EXECUTABLE: the interpreter pip's build
# passes, so that its configure step leaves every compile command, and so every object, as it is.
py=$(python3 -c "import sys; print(sys.executable)")
echo "== deps: configure $build (cmake --preset $preset, SWAPFFN_CUDA=$cuda)" >&2
cmake --preset "$preset" -DSWAPFFN_CUDA="$cuda" -DSWAPFFN_PYTHON=ON -DPython_EXECUTABLE="$py" >&2
echo "== deps: build $build (a first CUDA build takes about 11 minutes on 2 cores)" >&2
cmake --build "$build" -j "$(nproc)" >&2

# The package from the same tree: pip's configure step sees the same options (BUILD_TESTING stays
# on so that the C++ tests stay in the tree), and ninja finds every target up to date.
echo "== deps: pip install . from $build (configure, nothing to build, install)" >&2
pip_install -v --no-build-isolation -C build-dir="$build" -C cmake.define.BUILD_TESTING=ON .
echo "$build"

#!/usr/bin/env bash
# Installs what building and testing need, from Debian's and PyPI's registries, then configures and
# builds into build/release (CUDA backends when nvcc is present). Idempotent; used by run.sh/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
pkgs=(cmake ninja-build g++ git python3 python3-pip python3-venv python3-numpy libgtest-dev libgmock-dev
      libbenchmark-dev libcli11-dev nlohmann-json3-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: apt-get install ${missing[*]}" >&2
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}" >&2
fi

nvcc_bin="$(command -v nvcc || true)"
[ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_bin=/usr/local/cuda/bin/nvcc
if [ -n "$nvcc_bin" ]; then
  # CUTLASS/CuTe headers for the tensor-core kernels (pinned; builds with nvcc 13 for sm_90a).
  if ! python3 -c "import cutlass_library" >/dev/null 2>&1; then
    python3 -m pip install -q nvidia-cutlass==4.2.0.0 >&2 || python3 -m pip install -q --break-system-packages nvidia-cutlass==4.2.0.0 >&2
  fi
  # nvml.h for the bench's GPU telemetry (the NVML library itself comes with the driver).
  if ! python3 -c "import nvidia, os, sys; sys.exit(not any(os.path.exists(p + '/cu13/include/nvml.h') for p in nvidia.__path__))" >/dev/null 2>&1; then
    python3 -m pip install -q nvidia-nvml-dev==13.5.37 >&2 || python3 -m pip install -q --break-system-packages nvidia-nvml-dev==13.5.37 >&2
  fi
fi

jobs=$(nproc)
cmake --preset release >&2
cmake --build build/release -j "$jobs" >&2

# The Python package (pip install .) and what its build and tests need. torch is optional: the
# tests of the PyTorch layer run where torch imports (a GPU machine's torch), and skip elsewhere.
pip_install() { python3 -m pip install -q "$@" >&2 || python3 -m pip install -q --break-system-packages "$@" >&2; }
# ml_dtypes: NumPy's bfloat16, which the API accepts (its test skips without it).
python3 -c "import nanobind, scikit_build_core, pytest, numpy, ml_dtypes" >/dev/null 2>&1 ||
  pip_install "nanobind==3.1.0" "scikit-build-core==1.1.2" "pytest==9.*" numpy "ml_dtypes==0.5.*"
pip_install --no-build-isolation .

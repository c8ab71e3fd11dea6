#!/usr/bin/env bash
# Prepares .carry/sysroot on the CPU machine for building on the device machine, which has nvcc,
# CMake and ninja but no internet: the header-only and static dependencies (nlohmann-json, CLI11,
# GoogleTest) from this machine's Debian packages, the CUTLASS/CuTe headers (include/ and
# tools/util/include/) from the pinned nvidia-cutlass wheel, and nvml.h from the pinned
# nvidia-nvml-dev wheel (the CUDA 13.0 toolkit's own nvml.h lacks clock-event reasons the bench
# reads), and the wheels of the Python package's build and test tools. Name `.carry` in the device
# call's carry list; scripts/device-build.sh and scripts/device-test.sh use it.
set -euo pipefail
cd "$(dirname "$0")/.."
S=.carry/sysroot
rm -rf "$S"
mkdir -p "$S/usr/include" "$S/usr/lib/x86_64-linux-gnu/cmake" "$S/usr/share/cmake" "$S/cutlass/include" "$S/nvml"
cp -r /usr/include/nlohmann /usr/include/CLI /usr/include/gtest /usr/include/gmock "$S/usr/include/"
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a "$S/usr/lib/x86_64-linux-gnu/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest "$S/usr/lib/x86_64-linux-gnu/cmake/"
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$S/usr/share/cmake/"
cutlass=$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source'))")
cp -r "$cutlass/include/cute" "$cutlass/include/cutlass" "$S/cutlass/include/"
mkdir -p "$S/cutlass/tools/util" && cp -r "$cutlass/tools/util/include" "$S/cutlass/tools/util/"
nvml=$(python3 -c "import nvidia, os; print(next(p + '/cu13/include/nvml.h' for p in nvidia.__path__ if os.path.exists(p + '/cu13/include/nvml.h')))")
cp "$nvml" "$S/nvml/"
# The Python package's build and test tools, as wheels (the device's python3 has torch and numpy).
rm -rf .carry/wheels && mkdir -p .carry/wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d .carry/wheels nanobind==3.1.0 scikit-build-core==1.1.2 pathspec packaging \
  "pytest==9.*" iniconfig pluggy "ml_dtypes==0.5.*"
git rev-parse HEAD > .carry/commit
du -sh "$S"

#!/usr/bin/env bash
# Builds the CLIs (swapffn, swapffn-nvfp4) and the test binaries (the engine's and NVFP4's) on the
# device machine (16 cores, no internet) from the carried dependencies (.carry/sysroot, made by
# scripts/prepare-device-carry.sh), so that the binaries there always match the commit of the tree.
# Usage: scripts/device-build.sh [build-dir]   (default build/device)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/device}
S=$PWD/.carry/sysroot
# The tree has no .git there: the commit comes from .carry/commit (written by prepare-device-carry.sh).
[ -f .carry/commit ] && export SWAPFFN_COMMIT="$(cat .carry/commit)"
[ -d "$S" ] || { echo "device-build: $S is missing (run scripts/prepare-device-carry.sh and carry .carry)" >&2; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSWAPFFN_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$S/usr" -DGTest_DIR="$S/usr/lib/x86_64-linux-gnu/cmake/GTest" \
  -DCLI11_DIR="$S/usr/share/cmake/CLI11" -Dnlohmann_json_DIR="$S/usr/share/cmake/nlohmann_json" \
  -DSWAPFFN_CUTLASS_DIR="$S/cutlass/include" -DSWAPFFN_NVML_INCLUDE_DIR="$S/nvml" >/dev/null
cmake --build "$build" -j "$(nproc)" --target swapffn_cli swapffn_cpu_tests swapffn_gpu_tests \
  swapffn_nvfp4_cli swapffn_nvfp4_cpu_tests swapffn_nvfp4_gpu_tests

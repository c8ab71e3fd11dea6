#!/usr/bin/env bash
# Builds the CLI and the tests on the device machine (16 cores) from the carried dependencies
# (.carry/sysroot, made by scripts/prepare-device-carry.sh).
# Usage: scripts/device-build.sh [build-dir] [targets...]   (default targets: swapffn_cli swapffn_tests)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/device}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(swapffn_cli swapffn_tests)
S=$PWD/.carry/sysroot
# The tree has no .git here: the commit comes from .carry/commit (written by the caller's side).
[ -f .carry/commit ] && export SWAPFFN_COMMIT="$(cat .carry/commit)"
[ -d "$S" ] || { echo "device-build: $S is missing (run scripts/prepare-device-carry.sh and carry .carry)" >&2; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSWAPFFN_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$S/usr" -DGTest_DIR="$S/usr/lib/x86_64-linux-gnu/cmake/GTest" \
  -DCLI11_DIR="$S/usr/share/cmake/CLI11" -Dnlohmann_json_DIR="$S/usr/share/cmake/nlohmann_json" \
  -DSWAPFFN_CUTLASS_DIR="$S/cutlass" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

#!/usr/bin/env bash
# Whole test suite: install, build once (the C++ tests, the CLI and the Python package, with torch:
# scripts/deps.sh), run every CPU test and the Python tests (pytest fails on a skipped test that can
# run on a CPU; the GPU tests are the binary swapffn_gpu_tests and the CUDA cases of the Python tests,
# run on a GPU machine by scripts/device-test.sh), then check the reference's dump against the
# independent NumPy implementation of SPEC.md. SWAPFFN_CUDA=OFF: all of it without CUDA (build/cpu).
set -euo pipefail
cd "$(dirname "$0")"
build=$(bash scripts/deps.sh)
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
SWAPFFN_CLI="$build/apps/swapffn" python3 -m pytest -q python/tests nvfp4/python/tests
bash scripts/spec-oracle-check.sh "$build/apps/swapffn"

#!/usr/bin/env bash
# Whole test suite: install, build (the C++ tests and the Python package), run every CPU test and
# the Python tests (torch's cases where torch imports; the GPU tests are the binary swapffn_gpu_tests and the CUDA cases of the Python
# tests, run on a GPU machine by scripts/device-test.sh), then check the reference's dump against
# the independent NumPy implementation of SPEC.md.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/deps.sh
ctest --test-dir build/release --output-on-failure -j "$(nproc)"
python3 -m pytest -q python/tests
bash scripts/spec-oracle-check.sh build/release/apps/swapffn

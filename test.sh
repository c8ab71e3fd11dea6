#!/usr/bin/env bash
# Whole test suite: install, build, run every CPU test (the GPU tests are their own binary,
# swapffn_gpu_tests, run on a GPU machine by scripts/device-test.sh), then check the reference's
# dump against the independent NumPy implementation of SPEC.md.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/deps.sh
ctest --test-dir build/release --output-on-failure -j "$(nproc)"
bash scripts/spec-oracle-check.sh build/release/apps/swapffn

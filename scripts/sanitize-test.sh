#!/usr/bin/env bash
# The CPU tests, the fuzz corpus included, under ASan+UBSan (CMake preset `debug`: -O1, any UBSan
# finding fatal). Builds only the CPU test binary and the CLI it runs, into build/debug. Needs what
# scripts/deps.sh installs; CI (.ci/run) runs it after ./test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

cmake --preset debug >&2
cmake --build build/debug -j "$(nproc)" --target swapffn_cpu_tests swapffn_nvfp4_cpu_tests >&2  # and the CLIs

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The CLI test of an input too large for host memory asks the sanitized CLI for 256 TiB, which
# ASan's allocator reports as fatal instead of failing the allocation; the Release run covers it.
ctest --test-dir build/debug --output-on-failure -j "$(nproc)" -E '^CliLimits.InputsTooLargeForMemoryAreNamed$'

#!/usr/bin/env bash
# Everything the GPU backends need checked on a device machine, in one call: build (unless a build
# is present), the GPU tests, `swapffn check` on the tiny and default models, and `swapffn bench`.
# Logs go to $OUT (the device tool's return folder; default build/device-out), at most a few files:
#   device-test.log (everything, in order), gtest.xml, bench.json, bench-tiny.json
# Usage: scripts/device-test.sh [build-dir]   (default build/gpu)
# Env: GTEST_FILTER (default: the GPU test suites), BENCH_BATCHES (default 1,4,16,64),
#      BENCH_BACKENDS (default: all built), SKIP_DEFAULT_CHECK=1 (skip the slow CPU reference check
#      on the default model), QUICK=1 (smoke run: fewer tokens and repeats).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/gpu}
out=${OUT:-build/device-out}
mkdir -p "$out"
log="$out/device-test.log"
: > "$log"
exec > >(tee -a "$log") 2>&1

failures=()
run_step() {  # run_step NAME CMD...: runs, reports, remembers failures; never stops the script
  local name=$1
  shift
  echo "== [$name] $*"
  local t0=$SECONDS
  "$@"
  local rc=$?
  echo "== [$name] rc=$rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || failures+=("$name (rc $rc)")
}

if [ ! -x "$build/apps/swapffn" ] || [ ! -x "$build/tests/swapffn_tests" ]; then
  run_step configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
  run_step build cmake --build "$build" -j "$(nproc)" --target swapffn_cli swapffn_tests
fi
bin="$build/apps/swapffn"
tests="$build/tests/swapffn_tests"

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu --format=csv || true
run_step info "$bin" info
run_step has-gpu "$bin" info --has-gpu

run_step gpu-tests "$tests" --gtest_filter="${GTEST_FILTER:-*Unfused*:*unfused*}" --gtest_output="xml:$out/gtest.xml"

models="$build/models"
mkdir -p "$models"
[ -f "$models/tiny.safetensors" ] || run_step init-tiny "$bin" init --config tiny --seed 1 --out "$models/tiny.safetensors"
run_step check-tiny-b1 "$bin" check --model "$models/tiny.safetensors" --backend unfused --batch 1 --tokens 8
run_step check-tiny-b3 "$bin" check --model "$models/tiny.safetensors" --backend unfused --batch 3 --tokens 8
run_step check-tiny-b3-eager "$bin" check --model "$models/tiny.safetensors" --backend unfused --batch 3 --tokens 4 --no-graph
if [ "${SKIP_DEFAULT_CHECK:-0}" != 1 ]; then
  [ -f "$models/default.safetensors" ] || run_step init-default "$bin" init --config default --seed 1 --out "$models/default.safetensors"
  run_step check-default-b1 "$bin" check --model "$models/default.safetensors" --backend unfused --batch 1 --tokens 2
fi

backends=()
[ -n "${BENCH_BACKENDS:-}" ] && backends=(--backends "$BENCH_BACKENDS")
if [ "${QUICK:-0}" = 1 ]; then
  tok=(--tokens 8 --warmup 1 --repeats 3)
else
  tok=(--tokens 16 --warmup 2 --repeats 7)
fi
run_step bench-default "$bin" bench --config default --batches "${BENCH_BATCHES:-1,4,16,64}" "${backends[@]}" \
  "${tok[@]}" --breakdown --eager --json "$out/bench.json"
run_step bench-tiny "$bin" bench --config tiny --batches 1,4 --tokens 4 --warmup 1 --repeats 3 \
  --json "$out/bench-tiny.json"

echo
if [ ${#failures[@]} -eq 0 ]; then
  echo "device-test: ALL PASSED"
else
  echo "device-test: FAILED: ${failures[*]}"
  exit 1
fi

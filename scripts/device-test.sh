#!/usr/bin/env bash
# Everything a GPU change must show on a device machine, in one call: the whole test binary (GPU
# tests included), `nvfp4 check`, `swapffn check` of both GPU backends (the fused one on the tiny and
# default models, the unfused one on default), and `swapffn bench` of both against the issue's anchor
# (cuBLAS's FFN GEMMs alone), with a diagnostic row per --leave-out list (by default the fused step
# with only its GEMMs left: what the step's GEMMs cost in its own graph).
# Builds first unless the build directory already holds the CLI and the tests (binaries built on the
# CPU machine travel as a carried path); on the device machine, which has no internet, the build uses
# .carry (scripts/prepare-device-carry.sh) when it is there.
# Logs go to $OUT (the device tool's return folder; default build/device-out), at most five files:
#   device-test.log (everything, in order), gtest.xml, bench.json, bench.log, checks.log
# Usage: scripts/device-test.sh [build-dir]   (default build/release)
# Env: GTEST_FILTER (default: every test), BENCH_BATCHES (default 1,16,64), BENCH_BACKENDS (default
#      unfused,fused), BENCH_LEAVE_OUT (default 'router+rmsnorm+collapse'; empty: no such row),
#      SKIP_TESTS=1, SKIP_CHECKS=1, SKIP_BENCH=1, QUICK=1 (smoke run: fewer tokens and repeats).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
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

bin="$build/apps/swapffn"
tests="$build/tests/swapffn_tests"
if [ ! -x "$bin" ] || [ ! -x "$tests" ]; then
  if [ -d .carry/sysroot ]; then
    run_step build bash scripts/device-build.sh "$build"
  else
    run_step configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
    run_step build cmake --build "$build" -j "$(nproc)" --target swapffn_cli swapffn_tests
  fi
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.limit \
  --format=csv || true
run_step info "$bin" info
run_step has-gpu "$bin" info --has-gpu

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  run_step tests "$tests" --gtest_filter="${GTEST_FILTER:-*}" --gtest_output="xml:$out/gtest.xml"
  run_step nvfp4-check "$bin" nvfp4 check
fi

if [ "${SKIP_CHECKS:-0}" != 1 ]; then
  models="$build/models"
  mkdir -p "$models"
  [ -f "$models/tiny.safetensors" ] || run_step init-tiny "$bin" init --config tiny --seed 1 --out "$models/tiny.safetensors"
  [ -f "$models/default.safetensors" ] ||
    run_step init-default "$bin" init --config default --seed 1 --out "$models/default.safetensors"
  {
    run_step check-fused-tiny "$bin" check --model "$models/tiny.safetensors" --backend fused --batch 3 --tokens 4
    run_step check-fused-default "$bin" check --model "$models/default.safetensors" --backend fused --batch 1 --tokens 2
    run_step check-unfused-default "$bin" check --model "$models/default.safetensors" --backend unfused --batch 1 \
      --tokens 2
  } > >(tee "$out/checks.log")
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  if [ "${QUICK:-0}" = 1 ]; then
    tok=(--tokens 8 --warmup 1 --repeats 3)
  else
    tok=(--tokens 16 --warmup 2 --repeats 5)
  fi
  leave=()
  leave_out=${BENCH_LEAVE_OUT-router+rmsnorm+collapse}
  [ -n "$leave_out" ] && leave=(--leave-out "$leave_out")
  run_step bench "$bin" bench --config default --batches "${BENCH_BATCHES:-1,16,64}" \
    --backends "${BENCH_BACKENDS:-unfused,fused}" "${tok[@]}" "${leave[@]}" --breakdown --json "$out/bench.json" \
    > >(tee "$out/bench.log")
fi

echo
if [ ${#failures[@]} -eq 0 ]; then
  echo "device-test: ALL PASSED"
else
  echo "device-test: FAILED: ${failures[*]}"
  exit 1
fi

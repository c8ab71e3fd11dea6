#!/usr/bin/env bash
# Everything a GPU change must show on a device machine, in one call: a build there from the tree
# (scripts/device-build.sh, so the binaries match the commit), the test binaries (the engine's and
# NVFP4's), compute-sanitizer (memcheck, racecheck, synccheck) over the GPU tests of the engines on
# the tiny config and of the NVFP4 kernels, the Python package and its tests (and NVFP4's eager vs
# CUDA-graph overhead: nvfp4/scripts/nvfp4_overhead.py), `swapffn check` of the GPU backends (fused on the
# tiny and default models, unfused on default), and `swapffn bench` against cuBLAS's FFN GEMMs alone
# (with the Python package, its python[slots] row too), and the whole LM's decode step served with
# the engines against PyTorch's SwapFFN modules (examples/lm/bench.py). With BEFORE_BIN (another
# build's CLI, carried), the same `run` checksums from both binaries for both bf16 GPU backends on
# both models.
# Logs go to $OUT (the device tool's return folder; default build/device-out):
#   device-test.log (everything, in order), gpu-tests.xml, nvfp4-gpu-tests.xml,
#   sanitizer-<tool>-<group>.log, checks.log, bench.json, bench.log, lm-bench.json, lm-bench.log,
#   nvfp4-overhead.json
# Usage: scripts/device-test.sh [build-dir]   (default build/device)
# Env: GTEST_FILTER (default: every test), BENCH_BATCHES (default 1,16,64), BENCH_BACKENDS (default
#      unfused,fused,fused-fp8), SKIP_TESTS=1, SKIP_SANITIZER=1, SKIP_CHECKS=1, SKIP_PYTHON=1,
#      SKIP_BENCH=1, SKIP_LM=1, LM_BATCHES (default 1,8,64), LM_BACKENDS (default auto), QUICK=1
#      (fewer tokens and repeats), SANITIZER_ENGINE_FILTER and SANITIZER_NVFP4_FILTER (defaults
#      below), SANITIZER_TIMEOUT (s per tool and group, 300), GPU_TESTS_TIMEOUT (s per GPU test
#      binary, 500: a hang fails its step). All of it takes more than one device
#      call (10 minutes): split it with the SKIP_ variables.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/device}
out=${OUT:-build/device-out}
mkdir -p "$out"
exec > >(tee -a "$out/device-test.log") 2>&1

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
  return $rc
}

run_step build bash scripts/device-build.sh "$build" || { echo "device-test: FAILED: build"; exit 1; }
bin="$build/apps/swapffn"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.limit \
  --format=csv || true
run_step info "$bin" info

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  run_step cpu-tests "$build/tests/swapffn_cpu_tests" --gtest_brief=1
  # A kernel that hangs fails its step instead of holding the device call until it is killed.
  run_step gpu-tests timeout "${GPU_TESTS_TIMEOUT:-500}" "$build/tests/swapffn_gpu_tests" --gtest_filter="${GTEST_FILTER:-*}" --gtest_brief=1 \
    --gtest_output="xml:$out/gpu-tests.xml"
  run_step nvfp4-cpu-tests "$build/nvfp4/swapffn_nvfp4_cpu_tests" --gtest_brief=1
  run_step nvfp4-gpu-tests timeout "${GPU_TESTS_TIMEOUT:-500}" "$build/nvfp4/swapffn_nvfp4_gpu_tests" --gtest_filter="${GTEST_FILTER:-*}" --gtest_brief=1 \
    --gtest_output="xml:$out/nvfp4-gpu-tests.xml"
fi

# Each tool over two groups of GPU tests, each with its own time limit (racecheck over both at once
# ran past 300 s): the engines (the tiny config's checks of unfused, fused and fused-fp8 with the
# folded and the cuBLAS event head and row groups; the fp8 quantisers and GEMMs) and the NVFP4
# kernels' exactness tests. A finding, or a run past its time, fails the step; the tool's summary
# lines go to this log, its report to sanitizer-<tool>-<group>.log.
engine_filter=${SANITIZER_ENGINE_FILTER:-"Presets/UnfusedCheck.*/tiny_B3_T6:Paths/FusedCheck.*/tiny_1\
:Paths/FusedCheck.*/tiny_3:Paths/FusedCheck.*/tiny_9:Paths/FusedFp8Check.*/tiny_3:Paths/FusedFp8Check.*/tiny_4\
:Paths/FusedFp8Check.*/tiny_10:Paths/FusedFp8Check.*/tiny_15:Fp8Quantize.*:Shapes/Fp8Gemm.*\
:Shapes/Sm90Fp8DualGemm.*:Shapes/Fp8RowsGemm.*/2:Shapes/Fp8RowsGemm.*/3"}
nvfp4_filter=${SANITIZER_NVFP4_FILTER:-"Nvfp4Gpu.GemvBitExact:Nvfp4Gpu.GemvTmaBitExact:Nvfp4Gpu.GemmBitExact\
:Nvfp4Gpu.DualGemmWithinTolerance:Nvfp4Gpu.GroupedGemmBitExact"}
sanitize() {  # sanitize TOOL GROUP FILTER BINARY: compute-sanitizer TOOL over the GPU tests FILTER names
  local tool=$1 log="$out/sanitizer-$1-$2.log" sanitizer_filter=$3 binary=$4
  timeout "${SANITIZER_TIMEOUT:-300}" "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 1000 \
    "$binary" --gtest_filter="$sanitizer_filter" --gtest_brief=1 > "$log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "compute-sanitizer $tool: stopped after ${SANITIZER_TIMEOUT:-300} s"
  grep -E '^========= (ERROR|RACECHECK|SYNCCHECK|LEAK) SUMMARY|^\[  (PASSED|FAILED) ' "$log"
  if [ "$tool" = racecheck ] && [ $rc -eq 1 ]; then
    # racecheck cannot follow a plain bulk copy's (cp.async.bulk, not tensor TMA) completion through
    # its mbarrier: a textbook two-stage ring reports the same hazards with it and none with a tensor
    # TMA load (docs/NVFP4.md, "Sanitizers"). Those reports are counted, any other one fails the step.
    local bulk other
    bulk=$(grep -c 'Race reported between Write access at cute::SM90_BULK_COPY_G2S' "$log")
    other=$(grep -c 'Race reported between' "$log")
    other=$((other - bulk))
    echo "racecheck: $bulk reports of plain bulk-copy stages (not followed by the tool), $other others"
    [ "$other" -eq 0 ] && ! grep -q '^\[  FAILED' "$log" && rc=0
  fi
  return $rc
}
if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$sanitizer" ]; then
    for tool in memcheck racecheck synccheck; do
      group_filter=$engine_filter
      # racecheck does not get through the unfused check: its six tokens ran past 150 s (cuBLAS's
      # GEMM kernels under the tool), limiting it to our kernels (--kernel-name kns=swapffn) and one
      # token of `swapffn check` both ended in the tool's own error on a cuBLAS launch, with no
      # hazard reported. The unfused step's kernels with shared memory (core_film,
      # router_select_swap, rmsnorm_bf16) run in the fused checks racecheck covers; its swiglu has none.
      [ "$tool" = racecheck ] && group_filter=${engine_filter//"Presets/UnfusedCheck.*/tiny_B3_T6:"/}
      run_step "sanitizer-$tool-engine" sanitize "$tool" engine "$group_filter" "$build/tests/swapffn_gpu_tests"
      run_step "sanitizer-$tool-nvfp4" sanitize "$tool" nvfp4 "$nvfp4_filter" "$build/nvfp4/swapffn_nvfp4_gpu_tests"
    done
  else
    echo "== [sanitizer] compute-sanitizer not found (PATH, /usr/local/cuda/bin)"
    failures+=("sanitizer (not found)")
  fi
fi

models="$build/models"
mkdir -p "$models"
[ -f "$models/tiny.safetensors" ] || "$bin" init --config tiny --seed 1 --out "$models/tiny.safetensors"
[ -f "$models/default.safetensors" ] || "$bin" init --config default --seed 1 --out "$models/default.safetensors"
if [ "${SKIP_CHECKS:-0}" != 1 ]; then
  {
    run_step check-fused-tiny "$bin" check --model "$models/tiny.safetensors" --backend fused --batch 3 --tokens 4
    run_step check-fused-default "$bin" check --model "$models/default.safetensors" --backend fused --batch 1 --tokens 2
    run_step check-unfused-default "$bin" check --model "$models/default.safetensors" --backend unfused --batch 1 \
      --tokens 2
  } > >(tee "$out/checks.log")
fi

if [ -n "${BEFORE_BIN:-}" ]; then
  for model in tiny default; do
    for backend in fused unfused; do
      for batch in 1 17; do
        args=(run --model "$models/$model.safetensors" --backend "$backend" --batch "$batch" --tokens 3)
        now=$("$bin" "${args[@]}" | grep '^checksum')
        before=$("$BEFORE_BIN" "${args[@]}" | grep '^checksum')
        echo "== [same-bits $model $backend B=$batch] now:    $now"
        echo "== [same-bits $model $backend B=$batch] before: $before"
        [ -n "$now" ] && [ "$now" = "$before" ] || failures+=("same-bits $model $backend B=$batch")
      done
    done
  done
fi

py_env=(env PYTHONPATH="/tmp/swapffn-py:/tmp/swapffn-pydeps${PYTHONPATH:+:$PYTHONPATH}")
if [ "${SKIP_PYTHON:-0}" != 1 ]; then
  # The Python package built there from the tree, with the carried wheels of its build and test
  # tools (.carry/wheels), then every Python test, the CUDA cases included (the device's torch).
  S=$PWD/.carry/sysroot
  run_step python-build bash -c "python3 -m pip install -q --no-index --no-deps --target /tmp/swapffn-pydeps .carry/wheels/*.whl &&
    PYTHONPATH=/tmp/swapffn-pydeps python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/swapffn-py \
      -C cmake.define.SWAPFFN_CUTLASS_DIR=$S/cutlass/include -C cmake.define.SWAPFFN_NVML_INCLUDE_DIR=$S/nvml \
      -C cmake.define.CMAKE_PREFIX_PATH=$S/usr -C cmake.define.CLI11_DIR=$S/usr/share/cmake/CLI11 \
      -C cmake.define.nlohmann_json_DIR=$S/usr/share/cmake/nlohmann_json ."
  run_step python-tests "${py_env[@]}" SWAPFFN_CLI="$bin" python3 -m pytest -q -p no:cacheprovider python/tests \
    nvfp4/python/tests
  # What an eager NVFP4 call costs beyond its CUDA-graph replay, every benchmark shape (docs/NVFP4.md).
  run_step nvfp4-overhead "${py_env[@]}" python3 nvfp4/scripts/nvfp4_overhead.py --json "$out/nvfp4-overhead.json"
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  if [ "${QUICK:-0}" = 1 ]; then tok=(--tokens 8 --warmup 1 --repeats 3); else tok=(--tokens 16 --warmup 2 --repeats 5); fi
  [ "${SKIP_PYTHON:-0}" != 1 ] && tok+=(--python)  # the package built above times the python[slots] row
  run_step bench "${py_env[@]}" "$bin" bench --config default --batches "${BENCH_BATCHES:-1,4,16,64}" \
    --backends "${BENCH_BACKENDS:-unfused,fused,fused-fp8}" --fp8-headroom "${tok[@]}" --json "$out/bench.json" > >(tee "$out/bench.log")
fi

if [ "${SKIP_LM:-0}" != 1 ]; then
  # The untrained LM of the default Swap-FFN shape, with the Python package installed above (or by an
  # earlier call on this machine): served against PyTorch's SwapFFN modules, in a CUDA graph and
  # compiled. SWAPFFN_COMMIT names the commit in its JSON where the tree has no .git.
  if [ "${QUICK:-0}" = 1 ]; then lm_steps=(--steps 5 --repeats 3 --warmup 2); else lm_steps=(); fi
  run_step lm-bench "${py_env[@]}" python3 examples/lm/bench.py --random default --backend "${LM_BACKENDS:-auto}" \
    --batches "${LM_BATCHES:-1,8,64}" "${lm_steps[@]}" --json "$out/lm-bench.json" > >(tee "$out/lm-bench.log")
fi

echo
if [ ${#failures[@]} -eq 0 ]; then
  echo "device-test: ALL PASSED"
else
  echo "device-test: FAILED: ${failures[*]}"
  exit 1
fi

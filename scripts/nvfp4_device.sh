#!/usr/bin/env bash
# One device-machine session for the NVFP4 suite (issue 5): GPU tests, `swapffn nvfp4 check`, the
# bench over the issue's 14 shapes, and (with `profile`) Nsight Compute sections plus SASS opcode
# counts of the main kernels. Binaries are built on the host and carried in $B; logs go to $OUT.
#   scripts/nvfp4_device.sh [profile]
set -u
B=${B:-build/nvfp4}
OUT=${OUT:-/tmp/nvfp4_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv
timeout 240 "$B/nvfp4_tests" --gtest_color=no >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure|got |error" "$OUT/tests.log" | head -30
timeout 60 "$B/apps/swapffn" nvfp4 check >"$OUT/check.log" 2>&1
echo "check rc=$?"
grep -v "^ok" "$OUT/check.log" | head
if [ "${1:-}" = profile ]; then
  SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
--section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats"
  prof() {  # name op kernel-regex
    timeout 120 ncu --kernel-name-base mangled --kernel-name "regex:$3" --launch-skip 2 --launch-count 1 $SECTIONS \
      "$B/apps/swapffn" nvfp4 bench --op "$2" --reps 3 >"$OUT/ncu_$1.txt" 2>&1
    echo "== ncu $1 rc=$?"
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Executed Ipc A" "$OUT/ncu_$1.txt" | head -16
  }
  prof gemm gemm 'nvfp4_gemm_kernel.*Lb0E'
  prof gemm_wg gemm 'nvfp4_gemm_kernel.*Lb1E'
  prof gemv gemv 'nvfp4_gemv_kernel'
  for k in 'nvfp4_gemm_kernel.*Lb0E' 'nvfp4_gemm_kernel.*Lb1E' 'nvfp4_gemv_kernelILi4'; do
    f=$(cuobjdump -symbols "$B/apps/swapffn" 2>/dev/null | grep -oE "_ZN[A-Za-z0-9_]*" | grep -E "$k" | head -1)
    echo "== SASS opcodes of $f"
    cuobjdump -sass -fun "$f" "$B/apps/swapffn" | grep -oE "^\s+/\*[0-9a-f]{4}\*/\s+[A-Z0-9_.]+" | awk '{print $2}' |
      sed 's/\..*//' | sort | uniq -c | sort -rn | head -25 | tr '\n' ' '
    echo
  done >"$OUT/sass.txt" 2>&1
  cat "$OUT/sass.txt" | cut -c1-600
fi
timeout 200 "$B/apps/swapffn" nvfp4 bench --op all --json "$OUT/nvfp4.json" >"$OUT/bench.log" 2>&1
echo "bench rc=$?"
tail -17 "$OUT/bench.log"

#!/usr/bin/env bash
# Nsight Compute profile of the default NVFP4 kernels on all 14 bench shapes (issue 5): every
# launch of `swapffn-nvfp4 bench --op all --no-search` (the default config of each shape, its
# pre-pass included) with the metrics that say where a kernel's time goes (SM occupancy of the
# grid, DRAM and L2 throughput, tensor/ALU/FMA pipes, issue slots, warps, warp stalls). GPU clocks
# are left as the bench runs them (--clock-control none), caches flushed before each kernel (ncu's
# default), so the durations compare with the bench's L2-flushed medians. Then
# nvfp4/scripts/profile_summary.py turns the CSV into a per-shape table (where each kernel spends its time).
#   B=<swapffn-nvfp4 binary> OUT=<log dir> nvfp4/scripts/profile_shapes.sh
set -u
B=${B:-build/release/nvfp4/swapffn-nvfp4}
OUT=${OUT:-/tmp/nvfp4_profile}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
M="gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_elapsed.avg,dram__bytes_read.sum,dram__bytes_write.sum"
M="$M,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed"
for p in sm__pipe_tensor_op_hmma_cycles_active sm__inst_executed_pipe_alu sm__inst_executed_pipe_fma smsp__issue_active; do
  M="$M,$p.avg.pct_of_peak_sustained_active"
done
M="$M,smsp__warps_active.avg.per_cycle_active,smsp__warps_eligible.avg.per_cycle_active"
M="$M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
timeout 420 ncu --clock-control none --kernel-name regex:"nvfp4_|predequant" --csv --page raw --metrics "$M" \
  "$B" bench --op all --no-search --reps 3 >"$OUT/ncu_shapes.csv" 2>"$OUT/ncu_shapes.err"
echo "ncu rc=$?"
python3 "$(dirname "$0")/profile_summary.py" "$OUT/ncu_shapes.csv" | tee "$OUT/ncu_shapes.md"

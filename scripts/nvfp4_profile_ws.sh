#!/usr/bin/env bash
# Nsight Compute metrics of the warp-specialised NVFP4 GEMM tiles (register loads of one k-tile
# `ws` or two `ws2`) on the first GEMM bench shape: pipe utilisation, warp stalls, global-load
# efficiency. (The raw-ring `wsr` kernel matches 'WsCfgILi128ELi1ELi4ELi1ELb1'.)
# `scripts/nvfp4_profile_ws.sh breakdown`: instead, the sub-unit breakdown of L1TEX and SM
# throughput of the default ws kernel (which L1 stage is saturated).
#   B=<build dir> OUT=<log dir> scripts/nvfp4_profile_ws.sh
B=${B:-build/nvfp4}; OUT=${OUT:-/tmp/nvfp4_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
M='--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum'
p() {
  timeout 90 ncu --kernel-name-base mangled --kernel-name "regex:$2" --launch-skip 2 --launch-count 1 $M \
    "$B/apps/swapffn" nvfp4 bench --op gemm --reps 3 >"$OUT/ncu_$1.txt" 2>&1
  echo "== $1 rc=$?"
  grep -E "^\s+(smsp|sm__|l1tex|lts|dram|gpu__)" "$OUT/ncu_$1.txt" | awk '$NF+0 > 1 || /time|sum/' |
    sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{printf "%s=%s ", $1, $NF} END {print ""}'
}
if [ "${1:-}" = breakdown ]; then
  M='--metrics breakdown:l1tex__throughput.avg.pct_of_peak_sustained_active,breakdown:sm__throughput.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,gpu__time_duration.sum'
  p ws_breakdown 'nvfp4_gemm_kernel.*WsCfgILi128ELi1ELi6ELi4ELb0ELi1E'
  exit
fi
p ws 'nvfp4_gemm_kernel.*WsCfgILi128ELi1ELi6ELi4ELb0ELi1E'
p ws2 'nvfp4_gemm_kernel.*WsCfgILi128ELi1ELi6ELi2ELb0ELi2E'

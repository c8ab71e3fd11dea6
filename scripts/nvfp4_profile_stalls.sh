#!/usr/bin/env bash
# Warp-stall breakdown (Nsight Compute) of the default NVFP4 GEMM, dual GEMM and GEMV kernels on
# the first bench shape of each op; run on the device machine after scripts/nvfp4_device.sh.
B=build/nvfp4; export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
M='--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum'
p() { timeout 150 ncu --kernel-name-base mangled --kernel-name "regex:$3" --launch-skip 2 --launch-count 1 $M $B/apps/swapffn nvfp4 bench --op $2 --reps 3 > $OUT/ncu4_$1.txt 2>&1; echo "== $1 rc=$?"; grep -E "^\s+(smsp|sm__|l1tex|dram|gpu__)" $OUT/ncu4_$1.txt | awk '$NF+0 > 0.05 || /pct|time|per_cycle/' | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{printf "%s=%s ", $1, $NF} END {print ""}'; }
p gemm_wg gemm 'nvfp4_gemm_kernel.*Lb1E'
p dual_wg dual 'nvfp4_dual_gemm_swiglu_kernel.*Lb1E'
p gemv gemv 'nvfp4_gemv_kernel'

#!/usr/bin/env python3
"""Per-shape summary of an Nsight Compute CSV (--csv --page raw) of `swapffn-nvfp4 bench --op all
--no-search` (nvfp4/scripts/profile_shapes.sh): the medians over each shape's launches of its main
kernel and its pre-pass, as a markdown table, then each main kernel's top warp stalls."""
import csv
import statistics
import sys

SHAPES = ["gemv 7168x16384 L=1", "gemv 4096x7168 L=8", "gemv 7168x2048 L=4",
          "gemm 128x7168x16384", "gemm 128x4096x7168", "gemm 128x7168x2048",
          "dual 256x4096x7168", "dual 512x4096x7168", "dual 256x3072x4096", "dual 512x3072x7168",
          "grouped 4096x7168 (8 groups)", "grouped 7168x2048 (8 groups)", "grouped 3072x4096 (2)", "grouped 4096x1536 (2)"]
STALL = "smsp__average_warps_issue_stalled_"


def num(s):
    return float(s.replace(",", "")) if s not in ("", "n/a") else float("nan")


def main(path):
    rows = list(csv.reader(open(path)))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    h, data = rows[head], rows[head + 2:]
    ix = {c: i for i, c in enumerate(h)}
    # Consecutive launches of one main kernel with one grid are one shape; its pre-pass runs just before.
    shapes, prev, pending = [], None, None
    for r in data:
        name = r[ix["Kernel Name"]]
        if "predequant" in name:
            pending = r
            continue
        key = (name.split("(")[0], r[ix["Grid Size"]])
        if key != prev:
            shapes.append({"name": name, "grid": r[ix["Grid Size"]], "main": [], "pre": []})
            prev = key
        shapes[-1]["main"].append(r)
        if "gemv" not in name:
            if pending is None:
                sys.exit(f"launch {r[ix['ID']]} ({name.split('(')[0]}) has no pre-pass before it")
            shapes[-1]["pre"].append(pending)
            pending = None
    if len(shapes) != len(SHAPES):
        sys.exit(f"expected {len(SHAPES)} shapes, found {len(shapes)}")

    def med(rs, col):
        return statistics.median(num(r[ix[col]]) for r in rs) if col in ix else float("nan")

    print("| shape | kernel, grid | pre-pass us | main us | SMs busy | DRAM GB/s | DRAM % | L2 % | tensor % | ALU % | FMA % | issue % | warps/sched (eligible) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    stalls = []
    for label, s in zip(SHAPES, shapes):
        m = s["main"]
        us = med(m, "gpu__time_duration.sum") / 1e3
        pre = med(s["pre"], "gpu__time_duration.sum") / 1e3 if s["pre"] else 0.0
        busy = med(m, "sm__cycles_active.avg") / med(m, "sm__cycles_elapsed.avg")
        dram = med(m, "dram__bytes_read.sum") + med(m, "dram__bytes_write.sum")
        kern = s["name"].split("::")[1].split("<")[0].replace("_kernel", "")
        print(f"| {label} | {kern} {s['grid'].replace(' ', '')} | {pre:.1f} | {us:.1f} | {100 * busy:.0f}% "
              f"| {dram / (us * 1e3):.0f} | {med(m, 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):.0f} "
              f"| {med(m, 'lts__t_sectors.avg.pct_of_peak_sustained_elapsed'):.0f} "
              f"| {med(m, 'sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'):.0f} "
              f"| {med(m, 'sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active'):.0f} "
              f"| {med(m, 'sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active'):.0f} "
              f"| {med(m, 'smsp__issue_active.avg.pct_of_peak_sustained_active'):.0f} "
              f"| {med(m, 'smsp__warps_active.avg.per_cycle_active'):.1f} ({med(m, 'smsp__warps_eligible.avg.per_cycle_active'):.2f}) |")
        st = sorted(((med(m, c), c[len(STALL):].replace("_per_issue_active.ratio", "")) for c in h if c.startswith(STALL)),
                    reverse=True)
        stalls.append((label, st[:4]))
    print("\nTop warp stalls of each main kernel (cycles per issued instruction):\n")
    for label, st in stalls:
        print(f"- {label}: " + ", ".join(f"{n} {v:.2f}" for v, n in st))


if __name__ == "__main__":
    main(sys.argv[1])

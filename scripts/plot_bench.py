#!/usr/bin/env python3
"""Plots from swapffn bench JSON files (needs matplotlib and numpy).

  tokps:  tok/s against batch size per backend, with the floor and the anchor as lines.
          One panel per JSON (e.g. one per device), from `swapffn bench --json`.
  nvfp4:  % of SOL per shape, from `swapffn-nvfp4 bench --json`.

Examples:
  scripts/plot_bench.py tokps bench/baselines/h100-fp8.json bench/baselines/h200-fp8.json \
      bench/baselines/h200.json bench/baselines/h100.json -o docs/bench_tokps.png
  scripts/plot_bench.py nvfp4 bench/baselines/nvfp4-h100.json -o docs/nvfp4_sol.png
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# The in-run anchors (cuBLAS's FFN GEMMs alone, bf16 and fp8): dashed lines, not backends.
ANCHORS = {"cublas-ffn-gemms": ("0.2", "anchor: cuBLAS FFN GEMMs alone (bf16)"),
           "cublas-fp8-gemms": ("tab:brown", "anchor: cuBLASLt block-scaled e4m3 FFN GEMMs alone"),
           "cublas-fp8-rows": ("tab:olive", "anchor: cuBLASLt row-scaled e4m3 FFN GEMMs alone")}
# The 1.3 x SOL target of the NVFP4 suite, as a share of SOL.
NVFP4_TARGET_PCT = 100.0 / 1.3


def load(path):
    with open(path) as f:
        return json.load(f)


def short_device(name):
    return name.replace("NVIDIA ", "").replace(" 80GB HBM3", "")


def tokps_panel(ax, run, show_all):
    """One device's tok/s by batch size: a line per backend, the anchor, the floor."""
    rows = run["rows"]
    floor_tokps = run["peak_tflops"] * 1e12 / run["flops_per_token"]
    backends = []
    for r in rows:
        name = r["backend"]
        if name.startswith("cublas-") or name in backends:  # anchors (and the fp8 headroom rows): not backends
            continue
        # Extra rows such as fused[slots] are diagnostics; fused-fp8[rows] is a scaling of its own.
        if not show_all and "[" in name and not name.endswith("[rows]"):
            continue
        backends.append(name)

    def series(name):
        pts = sorted((r["batch"], r["tok_per_s"]) for r in rows if r["backend"] == name)
        return np.array([p[0] for p in pts]), np.array([p[1] for p in pts])

    batches = sorted({r["batch"] for r in rows})
    ax.axhline(floor_tokps, color="0.35", linestyle=":", linewidth=1.5, label="floor (dense bf16 GEMM rate)")
    ax.annotate(f"floor: {floor_tokps:,.0f} tok/s at {run['peak_tflops']:.0f} TF/s", (batches[0], floor_tokps),
                textcoords="offset points", xytext=(0, 5), fontsize=8, color="0.35")
    for anchor, (color, label) in ANCHORS.items():
        bx, by = series(anchor)
        if len(bx):
            ax.plot(bx, by, color=color, linestyle="--", marker="s", markersize=5, label=label)
    colors = {"fused": "tab:blue", "unfused": "tab:orange", "fused-fp8": "tab:red", "fused-fp8[rows]": "tab:purple"}
    at = {}  # batch -> the backends' tok/s there, to place each label clear of the others
    for name in backends:
        for xi, yi in zip(*series(name)):
            at.setdefault(xi, []).append(yi)
    for name in backends:
        x, y = series(name)
        ax.plot(x, y, marker="o", linewidth=2, color=colors.get(name), label=name)
        for xi, yi in zip(x, y):
            # fused-fp8's labels above its line, the others' below, clear of the anchors' dashed lines
            # above them; a fused-fp8 point below another backend's gets its label on the right.
            if name != "fused-fp8":
                offset, ha = (0, -14), "center"
            else:
                offset, ha = ((0, 6), "center") if yi == max(at[xi]) else ((8, -3), "left")
            ax.annotate(f"{yi:,.0f}", (xi, yi), textcoords="offset points", xytext=offset, ha=ha, fontsize=8,
                        color=colors.get(name, "0.2"))
    ax.set_xscale("log")
    ax.set_xticks(batches)
    ax.set_xticklabels([str(b) for b in batches])
    ax.minorticks_off()
    ax.set_xlabel("batch size B (sequences)")
    ax.set_title(f"{short_device(run['device'])}, commit {run['commit'][:7]}", fontsize=11)
    ax.grid(True, which="major", alpha=0.3)


def plot_tokps(args):
    runs = [load(p) for p in args.json]
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.8), sharey=True, squeeze=False)
    for ax, run in zip(axes[0], runs):
        tokps_panel(ax, run, args.all_rows)
    top = max(max(run["peak_tflops"] * 1e12 / run["flops_per_token"], max(r["tok_per_s"] for r in run["rows"]))
              for run in runs)
    axes[0][0].set_ylim(0, top * 1.08)
    axes[0][0].set_ylabel("tokens per second (decode, default model)")
    seen = {}
    for ax in axes[0]:  # one legend for every panel's lines (a run may lack a backend)
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    axes[0][0].legend(list(seen.values()), list(seen.keys()), loc="lower right", fontsize=8)
    fig.suptitle("swapffn decode step: tok/s by batch size", fontsize=12)
    fig.tight_layout()
    fig.savefig(args.output, dpi=args.dpi)
    print(f"wrote {args.output}")


def plot_nvfp4(args):
    run = load(args.json[0])
    res = run["results"]
    labels, pct, ops = [], [], []
    for r in res:
        shape = r["shape"].split(" m=")[0]
        if r["op"] == "grouped":
            groups = len(r["shape"].split(" m=")[1].split(",")) if " m=" in r["shape"] else 0
            shape += f" ({groups} groups)"
        labels.append(f"{r['op']} {shape}")
        pct.append(100.0 * r["sol_us"] / r["default_us"])
        ops.append(r["op"])
    colors = {"gemv": "tab:green", "gemm": "tab:blue", "dual": "tab:purple", "grouped": "tab:orange"}
    y = np.arange(len(res))[::-1]
    fig, ax = plt.subplots(figsize=(8.5, 0.38 * len(res) + 1.6))
    ax.barh(y, pct, color=[colors.get(o, "0.5") for o in ops])
    for yi, p, r in zip(y, pct, res):
        ax.text(p + 1, yi, f"{p:.0f}%  ({r['default_us']:.1f} us)", va="center", fontsize=8)
    ax.axvline(NVFP4_TARGET_PCT, color="0.3", linestyle="--", linewidth=1)
    ax.text(NVFP4_TARGET_PCT + 1, y[-1] - 0.45, "target: within 1.3 x SOL", fontsize=8, color="0.3")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_xlim(0, 110)
    ax.set_ylim(-0.8, len(res) - 0.3)
    ax.set_xlabel("% of SOL (SOL time / kernel time; default config)")
    ax.set_title(f"NVFP4 kernels, {short_device(run['device'])}, commit {run['commit'][:7]}", fontsize=11)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output, dpi=args.dpi)
    print(f"wrote {args.output}")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["tokps", "nvfp4"], help="which plot")
    p.add_argument("json", nargs="+", help="bench JSON file(s); tokps takes one panel per file")
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    p.add_argument("--all-rows", action="store_true", help="tokps: also plot extra rows such as fused[...]")
    p.add_argument("--dpi", type=int, default=130)
    args = p.parse_args(argv)
    if args.kind == "nvfp4" and len(args.json) != 1:
        p.error("nvfp4 takes one JSON file")
    (plot_tokps if args.kind == "tokps" else plot_nvfp4)(args)


if __name__ == "__main__":
    main(sys.argv[1:])

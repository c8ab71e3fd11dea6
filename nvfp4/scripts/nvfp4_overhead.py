#!/usr/bin/env python3
"""What an eager call of swapffn.nvfp4 costs beyond its CUDA-graph replay (issue 56 item 5: at most 5 us), on
every GPU MODE benchmark shape of the four functions (the shapes of `swapffn-nvfp4 bench`), with the
competition's inputs (data, plain and permuted scales, c; the grouped problem's plain scales on the host).

Per shape, in one run on one Hopper GPU, N calls back to back on one stream, CUDA events around them, the
median over repeats of the time per call: (a) eager, (b) the replay of a CUDA graph that captured the same N
calls. Also the host time per eager call (enqueueing N calls, before the GPU has run them). Prints a markdown
table and, with --json, writes the rows and the run's setting.

Without a Hopper GPU (or with --check-only) it builds every shape's inputs on the host and passes them through
the argument checks (each must be refused only for being on the host, or for a build without CUDA), then says
that it skipped the timing.

    PYTHONPATH=<package> python3 nvfp4/scripts/nvfp4_overhead.py --json overhead.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

import swapffn
from swapffn import _nvfp4, nvfp4

TARGET_US = 5.0
NAN_E4M3 = 0x7F

# The benchmark shapes: gemv (M, K, L), gemm and dual (M, N, K), grouped (N, K, M of each group).
SHAPES = {
    "gemv": [(7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4)],
    "gemm": [(128, 7168, 16384), (128, 4096, 7168), (128, 7168, 2048)],
    "dual": [(256, 4096, 7168), (512, 4096, 7168), (256, 3072, 4096), (512, 3072, 7168)],
    "grouped": [(4096, 7168, (80, 176, 128, 72, 64, 248, 96, 160)), (7168, 2048, (40, 76, 168, 72, 164, 148, 196, 160)),
                (3072, 4096, (192, 320)), (4096, 1536, (128, 384))],
}


def data(rows, k, l, device, fill):
    """Packed e2m1 (rows, K/2, L): a contiguous (L, rows, K/2) tensor permuted by (1, 2, 0)."""
    return fill((l, rows, k // 2), device).permute(1, 2, 0).view(torch.float4_e2m1fn_x2)


def plain_scales(rows, k, l, device, fill):
    """e4m3 (rows, K/16, L), a contiguous (L, rows, K/16) tensor permuted by (1, 2, 0); values 1 to 1.25."""
    return (fill((l, rows, k // 16), device) % 3 + 56).view(torch.float8_e4m3fn).permute(1, 2, 0)


def permuted_scales(rows, k, l, device, fill):
    """The blocked 128x4 scales as the competition views them: (32, 4, rows/128, 4, K/64, L)."""
    rm, rk = -(-rows // 128), -(-(k // 16) // 4)
    blocks = (fill((l, rm, rk, 32, 4, 4), device) % 3 + 56).view(torch.float8_e4m3fn)
    return blocks.permute(3, 4, 1, 5, 2, 0)


def output(m, n, l, device):
    return torch.empty((l, m, n), dtype=torch.float16, device=device).permute(1, 2, 0)


def inputs(op, shape, device):
    """(label, function, arguments) of one benchmark shape, as the competition's generate_input lays them out."""
    if device == "cpu":  # the checks only look at the layout
        def fill(size, dev):
            return torch.empty(size, dtype=torch.uint8, device=dev)
    else:
        def fill(size, dev):
            return torch.randint(0, 256, size, dtype=torch.uint8, device=dev)

    def operand(rows, k, l, scale_device=device):
        return (data(rows, k, l, device, fill), plain_scales(rows, k, l, scale_device, fill),
                permuted_scales(rows, k, l, device, fill))

    if op == "gemv":
        m, k, l = shape
        (a, sfa, pa), (b, sfb, pb) = operand(m, k, l), operand(128, k, l)  # b padded to 128 rows
        return f"{m}x{k} L={l}", nvfp4.gemv, (a, b, sfa, sfb, pa, pb, output(m, 1, l, device))
    if op == "gemm":
        m, n, k = shape
        (a, sfa, pa), (b, sfb, pb) = operand(m, k, 1), operand(n, k, 1)
        return f"{m}x{n}x{k}", nvfp4.gemm, (a, b, sfa, sfb, pa, pb, output(m, n, 1, device))
    if op == "dual":
        m, n, k = shape
        (a, sfa, pa), (b1, s1, p1), (b2, s2, p2) = operand(m, k, 1), operand(n, k, 1), operand(n, k, 1)
        return f"{m}x{n}x{k}", nvfp4.dual_gemm_swiglu, (a, b1, b2, sfa, s1, s2, pa, p1, p2, output(m, n, 1, device))
    n, k, ms = shape
    abc, plain, permuted, sizes = [], [], [], []
    for m in ms:
        (a, sfa, pa), (b, sfb, pb) = operand(m, k, 1, "cpu"), operand(n, k, 1, "cpu")
        abc.append((a, b, output(m, n, 1, device)))
        plain.append((sfa, sfb))
        permuted.append((pa, pb))
        sizes.append((m, n, k, 1))
    return f"{n}x{k} m={','.join(map(str, ms))}", nvfp4.grouped_gemm, (abc, plain, permuted, sizes)


def check_arguments(ops):
    """Every shape's inputs on the host through the checks: refused only for the device (or the build)."""
    for op in ops:
        for shape in SHAPES[op]:
            label, fn, args = inputs(op, shape, "cpu")
            try:
                fn(*args)
            except swapffn.Error as e:
                if "expected a CUDA tensor, got one on cpu" not in str(e):
                    raise
            except RuntimeError as e:
                if "built without CUDA" not in str(e):
                    raise
            else:
                raise AssertionError(f"{op} {label}: host tensors were not refused")
            print(f"{op} {label}: arguments accepted up to the device check")


def per_call_us(stream, run, calls, repeats):
    """Median over `repeats` of (GPU time of run()) / calls, and the median host time of run() / calls."""
    gpu, host = [], []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(repeats):
        stream.synchronize()
        start.record(stream)
        t0 = time.perf_counter()
        run()
        host.append((time.perf_counter() - t0) * 1e6 / calls)
        stop.record(stream)
        stop.synchronize()
        gpu.append(start.elapsed_time(stop) * 1e3 / calls)
    return statistics.median(gpu), statistics.median(host)


def measure(op, shape, calls, repeats):
    label, fn, args = inputs(op, shape, "cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        def eager():
            for _ in range(calls):
                fn(*args)

        eager()  # warm-up: the stream's workspace, the configs, the kernels' first launch
        eager_us, host_us = per_call_us(stream, eager, calls, repeats)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            eager()
        graph.replay()
        graph_us, _ = per_call_us(stream, graph.replay, calls, repeats)
    torch.cuda.synchronize()
    return {"op": op, "shape": label, "graph_us": graph_us, "eager_us": eager_us, "host_us": host_us,
            "eager_minus_graph_us": eager_us - graph_us, "within_target": eager_us - graph_us <= TARGET_US}


def table(rows):
    lines = [f"| op | shape | graph us | eager us | eager - graph | host us | <= {TARGET_US:g} us |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['shape']} | {r['graph_us']:.1f} | {r['eager_us']:.1f} | "
                     f"{r['eager_minus_graph_us']:.1f} | {r['host_us']:.1f} | {'yes' if r['within_target'] else 'NO'} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", help="write the rows and the setting to this file")
    ap.add_argument("--calls", type=int, default=100, help="calls back to back per timing (default 100)")
    ap.add_argument("--repeats", type=int, default=10, help="timings per shape and mode, median (default 10)")
    ap.add_argument("--ops", default="gemv,gemm,dual,grouped", help="comma-separated subset of gemv,gemm,dual,grouped")
    ap.add_argument("--check-only", action="store_true", help="only pass every shape's inputs through the checks")
    args = ap.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o]
    if any(o not in SHAPES for o in ops) or not ops:
        ap.error(f"--ops {args.ops!r}: choose from {','.join(SHAPES)}")
    if args.calls < 1 or args.repeats < 1:
        ap.error("--calls and --repeats must be >= 1")

    gpu = swapffn.gpu()
    why = "--check-only" if args.check_only else ("" if torch.cuda.is_available() and _nvfp4.with_cuda and gpu["hopper"]
                                                  else "no Hopper GPU, torch CUDA and CUDA build here")
    result = {"tensor_exchange": _nvfp4.exchange(), "torch": torch.__version__, "calls": args.calls,
              "repeats": args.repeats, "target_us": TARGET_US}
    if why:
        check_arguments(ops)
        print(f"skipped the GPU timing: {why}")
        result["skipped"] = why
    else:
        result["device"] = torch.cuda.get_device_name()
        result["method"] = (f"per call: median over {args.repeats} runs of {args.calls} calls back to back on one "
                            "stream (CUDA events), eager and as one CUDA graph's replay; host: enqueue time / calls")
        rows = []
        for op in ops:
            for shape in SHAPES[op]:
                rows.append(measure(op, shape, args.calls, args.repeats))
                print(f"{op} {rows[-1]['shape']}: graph {rows[-1]['graph_us']:.1f} us, eager {rows[-1]['eager_us']:.1f} us",
                      file=sys.stderr)
        result["rows"] = rows
        print(f"{result['device']}, torch {torch.__version__}, tensors read by {result['tensor_exchange']}\n")
        print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

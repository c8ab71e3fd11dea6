#!/usr/bin/env python3
"""Where a token step's time goes on the GPU: the kernels of T slot steps replayed from the engine's
CUDA graph (Engine.decode on CUDA tensors), recorded by torch.profiler (CUPTI), as one Markdown
table per backend and batch size: each kernel kind's launches per step, time per launch and per step,
and its share; then the step's span, the time some kernel runs (the union of the kernels' intervals:
row groups overlap) and the gaps (the span minus that union). docs/PERFORMANCE.md's breakdown
tables come from this script.

usage: PYTHONPATH=<swapffn package> step_breakdown.py MODEL [--backend fused] [--batch 1] [--steps 16]
"""
import argparse
import re
import sys


def kind_of(name: str) -> str:
    """A kernel's name without template arguments and parameters, so launches of one kernel group."""
    name = name.replace("(anonymous namespace)::", "")
    depth, out = 0, []
    for ch in name:
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">"
    short = re.sub(r"\(.*$", "", "".join(out)).replace("void ", "").strip()
    return short[-70:] if len(short) > 70 else short


def union_us(intervals) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def breakdown(model: str, backend: str, batch: int, steps: int) -> str:
    import torch
    from torch.profiler import ProfilerActivity, profile

    import swapffn

    eng = swapffn.Engine.load(model, backend=backend)
    pool = swapffn.StatePool(eng, batch)
    ids = list(range(batch))
    pool.reset(ids)
    xs = torch.randn(steps, batch, eng.config["d_model"], device=f"cuda:{eng.device}")
    for _ in range(2):  # allocation, capture, then warm replays
        eng.decode(xs, pool, ids)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        eng.decode(xs, pool, ids)
        torch.cuda.synchronize()
    ks = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
          and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    if not ks:
        return f"{backend} B={batch}: no kernels recorded"
    start = min(e.time_range.start for e in ks)
    span = (max(e.time_range.end for e in ks) - start) / steps
    busy = union_us([(e.time_range.start, e.time_range.end) for e in ks]) / steps
    total = sum(e.device_time for e in ks) / steps
    kinds = {}
    for e in ks:
        k = kinds.setdefault(kind_of(e.name), [0, 0.0])
        k[0] += 1
        k[1] += e.device_time
    lines = [f"{backend}, B = {batch}, {torch.cuda.get_device_name(eng.device)}: {len(ks) / steps:.0f} kernels "
             f"per step; span {span:.1f} us per step, some kernel running {busy:.1f} us, gaps "
             f"{span - busy:.1f} us; kernel time summed {total:.1f} us (over 100% of the span: row groups "
             f"overlap)",
             "",
             "| kernel | per step | us each | us per step | share of summed |",
             "|---|---:|---:|---:|---:|"]
    for name, (n, us) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| `{name}` | {n / steps:.1f} | {us / n:.2f} | {us / steps:.1f} | {100 * us / steps / total:.0f}% |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--backend", default="fused")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=16)
    a = p.parse_args()
    print(breakdown(a.model, a.backend, a.batch, a.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())

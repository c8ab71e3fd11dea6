"""Where GPU time goes: the CUDA kernels of some work recorded by torch.profiler (CUPTI), as a
Markdown table of kernel kinds (launches per step, time per launch and per step, share), with the
steps' span, the time some kernel runs (the union of the kernels' intervals: streams may overlap) and
the gaps. scripts/step_breakdown.py (one engine step) and examples/lm/bench.py --profile (the whole
LM's decode step) print it. Needs torch with CUDA."""
from __future__ import annotations

import re
from typing import Callable, Iterable, Tuple


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


def union_us(intervals: Iterable[Tuple[float, float]]) -> float:
    """The length of the union of [start, end) intervals."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def kernel_table(run: Callable[[], None], steps: int, title: str) -> str:
    """Profiles run() (which enqueues `steps` steps on the GPU; it is synchronised after) and returns
    the table of its kernels per step, headed by `title` and the span, busy time and gaps."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    ks = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
          and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    if not ks:
        return f"{title}: no kernels recorded"
    start = min(e.time_range.start for e in ks)
    span = (max(e.time_range.end for e in ks) - start) / steps
    busy = union_us([(e.time_range.start, e.time_range.end) for e in ks]) / steps
    total = sum(e.device_time for e in ks) / steps
    kinds = {}
    for e in ks:
        k = kinds.setdefault(kind_of(e.name), [0, 0.0])
        k[0] += 1
        k[1] += e.device_time
    lines = [f"{title}: {len(ks) / steps:.0f} kernels per step; span {span:.1f} us per step, some kernel "
             f"running {busy:.1f} us, gaps {span - busy:.1f} us; kernel time summed {total:.1f} us",
             "",
             "| kernel | per step | us each | us per step | share of summed |",
             "|---|---:|---:|---:|---:|"]
    for name, (n, us) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| `{name}` | {n / steps:.1f} | {us / n:.2f} | {us / steps:.1f} | {100 * us / steps / total:.0f}% |")
    return "\n".join(lines)

#!/usr/bin/env python3
"""Where a token step's time goes on the GPU: the kernels of T slot steps replayed from the engine's
CUDA graph (Engine.decode on CUDA tensors), recorded by torch.profiler (CUPTI), as one Markdown
table per backend and batch size: each kernel kind's launches per step, time per launch and per step,
and its share; then the step's span, the time some kernel runs (the union of the kernels' intervals:
row groups overlap) and the gaps (the span minus that union). docs/PERFORMANCE.md's breakdown
tables come from this script.

usage: PYTHONPATH=<swapffn package> step_breakdown.py MODEL [--backend fused] [--batch 1] [--steps 16]
       [--kernels up=bn256_st4_sk1_mc1_p]   (pinned kernel choices, as `swapffn run --kernels`)
"""
import argparse
import sys


def breakdown(model: str, backend: str, batch: int, steps: int, kernels: str = "") -> str:
    import torch

    import swapffn
    from swapffn.kernel_profile import kernel_table

    eng = swapffn.Engine.load(model, backend=backend, kernels=kernels)
    pool = swapffn.StatePool(eng, batch)
    ids = list(range(batch))
    pool.reset(ids)
    xs = torch.randn(steps, batch, eng.config["d_model"], device=f"cuda:{eng.device}")
    for _ in range(2):  # allocation, capture, then warm replays
        eng.decode(xs, pool, ids)
    pinned = f" [{kernels}]" if kernels else ""
    title = f"{backend}{pinned}, B = {batch}, {torch.cuda.get_device_name(eng.device)} (row groups overlap)"
    return kernel_table(lambda: eng.decode(xs, pool, ids), steps, title)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--backend", default="fused")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--kernels", default="", help="pinned kernel choices, as `swapffn run --kernels`")
    a = p.parse_args()
    print(breakdown(a.model, a.backend, a.batch, a.steps, a.kernels))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The fused slot step called through the Python API from a torch CUDA graph, timed as `swapffn
bench` times its `fused[slots]` row (a pool of 4B slots, the batch in slots 4b + 1, 16 tokens per
run, median of the runs): what the Python layer costs over the C++ path. Run it beside `swapffn
bench --backends fused` on the same machine and compare the two rows' ms/step.

    scripts/bench_python.py --model m.safetensors --batches 1,16,64 --json python.json
"""
import argparse
import json
import statistics

import numpy as np
import torch

import swapffn


def time_batch(engine, batch, tokens, warmup, repeats):
    dev = torch.device("cuda", engine.device)
    d = engine.config["d_model"]
    pool = swapffn.StatePool(engine, 4 * batch)
    ids = torch.tensor([4 * b + 1 for b in range(batch)], dtype=torch.int32, device=dev)
    rng = np.random.default_rng(1)
    xs = torch.from_numpy(rng.standard_normal((tokens, batch, d)).astype(np.float32)).to(dev)
    x = xs[0].clone()
    out = torch.empty((batch, d), dtype=torch.float32, device=dev)
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):  # allocations at this batch size happen outside the capture
        engine.step(x, pool, ids, out=out)
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        engine.step(x, pool, ids, out=out)

    def run():
        for t in range(tokens):
            x.copy_(xs[t])
            graph.replay()

    for _ in range(warmup):
        run()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_step = []
    for _ in range(repeats):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        per_step.append(start.elapsed_time(stop) / tokens)
    return statistics.median(per_step), min(per_step), max(per_step)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    engine = swapffn.Engine.load(a.model, backend="fused")
    rows = []
    for b in (int(s) for s in a.batches.split(",")):
        med, lo, hi = time_batch(engine, b, a.tokens, a.warmup, a.repeats)
        rows.append({"backend": "python[slots]", "batch": b, "ms_per_step": med, "spread": (hi - lo) / med})
        print(f"python[slots] B={b}: {med:.4f} ms/step (spread {100 * (hi - lo) / med:.1f}%)", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(engine.device), "tokens": a.tokens, "rows": rows}, f,
                      indent=2)


if __name__ == "__main__":
    main()

"""The `python[slots]` row of `swapffn bench --python`: the slot step called through the Python API
from torch CUDA graphs, timed as the bench times its `fused[slots]` row (a pool of 4B slots, the
batch in slots 4b + 1, `tokens` steps per timed run, one graph replay per step, median of the runs).
`swapffn bench --python` runs it in a child process and prints its row beside the C++ ones; run
alone, it prints the same JSON, one line per batch size, on stdout:

    python3 -m swapffn.bench_row --model m.safetensors --batches 1,16,64

Where torch, CUDA or a Hopper GPU is missing it prints {"unavailable": "<why>"} and exits 0.
"""
import argparse
import json
import statistics
import sys

import numpy as np

import swapffn


def unavailable() -> str:
    """Why this process cannot time the row ("" when it can)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if not swapffn.gpu()["hopper"]:
        return "no Hopper GPU"
    return ""


def time_batch(engine, batch: int, tokens: int, warmup: int, repeats: int) -> dict:
    import torch
    dev = torch.device("cuda", engine.device)
    d = engine.config["d_model"]
    pool = swapffn.StatePool(engine, 4 * batch)
    ids = torch.tensor([4 * b + 1 for b in range(batch)], dtype=torch.int32, device=dev)
    xs = torch.from_numpy(np.random.default_rng(1).standard_normal((tokens, batch, d)).astype(np.float32)).to(dev)
    outs = torch.empty((tokens, batch, d), dtype=torch.float32, device=dev)
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):  # the engine allocates at a new batch size: outside any capture
        engine.step(xs[0], swapffn.StatePool(engine, 4 * batch), ids, out=outs[0])
    torch.cuda.current_stream(dev).wait_stream(side)
    # One graph per token, each on its own x and out, replayed in order: the C++ loop's one graph
    # launch per step, with no copy of x between steps.
    graphs = []
    for t in range(tokens):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            engine.step(xs[t], pool, ids, out=outs[t])
        graphs.append(g)

    def run():
        for g in graphs:
            g.replay()

    # The C++ slot step in this same process: Engine.decode replays the engine's own graph per step
    # (what the fused[slots] row times), alternated with the Python row run by run, so that the
    # ratio of the two holds whatever the clock does between processes.
    engine_pool = swapffn.StatePool(engine, 4 * batch)
    engine.decode(xs, engine_pool, ids, out=outs)  # the arguments checked once, outside the timing
    stream = torch.cuda.current_stream(dev).cuda_stream

    def run_engine():  # Engine.decode's replays without its per-call checks (two host syncs)
        swapffn._swapffn.decode_device(engine._h, engine_pool._h, xs, ids, outs, stream)

    for _ in range(warmup):
        run()
        run_engine()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn) -> float:
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / tokens

    per_step, engine_per_step = [], []
    for _ in range(repeats):
        per_step.append(timed(run))
        engine_per_step.append(timed(run_engine))
    return {"backend": "python[slots]", "batch": batch, "ms_per_step": statistics.median(per_step),
            "min_ms_per_step": min(per_step), "max_ms_per_step": max(per_step),
            "engine_decode_ms_per_step": statistics.median(engine_per_step)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="fused")
    ap.add_argument("--kernels", default="", help="the fused backend's choices, as `swapffn run --kernels`")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    why = unavailable()
    if why:
        print(json.dumps({"unavailable": why}), flush=True)
        return 0
    engine = swapffn.Engine.load(a.model, backend=a.backend, kernels=a.kernels)
    for b in (int(s) for s in a.batches.split(",")):
        row = time_batch(engine, b, a.tokens, a.warmup, a.repeats)
        print(json.dumps(row), flush=True)
        print(f"python[slots] B={b}: {row['ms_per_step']:.4f} ms/step ({row['engine_decode_ms_per_step']:.4f} for "
              "the engine's own replays in this process)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A toy serving loop: sequences join and leave while a stand-in outer model calls the Swap-FFN
engine once per token for every live sequence (continuous batching over a StatePool).

    examples/decode_loop.py                         # tiny model, reference backend on the CPU
    examples/decode_loop.py --config default --backend fused --slots 64 --steps 200

The "outer model" is a fixed random projection of the layer's output back into its input, so that
each sequence's inputs depend on its own history, as they would in a decoder.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

import swapffn


def progress(done, total, t0):
    width = 40
    fill = width * done // total
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} steps, {time.time() - t0:.1f} s")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model file (default: a random one of --config)")
    ap.add_argument("--config", default="tiny", help="preset of the random model: tiny or default")
    ap.add_argument("--backend", default="fused" if swapffn.gpu()["hopper"] else "reference")
    ap.add_argument("--slots", type=int, default=8, help="sequences the pool holds at once")
    ap.add_argument("--steps", type=int, default=40, help="decode steps of the serving loop")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    path = a.model
    if path is None:
        path = os.path.join(tempfile.mkdtemp(), f"{a.config}.safetensors")
        swapffn.init_model(path, config=a.config, seed=a.seed)
    engine = swapffn.Engine.load(path, backend=a.backend)
    d = engine.config["d_model"]
    rng = np.random.default_rng(a.seed)
    outer = (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
    pool = swapffn.StatePool(engine, a.slots)

    live = {}  # slot -> (sequence id, tokens left, next input)
    free = list(range(a.slots))
    next_id, finished, tokens = 0, 0, 0
    t0 = time.time()
    for step in range(a.steps):
        while free and rng.random() < 0.5:  # sequences arrive
            slot = free.pop()
            pool.reset([slot])
            live[slot] = (next_id, int(rng.integers(3, 12)), rng.standard_normal(d).astype(np.float32))
            next_id += 1
        if live:
            slots = sorted(live)
            x = np.stack([live[s][2] for s in slots])
            delta = engine.step(x, pool, slots)
            tokens += len(slots)
            for s, row in zip(slots, delta):
                seq, left, _ = live[s]
                if left == 1:  # the sequence ends: its slot is free for the next one
                    del live[s]
                    free.append(s)
                    finished += 1
                else:
                    live[s] = (seq, left - 1, np.tanh(row @ outer).astype(np.float32))
        progress(step + 1, a.steps, t0)
    secs = time.time() - t0
    print(f"{engine.name}: {a.steps} steps, {tokens} tokens of {next_id} sequences ({finished} finished) "
          f"in {secs:.2f} s: {tokens / secs:.1f} tok/s")


if __name__ == "__main__":
    main()

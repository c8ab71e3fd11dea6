#!/usr/bin/env python3
"""Trains a tiny Swap-FFN layer for a few steps on CPU, saves it, and decodes with it in the engine.

    python examples/train_tiny.py [--model m.safetensors] [--steps 10] [--out trained.safetensors]

Without --model it starts from the engine's own random tiny model. The toy task regresses delta to a
random target over a short unrolled sequence, so the gradient reaches earlier tokens through the
recurrent state.
"""
import argparse
import os
import sys
import tempfile

try:
    import torch
except ImportError:
    sys.exit("train_tiny.py needs PyTorch (pip install torch): the trainable layer is swapffn.torch.SwapFFN")

import swapffn
from swapffn.torch import SwapFFN


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model file to start from (default: a fresh tiny model)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=3, help="length of the unrolled sequence")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--out", default="trained.safetensors")
    a = ap.parse_args()

    start = a.model
    if start is None:
        start = os.path.join(tempfile.mkdtemp(), "tiny.safetensors")
        swapffn.init_model(start, config="tiny", seed=3)
    model = SwapFFN.from_safetensors(start)  # fp32 parameters, initialised from the bf16 file

    torch.manual_seed(0)
    x = torch.randn(a.tokens, a.batch, model.config["d_model"])
    with torch.no_grad():
        scale = torch.stack([model(x[t])[0] for t in range(a.tokens)]).std()
    target = scale * torch.randn_like(x)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(a.steps):
        state, deltas = model.init_state(a.batch), []
        for t in range(a.tokens):
            delta, state = model(x[t], state)
            deltas.append(delta)
        loss = (torch.stack(deltas) - target).square().mean() / target.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}")

    model.save_safetensors(a.out)  # rounds to bf16, as the engine stores parameters
    engine = swapffn.Engine.load(a.out, backend="reference")
    pool = swapffn.StatePool(engine, slots=a.batch)
    pool.reset(list(range(a.batch)))
    got = torch.as_tensor(engine.step(x[0].numpy(), pool, list(range(a.batch))))
    with torch.no_grad():
        want, _ = SwapFFN.from_safetensors(a.out)(x[0])
    print(f"saved {a.out}; engine vs module on token 0: rel L2 {float((got - want).norm() / want.norm()):.2e}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Trains the byte-level Swap-FFN language model (model.py) on the Python standard library's own source
files, read from disk, and saves it as a model directory that serve.py serves with the engines.

    python examples/lm/train.py --out lm-tiny                          # tiny LM, 300 steps, on a GPU if any
    python examples/lm/train.py --device cpu --threads 1 --steps 3 --batch 2 --seq 16 --out /tmp/lm  # seconds
    python examples/lm/train.py --config default --steps 50 --batch 4 --seq 64 --out lm-default

Seeded: on a CPU, two runs with the same arguments on the same machine write the same weights. The default
LM has the engine's full Swap-FFN shape (about 206 GFLOP per token and block, SPEC section 6): a step of it
costs seconds on a GPU even with --checkpoint (its default), which keeps the backward pass's memory in reach.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Callable, List, Optional, Tuple, Union

try:
    import torch
except ImportError:
    sys.exit("train.py needs PyTorch (pip install torch): the language model around the Swap-FFN is PyTorch")
import torch.nn.functional as F

from model import LM, PRESETS, LMConfig, preset


def stdlib_text(max_bytes: int) -> bytes:
    """Up to max_bytes of the standard library's .py files (the folder of os.py, without installed packages),
    in sorted path order, so the same interpreter always gives the same text."""
    root = os.path.dirname(os.__file__)
    parts, size = [], 0
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in ("site-packages", "dist-packages", "__pycache__"))
        for name in sorted(f for f in files if f.endswith(".py")):
            with open(os.path.join(folder, name), "rb") as f:
                parts.append(f.read(max_bytes - size))
            size += len(parts[-1])
            if size >= max_bytes:
                return b"".join(parts)
    if not size:
        raise RuntimeError(f"no .py files under {root}: this Python has no standard library sources to train on")
    return b"".join(parts)


def sample(data: torch.Tensor, batch: int, seq: int, generator: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    """batch random windows of data: inputs [batch, seq] and the next bytes [batch, seq] (int64)."""
    starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=generator)
    windows = torch.stack([data[s:s + seq + 1] for s in starts.tolist()]).long()
    return windows[:, :-1], windows[:, 1:]


def train(config: Union[str, LMConfig] = "tiny", steps: int = 300, batch: int = 16, seq: int = 128, lr: float = 3e-3,
          seed: int = 0, device: Optional[str] = None, data_bytes: int = 8 << 20, eval_batches: int = 4,
          bptt: Optional[int] = 1, checkpoint_ffn: bool = False,
          log: Callable[[str], None] = print) -> Tuple[LM, List[float]]:
    """Trains an LM (a preset name or an LMConfig) for `steps` AdamW steps of `batch` windows of `seq` bytes,
    with linear warm-up and cosine decay; returns the model (on the CPU) and the training losses (nats per
    byte). The last tenth of the text is held out: `eval_batches` windows of it give a validation loss.
    bptt and checkpoint_ffn: as LM.forward's. A non-finite gradient stops training with a RuntimeError."""
    cfg = preset(config) if isinstance(config, str) else config
    if not 1 <= seq <= cfg.max_seq:
        raise ValueError(f"seq = {seq} must be in [1, {cfg.max_seq}] (the LM's max_seq)")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    text = torch.frombuffer(bytearray(stdlib_text(data_bytes)), dtype=torch.uint8)
    split = text.numel() * 9 // 10
    train_data, val_data = text[:split], text[split:]
    if val_data.numel() <= seq + 1:
        raise ValueError(f"{text.numel()} bytes of text leave too little for windows of {seq} bytes")

    torch.manual_seed(seed)  # the initial weights, the Swap-FFNs' included
    gen = torch.Generator().manual_seed(seed)  # the windows
    model = LM(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    warmup = max(1, min(20, steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warmup) * (0.55 + 0.45 * math.cos(math.pi * min(i, steps) / steps)))
    n_params = sum(p.numel() for p in model.parameters())
    log(f"LM: {cfg.n_layers} blocks, d_model {cfg.d_model}, {n_params / 1e6:.2f} M parameters; {text.numel()} bytes "
        f"of the standard library; {steps} steps of {batch} x {seq} bytes on {dev}")
    losses, t0 = [], time.perf_counter()
    for step in range(steps):
        x, y = (t.to(dev) for t in sample(train_data, batch, seq, gen))
        loss = F.cross_entropy(model(x, bptt=bptt, checkpoint_ffn=checkpoint_ffn).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step == steps - 1 or step % max(1, steps // 20) == 0:
            secs = time.perf_counter() - t0
            log(f"step {step:4d}: loss {losses[-1]:.3f} ({losses[-1] / math.log(2):.2f} bits/byte), "
                f"{(step + 1) * batch * seq / secs:.0f} tok/s")
    if eval_batches:
        model.eval()
        with torch.no_grad():
            val = [F.cross_entropy(model(x.to(dev)).flatten(0, 1), y.to(dev).flatten()).item()
                   for x, y in (sample(val_data, batch, seq, gen) for _ in range(eval_batches))]
        log(f"validation: {sum(val) / len(val) / math.log(2):.2f} bits/byte over {eval_batches} batches")
    return model.cpu(), losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="tiny", choices=PRESETS, help="LM preset (default: tiny)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16, help="windows per step")
    ap.add_argument("--seq", type=int, default=128, help="bytes per window (at most the LM's max_seq)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if there is one)")
    ap.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's choice; the tiny LM's ops are "
                    "small, and on a busy 2-core machine 1 thread trained 10x faster than 2)")
    ap.add_argument("--data-mb", type=float, default=8, help="MB of standard-library source to read")
    ap.add_argument("--eval-batches", type=int, default=4, help="held-out batches for the validation loss")
    ap.add_argument("--bptt", type=int, default=1,
                    help="tokens the gradient flows through the Swap-FFN's state (0: all; see model.LM.forward)")
    ap.add_argument("--checkpoint", action=argparse.BooleanOptionalAction, default=None,
                    help="recompute each Swap-FFN step in the backward pass (default: on for --config default)")
    ap.add_argument("--out", required=True, help="model directory to write (lm.pt, ffn<i>.safetensors)")
    a = ap.parse_args()
    for name in ("steps", "batch", "seq"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if a.bptt < 0:
        ap.error("--bptt must be at least 0 (0: through every token)")
    if a.threads is not None:
        if a.threads < 1:
            ap.error("--threads must be at least 1")
        torch.set_num_threads(a.threads)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if torch.device(device).type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 for training speed; the saved weights are bf16 anyway
    model, _ = train(a.config, steps=a.steps, batch=a.batch, seq=a.seq, lr=a.lr, seed=a.seed, device=device,
                     data_bytes=int(a.data_mb * (1 << 20)), eval_batches=a.eval_batches, bptt=a.bptt or None,
                     checkpoint_ffn=a.checkpoint if a.checkpoint is not None else a.config == "default")
    model.save(a.out)
    print(f"saved {a.out}: serve it with examples/lm/serve.py --model {a.out}")


if __name__ == "__main__":
    main()

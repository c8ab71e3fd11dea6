#!/usr/bin/env python3
"""Times the decode step of the whole language model (model.py): served with the engines, as serve.py runs it,
against the same model with PyTorch's Swap-FFN modules, on the same GPU in one run; prints a markdown table and
writes JSON (--json).

    python examples/lm/bench.py --random default --json lm-bench.json         # B = 1, 8, 64 on a Hopper GPU
    python examples/lm/bench.py --model lm-default --backend fused,fused-fp8 --batches 1,64
    python examples/lm/bench.py --random tiny --batches 1,2 --steps 2          # CPU: checks it runs, times nothing

At each batch size B, B sequences (serve.py's default prompts, cut to one length) are prefilled, then decode
greedily on the device, each step feeding back the tokens the last one chose:

- served: serve.py's Server (an engine and a StatePool per block; the prompts through Server.add, then
  Server.step); its decode step's CUDA graph (serve.StepGraph: embedding, attention, engine steps, head, argmax)
  replayed. Also timed: Server.step itself, host work and the wait for the tokens included (the "loop" row),
  and a graph of the engine steps of every block alone at the same B and slots (the Swap-FFN share; its
  input is random rows of unit scale, as the normed residual is).
- PyTorch: the same weights and the same decode step (serve.decode_step) with swapffn.torch.SwapFFN, the
  training path's module, as every block's Swap-FFN (--torch-dtype, bf16 by default as the engine's weights),
  the whole step captured as a CUDA graph; then the same with the modules under torch.compile (a failure is
  reported as "n/a: why").

Each path: --warmup steps, then --repeats runs of --steps steps between CUDA events; the median run's time per
step. On a machine without a GPU (or --backend reference) it runs the reference backend and eager PyTorch:
that checks the script, it is not a performance measurement.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

try:
    import torch
except ImportError:
    sys.exit("bench.py needs PyTorch (pip install torch): the language model around the engines is PyTorch")

import swapffn
import serve
from model import LM, PRESETS, KVCache, ModelError, ffn_file
from swapffn.kernel_profile import kernel_table
from swapffn.torch import SwapFFN

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# Every row gets the same number of prompt tokens, so that the PyTorch model prefills them in lockstep.
PROMPT_LEN = min(len(p.encode()) for p in serve.DEFAULT_PROMPTS)
SHARE_METHOD = ("Swap-FFN share: every block's engine step alone (a CUDA graph on a GPU; the same B, slots and "
                "buffers), timed as the step is, over the served step's time")
TARGETS = ((1, 3.0), (64, 1.5))  # (B, served tok/s over the best PyTorch path's): issue 57
SHARE_TARGET = 0.85


class Decoder:
    """Rows decoding greedily on the device, with no host synchronisation: each step() feeds back the tokens
    the last run chose, one position on, and runs the decode step again. inputs [3, bucket] (tokens,
    positions, slots) are the step's static inputs, next_tokens [bucket] its greedy choice; the first n rows
    are sequences (the rest padding). run: a CUDA graph's replay, or the step run eagerly on the CPU."""

    def __init__(self, inputs: torch.Tensor, next_tokens: torch.Tensor, n: int, run: Callable[[], None]) -> None:
        self.inputs, self.next_tokens, self.n, self.run = inputs, next_tokens, n, run

    @classmethod
    def capture(cls, step: Callable[[torch.Tensor], torch.Tensor], inputs: torch.Tensor, graphs: bool) -> "Decoder":
        """Runs step(inputs) once (a real step: on a GPU the capture's warm-up), captured as a graph or not."""
        if graphs:
            return cls.of_graph(serve.StepGraph(step, inputs), inputs.shape[1])
        next_tokens = torch.empty(inputs.shape[1], dtype=torch.int64)

        def run() -> None:
            next_tokens.copy_(step(inputs).argmax(-1))

        run()
        return cls(inputs, next_tokens, inputs.shape[1], run)

    @classmethod
    def of_graph(cls, g: serve.StepGraph, n: int) -> "Decoder":
        return cls(g.inputs, g.next_tokens, n, g.replay)

    def step(self) -> None:
        self.inputs[0, :self.n].copy_(self.next_tokens[:self.n])
        self.inputs[1, :self.n].add_(1)
        self.run()


class TorchFFN:
    """Every block's Swap-FFN as swapffn.torch.SwapFFN (serve.decode_step's ffn). Its state is functional, so
    each block's State is held here and overwritten in place by each step's (a graph's replays carry it):
    row i is the sequence in slot i, which is how the bench fills the rows (slots 0..B-1, in order)."""

    def __init__(self, modules: Sequence[SwapFFN], batch: int, compiled: bool) -> None:
        self.forward = [torch.compile(m, dynamic=False) if compiled else m for m in modules]
        self.states = [m.init_state(batch, dtype=m.router_w.dtype) for m in modules]

    def __call__(self, layer: int, h: torch.Tensor, slot_ids: torch.Tensor) -> torch.Tensor:
        delta, state = self.forward[layer](h, self.states[layer])
        self.states[layer].ram.copy_(state.ram)
        self.states[layer].stream_map.copy_(state.stream_map)
        return delta


def timed(run: Callable[[], None], cuda: bool, warmup: int, steps: int, repeats: int) -> List[float]:
    """ms per call of run(), one number per run of `steps` calls: CUDA events on a GPU, the host clock on the
    CPU."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / steps)
        else:
            t0 = time.perf_counter()
            for _ in range(steps):
                run()
            times.append((time.perf_counter() - t0) * 1e3 / steps)
    return times


def prompts(batch: int) -> List[bytes]:
    return [serve.DEFAULT_PROMPTS[i % len(serve.DEFAULT_PROMPTS)].encode()[:PROMPT_LEN] for i in range(batch)]


def served(path: str, backend: str, batch: int, a: argparse.Namespace) -> Dict:
    """The served model's rows at one batch size: its decode step (graph replays), Server.step, the engines
    alone."""
    server = serve.Server(path, backend=backend, slots=batch, device=a.device, threads=a.threads)
    cuda = server.cuda_graphs
    new_tokens = server.lm.cfg.max_seq - PROMPT_LEN + 1  # as many as fit: no request leaves during the bench
    reqs = [server.add(p, new_tokens) for p in prompts(batch)]
    server.step()  # on a GPU, captures the step's graph at this bucket
    server.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        server.step()
    server.synchronize()
    loop_ms = (time.perf_counter() - t0) * 1e3 / a.steps
    with torch.no_grad():
        if cuda:
            g = server.graph
            assert g is not None, "the served step's graph went stale during the bench (the engines' buffers moved)"
            dec = Decoder.of_graph(g, batch)
        else:
            dec = Decoder.capture(server.model_step, serve.step_inputs(reqs), graphs=False)
        step_ms = timed(dec.step, cuda, a.warmup, a.steps, a.repeats)
        if a.profile and cuda:
            print(kernel_table(lambda: [dec.step() for _ in range(a.steps)], a.steps,
                               f"served {server.backend}, B = {batch}, the whole decode step"), flush=True)
        x = torch.randn(dec.inputs.shape[1], server.lm.cfg.d_model, generator=torch.Generator().manual_seed(0))
        x, ids = x.to(server.device), dec.inputs[2].to(torch.int32)

        def engines() -> List[torch.Tensor]:
            return [server.ffn_step(layer, x, ids) for layer in range(len(server.engines))]

        run = serve.capture(engines)[0].replay if cuda else engines
        ffn_ms = timed(run, cuda, a.warmup, a.steps, a.repeats)
    ms, ffn = statistics.median(step_ms), statistics.median(ffn_ms)
    return {"batch": batch, "path": "served", "backend": server.backend, "mode": "graph" if cuda else "eager",
            "bucket": dec.inputs.shape[1],
            "ms_per_step": ms, "tok_per_s": batch * 1e3 / ms, "runs_ms": step_ms, "ffn_ms_per_step": ffn,
            "ffn_share": ffn / ms, "loop_ms_per_step": loop_ms, "loop_tok_per_s": batch * 1e3 / loop_ms}


def pytorch(lm: LM, batch: int, compiled: bool, cuda: bool, a: argparse.Namespace) -> Dict:
    """The PyTorch model's row at one batch size: the prompts prefilled token by token through the decode
    step, then its graph replayed (eager on the CPU)."""
    device = lm.tok_emb.weight.device
    cache = KVCache(lm.cfg, batch, device)
    if compiled:
        torch.compiler.reset()  # each batch size compiles afresh: no cache size limit reached
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    ffn = TorchFFN(lm.ffns, batch, compiled)
    tokens = torch.tensor([list(p) for p in prompts(batch)], dtype=torch.int64, device=device)  # [B, T]
    inputs = torch.stack([tokens[:, 0], torch.zeros_like(tokens[:, 0]), torch.arange(batch, device=device)])
    with torch.no_grad():
        dec = Decoder.capture(lambda inp: serve.decode_step(lm, cache, inp, ffn), inputs, graphs=cuda)
        setup_s = time.perf_counter() - t0
        for t in range(1, PROMPT_LEN):
            inputs[0].copy_(tokens[:, t])
            inputs[1].fill_(t)
            dec.run()
        step_ms = timed(dec.step, cuda, a.warmup, a.steps, a.repeats)
    ms = statistics.median(step_ms)
    row = {"batch": batch, "path": pytorch_path(compiled, cuda), "ms_per_step": ms, "tok_per_s": batch * 1e3 / ms,
           "runs_ms": step_ms, "setup_s": setup_s}
    if cuda:
        row["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return row


def pytorch_path(compiled: bool, cuda: bool) -> str:
    return ("pytorch-compile" if compiled else "pytorch") + ("-graph" if cuda else "-eager")


def failed(batch: int, path: str, e: BaseException) -> Dict:
    """The row of a path that could not run: the exception's first line."""
    lines = str(e).strip().splitlines()
    return {"batch": batch, "path": path, "error": f"n/a: {type(e).__name__}: {lines[0] if lines else ''}"[:300]}


def commit() -> str:
    """$SWAPFFN_COMMIT, else the checkout's (a device machine's copy of the tree may have no .git)."""
    if os.environ.get("SWAPFFN_COMMIT"):
        return os.environ["SWAPFFN_COMMIT"]
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        sha = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git; set SWAPFFN_COMMIT)"


def ratios(rows: List[Dict]) -> List[Dict]:
    """Each served backend's tok/s over each PyTorch path's that ran, at each batch size."""
    out = []
    for s in (r for r in rows if r["path"] == "served"):
        for p in (r for r in rows if r["path"].startswith("pytorch") and r["batch"] == s["batch"] and "error" not in r):
            out.append({"batch": s["batch"], "backend": s["backend"], "vs": p["path"],
                        "speedup": p["ms_per_step"] / s["ms_per_step"]})
    return out


def targets(rows: List[Dict], speedups: List[Dict]) -> List[Dict]:
    """Issue 57's targets where this run measured them: the speed-up over the best PyTorch path at B = 1 and
    64, and the Swap-FFN share of the served step at every B."""
    out = []
    for batch, want in TARGETS:
        for s in (r for r in rows if r["path"] == "served" and r["batch"] == batch):
            got = [r["speedup"] for r in speedups if r["batch"] == batch and r["backend"] == s["backend"]]
            what = f"{s['backend']} tok/s over the best PyTorch path's, B = {batch}"
            if got:
                out.append({"what": what, "value": min(got), "target": want, "met": min(got) >= want})
            else:
                out.append({"what": what + " (no PyTorch path ran)", "value": None, "target": want, "met": False})
    for s in (r for r in rows if r["path"] == "served"):
        out.append({"what": f"Swap-FFN share of the {s['backend']} step, B = {s['batch']}", "value": s["ffn_share"],
                    "target": SHARE_TARGET, "met": s["ffn_share"] >= SHARE_TARGET})
    return out


TABLE_HEAD = ("| B | path | ms/step (per token) | tok/s | served is | Swap-FFN share |\n"
              "|---:|---|---:|---:|---|---:|")


def table_rows(rows: List[Dict], speedups: List[Dict]) -> List[str]:
    """The markdown rows of `rows`: a served row gives two (its graph, its Server.step loop)."""
    lines = []
    for r in rows:
        b = r["batch"]
        if "error" in r:
            lines.append(f"| {b} | {r['path']} | {r['error']} | | | |")
        elif r["path"] == "served":
            lines.append(f"| {b} | served {r['backend']}, {r['mode']} | {r['ms_per_step']:.4g} | "
                         f"{r['tok_per_s']:,.1f} | | {100 * r['ffn_share']:.1f}% ({r['ffn_ms_per_step']:.4g} ms) |")
            lines.append(f"| {b} | served {r['backend']}, Server.step loop | {r['loop_ms_per_step']:.4g} | "
                         f"{r['loop_tok_per_s']:,.1f} | | |")
        else:
            vs = ", ".join(f"{s['backend']} {s['speedup']:.2f}x" for s in speedups
                           if s["batch"] == b and s["vs"] == r["path"])
            lines.append(f"| {b} | {r['path']} | {r['ms_per_step']:.4g} | {r['tok_per_s']:,.1f} | {vs} | |")
    return lines


def batch_list(text: str) -> List[int]:
    try:
        batches = [int(b) for b in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': expected comma-separated integers, e.g. 1,8,64") from None
    for b in batches:
        if not 1 <= b <= serve.MAX_BUCKET:
            raise argparse.ArgumentTypeError(f"batch size {b}: must be in [1, {serve.MAX_BUCKET}] (one CUDA graph)")
    if len(set(batches)) != len(batches):
        raise argparse.ArgumentTypeError(f"'{text}': a batch size is repeated")
    return batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="model directory written by train.py")
    src.add_argument("--random", choices=PRESETS, help="an untrained LM of this preset (default: the default "
                     "Swap-FFN shape)")
    ap.add_argument("--seed", type=int, default=1, help="seed of --random")
    ap.add_argument("--backend", default=swapffn.AUTO, help="served backends, comma-separated (auto: fused on a "
                    "Hopper GPU, else the reference)")
    ap.add_argument("--batches", type=batch_list, default=[1, 8, 64], help="batch sizes (default 1,8,64)")
    ap.add_argument("--steps", type=int, default=10, help="decode steps per timed run")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per path (their median is reported)")
    ap.add_argument("--warmup", type=int, default=3, help="decode steps before the timed runs")
    ap.add_argument("--torch-dtype", choices=sorted(DTYPES), default="bf16", help="the PyTorch modules' dtype")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile path")
    ap.add_argument("--device", type=int, default=0, help="CUDA device")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads of the reference backend (0: all)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--profile", action="store_true", help="also print the kernels of the served decode step at "
                    "each B (torch.profiler; GPU only): where the glue's time goes")
    a = ap.parse_args()
    for name in ("steps", "repeats"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if a.warmup < 0:
        ap.error("--warmup must be at least 0")
    backends = a.backend.split(",")
    if len(set(backends)) != len(backends) or not all(backends):
        ap.error(f"--backend '{a.backend}': expected distinct backend names, comma-separated")
    try:
        path = a.model or serve.random_model(a.random, a.seed)
        on_host = {swapffn.Engine.load(os.path.join(path, ffn_file(0)), backend=b, device=a.device,
                                       threads=a.threads).info()["on_host"] for b in backends}
        if len(on_host) > 1:
            raise swapffn.Error(f"--backend {a.backend}: some run on the host, some on the GPU; time them apart")
        cuda = not on_host.pop()
        device = torch.device("cuda", a.device) if cuda else torch.device("cpu")
        lm = LM.load(path, device=device).eval()
    except (ModelError, swapffn.Error) as e:
        sys.exit(f"bench.py: {e}")
    lm.ffns.to(DTYPES[a.torch_dtype])
    # Positions each sequence takes: the prompt, then (served) the step that captures the graph, the
    # Server.step loop, the warm-up, the timed steps and the profiled ones.
    positions = PROMPT_LEN + 1 + a.steps + a.warmup + a.repeats * a.steps + a.steps * a.profile
    if positions > lm.cfg.max_seq:
        sys.exit(f"bench.py: {positions} positions per sequence (a prompt of {PROMPT_LEN}, then 1 + --steps + "
                 f"--warmup + --repeats x --steps decode steps, + --steps with --profile) exceed the KV cache's "
                 f"{lm.cfg.max_seq}")
    if cuda:
        torch.cuda.set_device(device)
    device_name = torch.cuda.get_device_name(device) if cuda else f"cpu ({platform.machine()})"
    compiles = cuda and not a.no_compile
    print(f"{device_name}, commit {commit()}, torch {torch.__version__}: LM of {lm.cfg.n_layers} blocks, d_model "
          f"{lm.cfg.d_model}; served ({a.backend}) vs PyTorch's SwapFFN modules ({a.torch_dtype}"
          f"{', also compiled' if compiles else ''}); median of {a.repeats} x {a.steps} steps after {a.warmup}")
    if not cuda:
        print("CPU mode (reference backend, eager PyTorch, no torch.compile" + (", no --profile" if a.profile else "")
              + "): this checks the script, it is not a performance measurement")
    print(TABLE_HEAD, flush=True)
    rows: List[Dict] = []
    compile_failure: Optional[str] = None
    for batch in a.batches:
        new = []
        # PyTorch first, on the cooler board: a GPU that heats up over the run can only favour it.
        for compiled in [False] + [True] * compiles:
            what = pytorch_path(compiled, cuda)
            if compiled and compile_failure:
                new.append({"batch": batch, "path": what, "error": f"n/a: skipped, {compile_failure}"})
                continue
            try:
                new.append(pytorch(lm, batch, compiled, cuda, a))
            except Exception as e:  # a path that cannot run here is reported, the others go on
                new.append(failed(batch, what, e))
                if compiled:
                    compile_failure = f"failed at B = {batch}"
            if cuda:
                torch.cuda.empty_cache()
        for backend in backends:
            try:
                new.append(served(path, backend, batch, a))
            except (ModelError, serve.ServeError, swapffn.Error) as e:
                sys.exit(f"bench.py: {e}")
        rows += new
        print("\n".join(table_rows(new, ratios(new))), flush=True)
    speedups = ratios(rows)
    print(SHARE_METHOD + ". served is: the served step's tok/s over the row's")
    goals = targets(rows, speedups) if cuda else []
    for t in goals:
        value = "n/a" if t["value"] is None else f"{t['value']:.2f}"
        print(f"target: {t['what']} = {value} (>= {t['target']}): {'met' if t['met'] else 'NOT met'}")
    if a.json:
        result = {
            "bench": "examples/lm/bench.py", "performance_measurement": cuda, "device": device_name,
            "commit": commit(), "torch": torch.__version__, "swapffn": swapffn.__version__,
            "model": a.model or f"random {a.random}, seed {a.seed}", "lm": lm.cfg.shape(), "ffn": lm.cfg.ffn,
            "settings": {"backends": backends, "batches": a.batches, "steps": a.steps, "repeats": a.repeats,
                         "warmup": a.warmup, "prompt_tokens": PROMPT_LEN, "torch_dtype": a.torch_dtype,
                         "compile": compiles},
            "share_method": SHARE_METHOD, "rows": rows, "speedups": speedups, "targets": goals,
        }
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {a.json}")

if __name__ == "__main__":
    main()

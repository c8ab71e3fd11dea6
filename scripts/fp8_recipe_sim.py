#!/usr/bin/env python3
"""How accurate would a coarser fp8 recipe be? Simulates e4m3 rounding recipes of the FFN on the SPEC
model (spec_oracle.forward, NumPy, fp32) and measures each as SPEC section 5 judges an fp8 path: the
recipe decodes free-running, the fp32 reference follows its decision trace, and the check counts
decisions that disagree beyond tau = 0.25 (with the largest such margin) and the relative L2 errors of delta (<= 0.06) and of the
final RAM (<= 0.08), for runs of at most 4 tokens. It also prints the free-running decision flip
rate per token against the fp32 reference's own decisions (a flip: the gate differs, or both open
and the slot differs).

Recipes (operands: the normed rows x, rounded to bf16 first as the engine does, the SwiGLU output
u, and w1, w3, w2; products and accumulation in fp32, the scales applied exactly):
  blocks  the project's recipe: 1x128 activation blocks, 128x128 weight blocks
  rows    one scale per activation row and per weight output channel
  tensor  one scale per tensor, from its amax at each call (an activation's then depends on the
          other sequences of the batch: no batch invariance)
  static  one scale per tensor; activation scales calibrated once (the amax over a calibration run
          on other inputs), values beyond them saturate
A scale is amax / 448 (1 where amax is 0); codes round to nearest even and saturate at +-448.

Why it exists: cuBLASLt's fp8 GEMMs are faster with coarser scales (`swapffn bench
--fp8-headroom`); this says what each scaling would cost in accuracy before anyone builds it.

Usage: fp8_recipe_sim.py --model M.safetensors [--batch 2] [--tokens 4] [--seed 3]
                         [--recipes blocks,rows,tensor,static]
       fp8_recipe_sim.py --selftest
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spec_oracle as so  # noqa: E402

E4M3_MAX = 448.0
BLOCK = 128
TAU, DELTA_TOL, RAM_TOL = 0.25, 0.06, 0.08  # SPEC section 5, fp8 paths


def round_e4m3(v):
    """float32 values to the e4m3 grid (OCP E4M3FN): nearest even, saturated at +-448."""
    _, e = np.frexp(np.abs(v))  # |v| = m 2^e, m in [0.5, 1): exponent e - 1, subnormal below 2^-6
    quantum = np.ldexp(np.float32(1), np.maximum(e - 1, -6) - 3).astype(np.float32)
    return np.clip(np.rint(v / quantum) * quantum, -E4M3_MAX, E4M3_MAX).astype(np.float32)


def scale_of(amax):
    s = (np.asarray(amax, np.float32) / np.float32(E4M3_MAX)).astype(np.float32)
    return np.where(s > 0, s, np.float32(1)).astype(np.float32)


def quantise(a, amax):
    """a's values through e4m3 with scales amax / 448 (amax broadcast against a), dequantised."""
    s = scale_of(amax)
    return (round_e4m3((a / s).astype(np.float32)) * s).astype(np.float32)


def quantise_weight(w, recipe):
    n, k = w.shape
    if recipe == "blocks":
        blocks = np.abs(w).reshape(n // BLOCK, BLOCK, k // BLOCK, BLOCK).max(axis=(1, 3))
        amax = np.repeat(np.repeat(blocks, BLOCK, axis=0), BLOCK, axis=1)
    elif recipe == "rows":
        amax = np.abs(w).max(axis=1, keepdims=True)
    else:
        amax = np.abs(w).max()
    return quantise(w, amax)


def quantise_activation(a, recipe, static_amax=None):
    n, k = a.shape
    if recipe == "blocks":
        amax = np.repeat(np.abs(a).reshape(n, k // BLOCK, BLOCK).max(axis=2), BLOCK, axis=1)
    elif recipe == "rows":
        amax = np.abs(a).max(axis=1, keepdims=True)
    elif recipe == "tensor":
        amax = np.abs(a).max()
    else:
        amax = static_amax
    return quantise(a, amax)


def silu(t):
    with np.errstate(over="ignore"):
        return (t / (1 + np.exp(-t))).astype(np.float32)


def recipe_ffn(model, recipe, static=None):
    p = model.p
    w1, w3, w2 = (quantise_weight(p[k].astype(np.float32), recipe) for k in ("w1.weight", "w3.weight", "w2.weight"))

    def ffn(n):
        x = quantise_activation(so.round_to_bf16(n).astype(np.float32), recipe, static["x"] if static else None)
        u = silu(x @ w1.T) * (x @ w3.T)
        return quantise_activation(u, recipe, static["u"] if static else None) @ w2.T

    return ffn


def calibrate(model, x, ram0, map0):
    """The largest |x| and |u| the exact FFN meets on these inputs: the static recipe's amaxes."""
    p, seen = model.p, {"x": 0.0, "u": 0.0}

    def ffn(n):
        x_ = so.round_to_bf16(n).astype(np.float32)
        u = silu(x_ @ p["w1.weight"].T) * (x_ @ p["w3.weight"].T)
        seen["x"] = max(seen["x"], float(np.abs(x_).max()))
        seen["u"] = max(seen["u"], float(np.abs(u).max()))
        return u @ p["w2.weight"].T

    so.forward(model, x, ram0, map0, ffn=ffn)
    return {k: np.float32(v) for k, v in seen.items()}


def flips_per_token(a, b):
    ga, gb, sa, sb = a["gate"].astype(bool), b["gate"].astype(bool), a["slot"], b["slot"]
    flip = (ga != gb) | (ga & gb & (sa != sb))  # [T, E, B, C]
    return flip.reshape(flip.shape[0], -1).mean(axis=1)


def inputs(cfg, batch, tokens, seed):
    rng = np.random.default_rng(seed)
    D, C = cfg["d_model"], cfg["core_count"]
    x = rng.standard_normal((tokens, batch, D)).astype(np.float32)
    return x, np.zeros((batch, C, 4, D), np.float32), np.full((batch, C), so.IDENTITY_MAP, np.uint8)


def selftest():
    """The e4m3 grid, each recipe's scale layout, and the forward hook; returns 0 or raises."""
    v = np.array([448, 464, 1e6, 1.0625, 1.1875, 2**-9, 2**-10, 1.5 * 2**-10, -3.3, 0, 248, -2**-6 * 1.0625],
                 np.float32)
    want = np.array([448, 448, 448, 1, 1.25, 2**-9, 0, 2**-9, -3.25, 0, 256, -2**-6], np.float32)
    assert np.array_equal(round_e4m3(v), want), round_e4m3(v)
    # One large 128 x 128 block (weights) or row (activations): the finer recipes keep the rest to
    # e4m3's relative precision (2^-4), the coarser ones flush it.
    w = np.full((256, 256), 0.01, np.float32)
    w[:128, :128] = 1e5
    def rel(q, rows, cols):  # the largest relative error of the 0.01 entries in q[rows, cols]
        return float(np.abs(q[rows, cols] - 0.01).max() / 0.01)

    top, bottom, right = slice(0, 128), slice(128, 256), slice(128, 256)
    qb, qr, qt = (quantise_weight(w, r) for r in ("blocks", "rows", "tensor"))
    assert rel(qb, top, right) <= 2**-4 and rel(qb, bottom, right) <= 2**-4, "blocks: one scale per 128 x 128"
    assert rel(qr, bottom, right) <= 2**-4 and 0.5 < rel(qr, top, right), "rows: one scale per output channel"
    assert rel(qt, bottom, right) > 0.5, "tensor: one scale"
    a = np.full((4, 256), 0.01, np.float32)
    a[0, :128] = 1e5
    qb, qr, qt = (quantise_activation(a, r) for r in ("blocks", "rows", "tensor"))
    assert rel(qb, slice(0, 1), right) <= 2**-4 and rel(qb, slice(1, 4), top) <= 2**-4, "blocks: 1 x 128"
    assert rel(qr, slice(1, 4), top) <= 2**-4 and 0.5 < rel(qr, slice(0, 1), right), "rows: one scale per row"
    assert rel(qt, slice(1, 4), top) > 0.5, "tensor: one scale"
    assert np.array_equal(quantise_activation(a, "static", np.float32(0.01))[1:], a[1:]), "static: a fixed scale"
    assert quantise_activation(a, "static", np.float32(0.01))[0, 0] == np.float32(0.01), "static: saturates"
    # The hook: SPEC's FFN passed as a function gives the same bits as no hook.
    cfg = {"d_model": 128, "d_ff": 256, "core_count": 4, "n_events": 2, "k_ffn": 2, "d_router": 8, "collapse_k": 2,
           "collapse_r": 4, "core_embed_dim": 4, "norm_eps": 1e-6, "ffn_residual": True, "collapse_silu": True}
    model = so.Model(cfg, {k: so.round_to_bf16(v) for k, v in so.random_params(cfg, np.random.default_rng(1)).items()},
                     np.float32)
    p = model.p
    x, ram0, map0 = inputs(cfg, 2, 2, 5)
    plain = so.forward(model, x, ram0, map0)
    hooked = so.forward(model, x, ram0, map0, ffn=lambda n: (so._silu(n @ p["w1.weight"].T) * (n @ p["w3.weight"].T))
                        @ p["w2.weight"].T)
    assert np.array_equal(plain["delta"], hooked["delta"]) and np.array_equal(plain["ram"], hooked["ram"]), "ffn hook"
    blocks = so.forward(model, x, ram0, map0, ffn=recipe_ffn(model, "blocks"))
    err = so._rel_l2(plain["delta"], blocks["delta"])
    assert 1e-4 < err < 0.1, f"the blocks recipe's delta error {err} (rounding must show, and stay small)"
    print("fp8_recipe_sim selftest: PASS")
    return 0


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if argv == ["--selftest"]:
        return selftest()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--recipes", default="blocks,rows,tensor,static")
    a = ap.parse_args(argv)
    recipes = a.recipes.split(",")
    bad = [r for r in recipes if r not in ("blocks", "rows", "tensor", "static")]
    if bad or a.batch < 1 or a.tokens < 1:
        ap.error(f"unknown recipe(s) {bad}" if bad else "--batch and --tokens must be >= 1")
    try:
        model = so.load_model(a.model, dtype=np.float32)
    except (OSError, so.InputError) as e:
        print(f"fp8_recipe_sim: {e}", file=sys.stderr)
        return 1
    cfg = model.cfg
    if cfg["d_model"] % BLOCK or cfg["d_ff"] % BLOCK:
        ap.error(f"d_model and d_ff must be multiples of {BLOCK}")
    x, ram0, map0 = inputs(cfg, a.batch, a.tokens, a.seed)
    t0 = time.time()
    ref = so.forward(model, x, ram0, map0)
    print(f"model {a.model}: B = {a.batch}, {a.tokens} tokens, seed {a.seed}; fp32 reference {time.time() - t0:.0f} s")
    static = None
    if "static" in recipes:
        static = calibrate(model, *inputs(cfg, 1, 2, a.seed + 1000))
        print(f"static scales calibrated on other inputs (B = 1, 2 tokens): amax x {static['x']:.4g}, u {static['u']:.4g}")
    print(f"{'recipe':8s} {'beyond tau':>10s} {'delta err':>10s} {'RAM err':>9s} {'agrees':>7s}  flip rate per token (vs fp32)")
    for recipe in recipes:
        t0 = time.time()
        mine = so.forward(model, x, ram0, map0, ffn=recipe_ffn(model, recipe, static if recipe == "static" else None))
        follow = so.forward(model, x, ram0, map0, trace=(mine["gate"], mine["slot"]), tau=TAU)
        failures = follow["decisions"].failures
        beyond = f"{len(failures)}" + (f" ({max(f[-1] for f in failures):.2f})" if failures else "")
        d_err = so._rel_l2(follow["delta"], mine["delta"])
        r_err = so._rel_l2(follow["ram"], mine["ram"])
        ok = not failures and d_err <= DELTA_TOL and (a.tokens > 4 or r_err <= RAM_TOL)
        flips = " ".join(f"{100 * f:.1f}%" for f in flips_per_token(mine, ref))
        print(f"{recipe:8s} {beyond:>10s} {d_err:10.4f} {r_err:9.4f} {'yes' if ok else 'NO':>7s}  {flips}"
              f"  ({time.time() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

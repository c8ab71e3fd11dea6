#!/usr/bin/env python3
"""Independent NumPy implementation of SPEC.md (v1) that judges a `swapffn run --dump` file.

Written from SPEC.md alone (not from the C++ reference), so that the reference is checked against
the contract rather than against itself. Everything is computed in float64 from the bf16 parameters.
The one place where precision is part of the semantics is the RAM write: the reference keeps h in
fp32 and rounds it to bf16, so the oracle rounds its fp64 h to fp32 (nearest-even) and then to bf16
(nearest-even on the fp32 bits).

The oracle follows the dump's own decision trace (SPEC section 5): at every event it applies the
dump's gate and logical slot, computes its own decision and margin, and fails a disagreement only
where its margin exceeds tau. It then compares delta (relative L2 over all tokens), the final RAM
(each element equal or one bf16 ulp apart, such near-tie flips rare) and the final stream map
(exactly).

Usage:
  spec_oracle.py --model M.safetensors --dump D.safetensors [--tau 1e-3] [--rtol 1e-4]
  spec_oracle.py --selftest
Exit status: 0 accepted, 1 rejected (reason printed; a malformed file is rejected too).
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

IDENTITY_MAP = 0xE4

# ---------------------------------------------------------------------------------------------
# safetensors (parsed by hand: u64 LE header length, JSON header, data)

_ELEM = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "U8": 1}
_NP = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "U8": "u1"}
_MAX_HEADER = 100 * 1024 * 1024


class InputError(Exception):
    """A file that is not a well-formed input."""


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(values):
    """Round-to-nearest-even of float32 values to bf16, on the float32 bits (finite inputs)."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def round_to_bf16(values):
    """fp64/fp32 -> fp32 (nearest-even) -> bf16 (nearest-even), returned widened to float64."""
    f32 = np.asarray(values).astype(np.float32)
    return bf16_bits_to_f32(f32_to_bf16_bits(f32)).astype(np.float64).reshape(f32.shape)


def parse_safetensors(blob, what):
    """Returns ({name: (dtype, ndarray)}, metadata). BF16 tensors come back as float32 (exact)."""
    if len(blob) < 8:
        raise InputError(f"{what}: file too short for a safetensors header ({len(blob)} bytes)")
    (hlen,) = struct.unpack("<Q", blob[:8])
    if hlen > _MAX_HEADER or 8 + hlen > len(blob):
        raise InputError(f"{what}: header length {hlen} runs past the end of the file ({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{what}: malformed JSON header: {e}") from None
    if not isinstance(header, dict):
        raise InputError(f"{what}: header is not a JSON object")
    data = memoryview(blob)[8 + hlen:]
    metadata = header.pop("__metadata__", {}) or {}
    tensors, spans = {}, []
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], [int(s) for s in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{what}: tensor '{name}' has a malformed header entry") from None
        if dtype not in _ELEM:
            raise InputError(f"{what}: tensor '{name}' has unsupported dtype {dtype}")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= begin <= end <= len(data)) or end - begin != count * _ELEM[dtype]:
            raise InputError(f"{what}: tensor '{name}' offsets [{begin}, {end}) do not fit shape {shape} "
                             f"{dtype} in {len(data)} data bytes")
        spans.append((begin, end, name))
        raw = data[begin:end]
        if dtype == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2")).reshape(shape)
        else:
            arr = np.frombuffer(raw, dtype=_NP[dtype]).reshape(shape)
        tensors[name] = (dtype, arr)
    spans.sort()
    for (b0, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise InputError(f"{what}: tensors '{n0}' and '{n1}' overlap")
    return tensors, metadata


def read_safetensors(path):
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    return parse_safetensors(blob, path)


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype, ndarray)}; BF16 arrays are given as values already on the bf16 grid."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        if dtype == "BF16":
            raw = f32_to_bf16_bits(arr).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(arr, dtype=_NP[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(np.shape(arr)), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson + b"".join(chunks))


# ---------------------------------------------------------------------------------------------
# model (SPEC sections 1 and 2)

_INT_FIELDS = ["d_model", "d_ff", "core_count", "n_banks", "n_events", "k_ffn", "d_router",
               "collapse_k", "collapse_r", "core_embed_dim"]
_BOOL_FIELDS = ["ffn_residual", "collapse_silu"]


def parse_config(raw):
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise InputError(f"model: swapffn.config is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise InputError("model: swapffn.config is not a JSON object")
    cfg = {}
    for k in _INT_FIELDS + ["norm_eps"] + _BOOL_FIELDS:
        if k not in raw:
            raise InputError(f"model: config field '{k}' is missing")
        v = raw[k]
        try:
            if k in _BOOL_FIELDS:
                if isinstance(v, str):
                    if v.lower() not in ("true", "false"):
                        raise ValueError
                    v = v.lower() == "true"
                elif not isinstance(v, bool):
                    raise ValueError
            elif k == "norm_eps":
                v = float(v)
            else:
                if isinstance(v, float) and not v.is_integer():
                    raise ValueError
                v = int(v)
        except (TypeError, ValueError):
            raise InputError(f"model: config field '{k}' has an invalid value {raw[k]!r}") from None
        cfg[k] = v
    for k in ["d_model", "d_ff", "core_count", "d_router", "collapse_k", "collapse_r", "core_embed_dim"]:
        if cfg[k] <= 0:
            raise InputError(f"model: config field '{k}' must be > 0 (got {cfg[k]})")
    for k in ["n_events", "k_ffn"]:
        if cfg[k] < 0:
            raise InputError(f"model: config field '{k}' must be >= 0 (got {cfg[k]})")
    if cfg["n_banks"] != 4:
        raise InputError(f"model: config field 'n_banks' must be 4 (got {cfg['n_banks']})")
    if not (cfg["norm_eps"] > 0 and np.isfinite(cfg["norm_eps"])):
        raise InputError(f"model: config field 'norm_eps' must be > 0 (got {cfg['norm_eps']})")
    return cfg


def param_shapes(cfg):
    D, F, C, R = cfg["d_model"], cfg["d_ff"], cfg["core_count"], cfg["d_router"]
    K, Rc, Ce = cfg["collapse_k"], cfg["collapse_r"], cfg["core_embed_dim"]
    return {
        "core_embed.weight": [C, Ce],
        "core_scale_proj.weight": [D, Ce], "core_scale_proj.bias": [D],
        "core_shift_proj.weight": [D, Ce], "core_shift_proj.bias": [D],
        "core_alpha_proj.weight": [K, Ce], "core_alpha_proj.bias": [K],
        "router_norm": [D], "router_w": [R, D], "router_swap_w": [R], "router_swap_b": [1],
        "bank_w": [R, 4], "bank_b": [4],
        "norm.weight": [D], "w1.weight": [F, D], "w3.weight": [F, D], "w2.weight": [D, F],
        "collapse_basis": [K, Rc, D], "collapse_decoder": [D, Rc],
    }


class Model:
    """Parameters on the bf16 grid, held in `dtype` (float64 for the oracle)."""

    def __init__(self, cfg, params, dtype=np.float64):
        self.cfg, self.dtype = cfg, dtype
        self.p = {k: np.asarray(v, dtype=dtype) for k, v in params.items()}
        p, emb = self.p, self.p["core_embed.weight"]
        # Parameter-only per-core tensors (SPEC section 2).
        self.core_scale = 1 + emb @ p["core_scale_proj.weight"].T + p["core_scale_proj.bias"]
        self.core_shift = emb @ p["core_shift_proj.weight"].T + p["core_shift_proj.bias"]
        logits = emb @ p["core_alpha_proj.weight"].T + p["core_alpha_proj.bias"]
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        self.core_alpha = e / e.sum(axis=1, keepdims=True)


def load_model(path, dtype=np.float64):
    tensors, meta = read_safetensors(path)
    if "swapffn.config" not in meta:
        raise InputError(f"model {path}: __metadata__ has no 'swapffn.config'")
    cfg = parse_config(meta["swapffn.config"])
    shapes = param_shapes(cfg)
    for name in tensors:
        if name not in shapes:
            raise InputError(f"model {path}: unexpected tensor '{name}'")
    params = {}
    for name, shape in shapes.items():
        if name not in tensors:
            raise InputError(f"model {path}: tensor '{name}' is missing")
        dt, arr = tensors[name]
        if dt not in ("BF16", "F32", "F16", "F64"):
            raise InputError(f"model {path}: tensor '{name}' has dtype {dt}, expected BF16 or F32")
        if list(arr.shape) != shape:
            raise InputError(f"model {path}: tensor '{name}' has shape {list(arr.shape)}, expected {shape}")
        if not np.all(np.isfinite(arr)):
            raise InputError(f"model {path}: tensor '{name}' has non-finite values")
        # Non-bf16 parameters are rounded to bf16 on load (SPEC section 2).
        params[name] = arr.astype(np.float64) if dt == "BF16" else round_to_bf16(arr)
    return Model(cfg, params, dtype)


# ---------------------------------------------------------------------------------------------
# forward (SPEC sections 3 and 4)

def decode_maps(stream_map):
    """[N] uint8 -> [N, 4] lanes; raises on a byte whose lanes are not a permutation."""
    sm = np.asarray(stream_map, dtype=np.uint8).reshape(-1)
    lanes = np.stack([(sm >> (2 * j)) & 3 for j in range(4)], axis=1).astype(np.int64)
    bad = [i for i in range(sm.size) if sorted(lanes[i].tolist()) != [0, 1, 2, 3]]
    return lanes, bad


def encode_maps(lanes):
    lanes = lanes.astype(np.uint8)
    return (lanes[:, 0] | (lanes[:, 1] << 2) | (lanes[:, 2] << 4) | (lanes[:, 3] << 6)).astype(np.uint8)


def _rms(v, eps):
    return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps)


def _silu(t):
    with np.errstate(over="ignore"):
        return t / (1 + np.exp(-t))


class Decisions:
    """Per-decision bookkeeping while following a trace."""

    def __init__(self, tau):
        self.tau = tau
        self.gates = self.slots = 0
        self.gate_disagree = self.slot_disagree = self.closed_slot_disagree = 0
        self.failures = []  # (kind, t, e, b, c, margin)
        self.min_gate_margin = np.inf
        self.min_slot_gap = np.inf

    def record(self, t, e, C, s, logits, my_gate, my_slot, gate, slot):
        self.gates += s.size
        self.min_gate_margin = min(self.min_gate_margin, float(np.min(np.abs(s)))) if s.size else self.min_gate_margin
        for n in np.nonzero(my_gate != gate)[0]:
            self.gate_disagree += 1
            if abs(s[n]) > self.tau:
                self.failures.append(("gate", t, e, n // C, n % C, abs(float(s[n]))))
        open_ = np.nonzero(gate)[0]
        self.slots += open_.size
        if open_.size:
            srt = np.sort(logits[open_], axis=1)
            self.min_slot_gap = min(self.min_slot_gap, float(np.min(srt[:, -1] - srt[:, -2])))
        for n in np.nonzero(my_slot != slot)[0]:
            if not gate[n]:
                self.closed_slot_disagree += 1
                continue
            self.slot_disagree += 1
            # How far the dump's slot is below the oracle's best: >= the top-2 gap.
            margin = float(logits[n, my_slot[n]] - logits[n, slot[n]])
            if margin > self.tau:
                self.failures.append(("slot", t, e, n // C, n % C, margin))


def forward(model, x, ram0, map0, trace=None, tau=0.0, ffn=None):
    """Decodes T tokens for B sequences.

    x [T,B,D]; ram0 [B,C,4,D] (bf16 values); map0 [B,C] uint8.
    trace: None to use the model's own decisions, else (gate [T,E,B,C], slot [T,E,B,C]) to follow.
    ffn: None for SPEC's FFN, else a function of the normed rows n [N,D] returning y [N,D] (a GPU
    path's rounding recipe simulated in its place: fp8_recipe_sim.py).
    Returns dict with delta [T,B,D], ram, stream_map, gate, slot (the decisions applied) and the
    Decisions bookkeeping (own margins versus the followed trace).
    """
    cfg, p, dt = model.cfg, model.p, model.dtype
    T, B, D = x.shape
    C, E, eps = cfg["core_count"], cfg["n_events"], cfg["norm_eps"]
    N = B * C
    ram = np.array(ram0, dtype=np.float64).reshape(N, 4, D)
    lanes, bad = decode_maps(map0)
    if bad:
        raise InputError(f"initial stream map byte at index {bad[0]} (0x{int(np.ravel(map0)[bad[0]]):02X}) "
                         f"is not a permutation")
    eps = dt(eps)
    decisions = Decisions(tau)
    gates = np.zeros((T, E, B, C), np.uint8)
    slots = np.zeros((T, E, B, C), np.uint8)
    delta = np.zeros((T, B, D), np.float64)
    rows = np.arange(N)
    live_writes = 0  # swaps that wrote a nonzero h (a zero h stays zero: such swaps exercise little)
    for t in range(T):
        xt = np.asarray(x[t], dtype=dt)
        h = (xt[:, None, :] * model.core_scale[None] + model.core_shift[None]).reshape(N, D)
        for e in range(E):
            z = (_rms(h, eps) * p["router_norm"]) @ p["router_w"].T          # [N, R]
            s = z @ p["router_swap_w"] + p["router_swap_b"][0]                 # [N]
            logits = z @ p["bank_w"] + p["bank_b"]                             # [N, 4]
            my_gate = s > 0
            my_slot = np.argmax(logits, axis=1)                                # ties -> lowest index
            if trace is None:
                gate, slot = my_gate, my_slot
            else:
                gate = trace[0][t, e].reshape(N).astype(bool)
                slot = trace[1][t, e].reshape(N).astype(np.int64)
                decisions.record(t, e, C, s.astype(np.float64), logits.astype(np.float64),
                                 my_gate, my_slot, gate, slot)
            gates[t, e] = gate.reshape(B, C)
            slots[t, e] = slot.reshape(B, C)
            idx = rows[gate]
            if idx.size:
                j = slot[idx]
                phys = lanes[idx, j]
                out = ram[idx, phys, :].copy()
                ram[idx, phys, :] = round_to_bf16(h[idx])
                live_writes += int(np.count_nonzero(np.any(h[idx] != 0, axis=1)))
                h[idx] = out.astype(dt)
                lane0 = lanes[idx, 0].copy()
                lanes[idx, 0] = phys
                lanes[idx, j] = lane0
            for _ in range(cfg["k_ffn"]):
                n = _rms(h, eps) * p["norm.weight"]
                if ffn is None:
                    u = _silu(n @ p["w1.weight"].T) * (n @ p["w3.weight"].T)
                    y = u @ p["w2.weight"].T
                else:
                    y = ffn(n)
                h = h + y if cfg["ffn_residual"] else y
        hb = h.reshape(B, C, D)
        pooled = np.einsum("ck,bcd->bkd", model.core_alpha, hb)
        zc = np.einsum("bkd,krd->br", pooled, p["collapse_basis"])
        if cfg["collapse_silu"]:
            zc = _silu(zc)
        delta[t] = zc @ p["collapse_decoder"].T
    return {"delta": delta, "ram": ram.reshape(B, C, 4, D), "stream_map": encode_maps(lanes).reshape(B, C),
            "gate": gates, "slot": slots, "decisions": decisions, "live_writes": live_writes}


# ---------------------------------------------------------------------------------------------
# judging a dump

def _bf16_ulp(values):
    """Spacing of the bf16 grid at |values| (0 where the value is 0: zeros must match exactly)."""
    m = np.abs(values)
    _, ex = np.frexp(m)
    return np.where(m > 0, np.ldexp(1.0, ex - 8), 0.0)


def _rel_l2(mine, theirs):
    diff = float(np.linalg.norm((np.asarray(mine, np.float64) - np.asarray(theirs, np.float64)).ravel()))
    ref = float(np.linalg.norm(np.asarray(mine, np.float64).ravel()))
    return diff / ref if ref > 0 else (0.0 if diff == 0 else np.inf)


def load_dump(path, cfg):
    tensors, _ = read_safetensors(path)
    D, C, E = cfg["d_model"], cfg["core_count"], cfg["n_events"]
    need = {"x", "delta", "gate", "slot", "ram", "stream_map"}
    missing = need - tensors.keys()
    if missing:
        raise InputError(f"dump {path}: tensor(s) {sorted(missing)} missing")
    if ("ram0" in tensors) != ("stream_map0" in tensors):
        raise InputError(f"dump {path}: 'ram0' and 'stream_map0' must come together")
    extra = tensors.keys() - need - {"ram0", "stream_map0"}
    if extra:
        print(f"note: dump has extra tensors {sorted(extra)} (ignored)")
    x = tensors["x"][1]
    if x.ndim != 3 or x.shape[2] != D:
        raise InputError(f"dump {path}: 'x' has shape {list(x.shape)}, expected [T, B, {D}]")
    T, B, _ = x.shape
    expect = {"x": ("F32", [T, B, D]), "delta": ("F32", [T, B, D]), "gate": ("U8", [T, E, B, C]),
              "slot": ("U8", [T, E, B, C]), "ram": ("BF16", [B, C, 4, D]), "stream_map": ("U8", [B, C]),
              "ram0": ("BF16", [B, C, 4, D]), "stream_map0": ("U8", [B, C])}
    out = {}
    for name, (dt, shape) in expect.items():
        if name not in tensors:
            continue
        got_dt, arr = tensors[name]
        if got_dt != dt:
            raise InputError(f"dump {path}: '{name}' has dtype {got_dt}, expected {dt}")
        if list(arr.shape) != shape:
            raise InputError(f"dump {path}: '{name}' has shape {list(arr.shape)}, expected {shape}")
        out[name] = arr
    if "ram0" not in out:
        out["ram0"] = np.zeros((B, C, 4, D), np.float32)
        out["stream_map0"] = np.full((B, C), IDENTITY_MAP, np.uint8)
    return out


def judge(model, dump, tau, rtol, ram_flip_frac=0.01, require_swaps=False, log=print):
    """Returns a list of (category, message) failures; empty means accepted."""
    fails = []
    for name in ("x", "ram0"):
        if not np.all(np.isfinite(dump[name])):
            return [("input", f"'{name}' has non-finite values")]
    if np.any(dump["gate"] > 1):
        return [("trace", "gate values outside {0, 1}")]
    if np.any(dump["slot"] > 3):
        return [("trace", "slot values outside {0..3}")]
    _, bad0 = decode_maps(dump["stream_map0"])
    if bad0:
        return [("stream_map", f"initial stream_map0 byte at index {bad0[0]} is not a permutation")]
    T, B, D = dump["x"].shape
    C, E = model.cfg["core_count"], model.cfg["n_events"]
    r = forward(model, dump["x"], dump["ram0"], dump["stream_map0"],
                trace=(dump["gate"], dump["slot"]), tau=tau)
    dec = r["decisions"]
    opened = int(dump["gate"].sum())
    log(f"shape: T={T} B={B} C={C} E={E} D={D}; gates open {opened}/{dec.gates} "
        f"({100.0 * opened / max(dec.gates, 1):.1f}%), open with slot != 0: "
        f"{int(((dump['slot'] != 0) & (dump['gate'] == 1)).sum())}, swaps writing a nonzero h: {r['live_writes']}")
    log(f"decisions checked: {dec.gates} gates + {dec.slots} slots (gate open); disagreeing: "
        f"{dec.gate_disagree} gates, {dec.slot_disagree} slots ({len(dec.failures)} beyond tau={tau:g}); "
        f"closed-gate slot disagreements (no effect): {dec.closed_slot_disagree}")
    log(f"closest own margins: |s| {dec.min_gate_margin:.3e}, top-2 bank gap {dec.min_slot_gap:.3e}")
    for kind, t, e, b, c, m in dec.failures[:5]:
        fails.append(("decision", f"{kind} at token {t} event {e} seq {b} core {c} differs with margin {m:.3e} > tau"))
    if len(dec.failures) > 5:
        fails.append(("decision", f"... and {len(dec.failures) - 5} more decisions beyond tau"))
    if require_swaps and (opened == 0 or not np.any((dump["slot"] != 0) & (dump["gate"] == 1))):
        fails.append(("coverage", "no swap (or no swap with slot != 0) happened: the check would prove little"))

    theirs = dump["delta"].astype(np.float64)
    if not np.all(np.isfinite(theirs)):
        fails.append(("delta", "dump delta has non-finite values"))
    else:
        rel = _rel_l2(r["delta"], theirs)
        per_tok = max(_rel_l2(r["delta"][t], theirs[t]) for t in range(T)) if T else 0.0
        log(f"delta: rel L2 {rel:.3e} (worst token {per_tok:.3e}), max abs diff "
            f"{float(np.max(np.abs(r['delta'] - theirs), initial=0.0)):.3e}, |delta| rms "
            f"{float(np.sqrt(np.mean(r['delta'] ** 2))) if r['delta'].size else 0.0:.3e}; rtol {rtol:g}")
        if not rel <= rtol:
            fails.append(("delta", f"delta rel L2 error {rel:.3e} > rtol {rtol:g}"))

    mine_ram, their_ram = r["ram"], dump["ram"].astype(np.float64)
    if not np.all(np.isfinite(their_ram)):
        fails.append(("ram", "dump ram has non-finite values"))
    else:
        diff = np.abs(mine_ram - their_ram)
        differ = diff > 0
        ulp = np.maximum(_bf16_ulp(mine_ram), _bf16_ulp(their_ram))
        beyond = differ & (diff > ulp)
        nonzero = int(np.count_nonzero(mine_ram))
        rel = _rel_l2(mine_ram, their_ram)
        log(f"ram: rel L2 {rel:.3e}, max abs diff {float(diff.max(initial=0.0)):.3e}, elements differing "
            f"{int(differ.sum())}/{nonzero} nonzero (one-ulp near-tie flips allowed up to "
            f"{ram_flip_frac:.0%}), beyond one bf16 ulp: {int(beyond.sum())}")
        if beyond.any():
            i = np.unravel_index(int(np.argmax(beyond)), beyond.shape)
            fails.append(("ram", f"ram{list(i)} = {their_ram[i]:.6g}, oracle {mine_ram[i]:.6g}: more than one "
                                 f"bf16 ulp apart ({int(beyond.sum())} such elements)"))
        if differ.sum() > ram_flip_frac * max(nonzero, 1):
            fails.append(("ram", f"{int(differ.sum())} of {nonzero} RAM elements differ: more than "
                                 f"near-tie bf16 rounding explains"))

    _, bad = decode_maps(dump["stream_map"])
    if bad:
        fails.append(("stream_map", f"final stream_map byte at index {bad[0]} "
                                    f"(0x{int(dump['stream_map'].ravel()[bad[0]]):02X}) is not a permutation"))
    mism = np.argwhere(r["stream_map"] != dump["stream_map"])
    log(f"stream_map: {len(mism)} of {dump['stream_map'].size} bytes differ")
    if len(mism):
        b, c = mism[0]
        fails.append(("stream_map", f"stream_map[{b},{c}] = 0x{int(dump['stream_map'][b, c]):02X}, oracle "
                                    f"0x{int(r['stream_map'][b, c]):02X} ({len(mism)} bytes differ)"))
    return fails


def check_files(model_path, dump_path, tau, rtol, ram_flip_frac, require_swaps):
    model = load_model(model_path)
    dump = load_dump(dump_path, model.cfg)
    print(f"spec_oracle: model {model_path}, dump {dump_path}")
    fails = judge(model, dump, tau, rtol, ram_flip_frac, require_swaps)
    if fails:
        for _, msg in fails:
            print(f"REJECT: {msg}")
        return 1
    print("ACCEPT: the dump agrees with SPEC.md")
    return 0


# ---------------------------------------------------------------------------------------------
# self-test: a random model and dumps made by this file's own forward pass

_TINY = dict(d_model=128, d_ff=384, core_count=40, n_banks=4, n_events=3, k_ffn=2, d_router=16,
             collapse_k=5, collapse_r=24, core_embed_dim=8, norm_eps=1e-6, ffn_residual=True,
             collapse_silu=True)


def random_params(cfg, rng):
    params = {}
    for name, shape in param_shapes(cfg).items():
        fan_in = shape[-1] if len(shape) > 1 else 1
        scale = 1.0 / np.sqrt(fan_in)
        if name.endswith(".bias") or name in ("router_swap_b", "bank_b"):
            scale = 0.1
        if name in ("router_norm", "norm.weight"):
            params[name] = 1 + 0.1 * rng.standard_normal(shape)
            continue
        if name == "w2.weight":
            scale *= 0.5  # keeps h O(1) through E * k_ffn residual steps
        params[name] = scale * rng.standard_normal(shape)
    return {k: round_to_bf16(v) for k, v in params.items()}


def _selftest():
    rng = np.random.default_rng(20261122)
    cfg = dict(_TINY)
    T, B, D, C = 4, 2, cfg["d_model"], cfg["core_count"]
    tau, rtol = 1e-3, 1e-4
    failures = []

    def expect(cond, what):
        print(f"  {'ok  ' if cond else 'FAIL'} {what}")
        if not cond:
            failures.append(what)

    def quiet(*_):
        pass

    with tempfile.TemporaryDirectory() as tmp:
        # The model goes through the safetensors writer and parser, with F32 parameters for a few
        # tensors (rounded to bf16 on load) so both load paths run.
        params = random_params(cfg, rng)
        mpath = os.path.join(tmp, "m.safetensors")
        write_safetensors(mpath, {k: ("F32" if k.startswith("w1") else "BF16", v) for k, v in params.items()},
                          {"swapffn.config": json.dumps(cfg)})
        model = load_model(mpath)
        model32 = Model(model.cfg, model.p, np.float32)

        def make_dump(m, x, ram0=None, map0=None):
            ram0 = np.zeros((B, C, 4, D)) if ram0 is None else ram0
            map0 = np.full((B, C), IDENTITY_MAP, np.uint8) if map0 is None else map0
            r = forward(m, x, ram0, map0)
            d = {"x": ("F32", x), "delta": ("F32", r["delta"]), "gate": ("U8", r["gate"]),
                 "slot": ("U8", r["slot"]), "ram": ("BF16", r["ram"]), "stream_map": ("U8", r["stream_map"])}
            if ram0 is not None and np.any(ram0):
                d.update({"ram0": ("BF16", ram0), "stream_map0": ("U8", map0)})
            return d, r

        def judge_dump(tensors):
            path = os.path.join(tmp, "d.safetensors")
            write_safetensors(path, tensors)
            return judge(model, load_dump(path, model.cfg), tau, rtol, require_swaps=True, log=quiet)

        x1 = rng.standard_normal((T, B, D)).astype(np.float32)
        d1, r1 = make_dump(model, x1)
        x2 = rng.standard_normal((T, B, D)).astype(np.float32)
        d2, _ = make_dump(model, x2, r1["ram"], r1["stream_map"])
        print("selftest: acceptance")
        expect(judge_dump(d1) == [], "accepts its own dump from the zero state")
        expect(judge_dump(d2) == [], "accepts its own dump from a carried-over state (ram0/stream_map0)")
        d32, _ = make_dump(model32, x1)
        f32 = judge_dump(d32)
        expect(f32 == [], f"accepts an fp32 evaluation of the same spec (rounding-level differences) {f32}")

        print("selftest: rejection")
        bad = dict(d1)
        delta = r1["delta"].copy()
        delta[1, 0, 5] += 0.01 * np.linalg.norm(delta)
        bad["delta"] = ("F32", delta)
        expect({c for c, _ in judge_dump(bad)} == {"delta"}, "rejects a perturbed delta value (and only for delta)")

        # Flip the gate with the largest |s| in the first event of the first token.
        xs = np.asarray(x1[0], np.float64)
        h = (xs[:, None, :] * model.core_scale[None] + model.core_shift[None]).reshape(B * C, D)
        z = (_rms(h, cfg["norm_eps"]) * model.p["router_norm"]) @ model.p["router_w"].T
        s = z @ model.p["router_swap_w"] + model.p["router_swap_b"][0]
        logits = z @ model.p["bank_w"] + model.p["bank_b"]
        n = int(np.argmax(np.abs(s)))
        gate = r1["gate"].copy()
        gate[0, 0, n // C, n % C] ^= 1
        bad = dict(d1, gate=("U8", gate))
        expect("decision" in {c for c, _ in judge_dump(bad)}, f"rejects a flipped gate with margin {abs(s[n]):.3f}")

        opened = np.nonzero(s > 0)[0]
        srt = np.sort(logits[opened], axis=1)
        n = int(opened[np.argmax(srt[:, -1] - srt[:, -2])])
        slot = r1["slot"].copy()
        slot[0, 0, n // C, n % C] = (slot[0, 0, n // C, n % C] + 1) % 4
        bad = dict(d1, slot=("U8", slot))
        expect("decision" in {c for c, _ in judge_dump(bad)}, "rejects a changed slot on an open gate")

        sm = r1["stream_map"].copy()
        sm[1, 3] = 0x00
        bad = dict(d1, stream_map=("U8", sm))
        expect("stream_map" in {c for c, _ in judge_dump(bad)}, "rejects an invalid stream map byte (0x00)")
        sm = r1["stream_map"].copy()
        sm[0, 2] = 0xE1 if sm[0, 2] != 0xE1 else 0xE4
        bad = dict(d1, stream_map=("U8", sm))
        expect({c for c, _ in judge_dump(bad)} == {"stream_map"}, "rejects a valid but wrong stream map byte")
        sm0 = d2["stream_map0"][1].copy()
        sm0[0, 0] = 0xFF
        bad = dict(d2, stream_map0=("U8", sm0))
        expect("stream_map" in {c for c, _ in judge_dump(bad)}, "rejects an invalid initial stream map")

        ram = r1["ram"].copy()
        i = tuple(np.argwhere(ram != 0)[0])
        ram[i] = round_to_bf16(ram[i] + 3 * _bf16_ulp(ram[i]))
        bad = dict(d1, ram=("BF16", ram))
        expect({c for c, _ in judge_dump(bad)} == {"ram"}, "rejects a RAM element three ulps off")
        ram = round_to_bf16(r1["ram"] * (1 + 2.0 ** -8))
        bad = dict(d1, ram=("BF16", ram))
        expect("ram" in {c for c, _ in judge_dump(bad)}, "rejects RAM systematically one ulp off")

        trunc = os.path.join(tmp, "t.safetensors")
        with open(os.path.join(tmp, "d.safetensors"), "rb") as f:
            blob = f.read()
        with open(trunc, "wb") as f:
            f.write(blob[:len(blob) - 7])
        try:
            load_dump(trunc, model.cfg)
            expect(False, "refuses a truncated dump")
        except InputError as e:
            expect("offsets" in str(e), f"refuses a truncated dump ({e})")

    print("selftest: " + ("PASS" if not failures else f"FAIL ({len(failures)} checks)"))
    return 0 if not failures else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--dump")
    ap.add_argument("--tau", type=float, default=1e-3, help="decision margin below which a disagreement is tolerated")
    ap.add_argument("--rtol", type=float, default=1e-4, help="relative L2 tolerance of delta (fp32 path)")
    ap.add_argument("--ram-flip-frac", type=float, default=0.01,
                    help="largest fraction of nonzero RAM elements allowed one bf16 ulp apart")
    ap.add_argument("--require-swaps", action="store_true", help="reject a dump where no swap with slot != 0 happened")
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args(argv)
    if a.selftest:
        return _selftest()
    if not a.model or not a.dump:
        ap.error("--model and --dump are required (or --selftest)")
    try:
        return check_files(a.model, a.dump, a.tau, a.rtol, a.ram_flip_frac, a.require_swaps)
    except InputError as e:
        print(f"REJECT: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""SPEC (docs/SPEC.md) as a trainable PyTorch module whose files the engine loads bit for bit."""
from __future__ import annotations

import json
import math
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import _safetensors, config_preset

__all__ = ["SwapFFN", "State", "Trace", "Step", "IDENTITY_MAP"]

IDENTITY_MAP = 0xE4  # stream_map byte whose lane j is j (SPEC section 3)

_INT_FIELDS = ("d_model", "d_ff", "core_count", "n_banks", "n_events", "k_ffn", "d_router", "collapse_k",
               "collapse_r", "core_embed_dim")
_BOOL_FIELDS = ("ffn_residual", "collapse_silu")
_MAX_SIZE = 1 << 20  # as the engine: bounds B*C*4*D and refuses absurd allocations


class State(NamedTuple):
    """The recurrent state of a batch (SPEC section 3)."""
    ram: torch.Tensor         # [B, C, 4, D], values on the bf16 grid (held in any float dtype)
    stream_map: torch.Tensor  # [B, C] uint8, four 2-bit lanes: lane j = physical bank of logical slot j


class Trace(NamedTuple):
    """The module's own decisions of one step and the values behind them, per event, sequence and core;
    these are its own even when it followed another trace. Detached."""
    gate: torch.Tensor    # [E, B, C] uint8: 1 where s > 0
    slot: torch.Tensor    # [E, B, C] uint8: argmax of the bank logits, ties to the lowest slot
    s: torch.Tensor       # [E, B, C] swap logit (the gate's margin is |s|)
    logits: torch.Tensor  # [E, B, C, 4] bank logits


class Step(NamedTuple):
    delta: torch.Tensor  # [B, D]
    state: State
    trace: Trace


def validate_config(config: Dict) -> Dict:
    """The config of SPEC section 1 with the engine's checks; returns a copy with norm_eps a float.
    Raises ValueError naming the field."""
    if not isinstance(config, dict):
        raise ValueError(f"config must be a dict of SPEC section 1's fields, got {type(config).__name__}")
    known = set(_INT_FIELDS) | set(_BOOL_FIELDS) | {"norm_eps"}
    for key in config:
        if key not in known:
            raise ValueError(f"config has unknown field '{key}' (known: {', '.join(sorted(known))})")
    for key in known:
        if key not in config:
            raise ValueError(f"config is missing field '{key}'")
    out = dict(config)
    for key in _INT_FIELDS:
        v = config[key]
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"config field {key} = {v!r} must be an integer")
        low = 0 if key in ("n_events", "k_ffn") else 1
        if not low <= v <= _MAX_SIZE:
            raise ValueError(f"config field {key} = {v} must be in [{low}, {_MAX_SIZE}]")
    if config["n_banks"] != 4:
        raise ValueError(f"config field n_banks = {config['n_banks']} must be 4")
    for key in _BOOL_FIELDS:
        if not isinstance(config[key], bool):
            raise ValueError(f"config field {key} = {config[key]!r} must be true or false")
    eps = config["norm_eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"config field norm_eps = {eps!r} must be a finite number > 0")
    out["norm_eps"] = float(eps)  # the engine writes it as a JSON double
    return out


def param_shapes(config: Dict) -> Dict[str, List[int]]:
    """SPEC section 2's tensors in SPEC order, which is also the order of the engine's file."""
    D, Fd, C, R = config["d_model"], config["d_ff"], config["core_count"], config["d_router"]
    K, Rc, Ce = config["collapse_k"], config["collapse_r"], config["core_embed_dim"]
    return {
        "core_embed.weight": [C, Ce],
        "core_scale_proj.weight": [D, Ce], "core_scale_proj.bias": [D],
        "core_shift_proj.weight": [D, Ce], "core_shift_proj.bias": [D],
        "core_alpha_proj.weight": [K, Ce], "core_alpha_proj.bias": [K],
        "router_norm": [D], "router_w": [R, D], "router_swap_w": [R], "router_swap_b": [1],
        "bank_w": [R, 4], "bank_b": [4],
        "norm.weight": [D], "w1.weight": [Fd, D], "w3.weight": [Fd, D], "w2.weight": [D, Fd],
        "collapse_basis": [K, Rc, D], "collapse_decoder": [D, Rc],
    }


def _decode_map(stream_map: torch.Tensor) -> torch.Tensor:
    sm = stream_map.to(torch.int64)
    return torch.stack([(sm >> (2 * j)) & 3 for j in range(4)], dim=-1)


def _encode_map(lanes: torch.Tensor) -> torch.Tensor:
    return sum(lanes[..., j] << (2 * j) for j in range(4)).to(torch.uint8)


class SwapFFN(nn.Module):
    """The Swap-FFN layer of SPEC section 4, for training; parameters named as SPEC section 2.

    Forward: exactly SPEC's decode step, with its hard decisions: a core swaps when s > 0 and
    exchanges h with the bank of logical slot argmax(l); the RAM stores bf16(h). Computed in the
    parameters' dtype (fp32 by default, where the engine's reference agrees to its fp32 tolerance).

    Backward: the decisions are step functions, so their exact gradient is zero. Each is given the
    gradient of its soft relaxation instead (straight-through): the gate that of sigmoid(s), the
    slot's one-hot that of softmax(l), each with the other decision at its hard value. That is, the
    swap is differentiated as if it were h' = h + g * sum_k y_k (bank_k - h) (and likewise for the
    bank written), with dg/ds = sigmoid'(s) and dy/dl = the softmax Jacobian, while the forward value
    stays the hard one bit for bit. Why: the router then learns from the loss (s and l move
    towards the swap and the bank that would have lowered it) while the trained model is the very
    function the engine computes, with no gap between training and decoding; a closed gate gives
    the bank logits no gradient, since the slot had no effect. The bf16 rounding of a RAM write
    passes gradients unchanged. Gradients reach every parameter: the FFNs, norms, router, the
    per-core tables and the collapse.

    State: functional. `forward(x, state)` returns (delta, new_state) and leaves `state` as it was;
    the caller carries the state from token to token. `init_state` holds the RAM in fp32 (values on
    the bf16 grid), so gradients flow through the RAM across the tokens of an unrolled sequence;
    detach the state to truncate. A bf16 RAM is accepted too, and returned in bf16.

    Under torch.compile and inside a CUDA graph capture, the stream maps are not checked (the check
    waits for the device), so a step can be compiled and captured.

    `step(x, state, follow=(gate, slot))` applies given decisions instead of its own (SPEC section 5:
    following a path's trace) and returns its own decisions and margins beside the result.

    Made from a config (`SwapFFN()` is the default config, `SwapFFN("tiny")`, `SwapFFN.from_config`)
    or from a model file (`SwapFFN.from_safetensors`, bit for bit what the engine loads).
    """

    def __init__(self, config: Union[str, Dict] = "default", dtype: torch.dtype = torch.float32, device=None):
        super().__init__()
        self.config = validate_config(config_preset(config) if isinstance(config, str) else config)
        c, kw = self.config, {"dtype": dtype, "device": device}
        D, Fd, R, K, Rc, Ce = (c["d_model"], c["d_ff"], c["d_router"], c["collapse_k"], c["collapse_r"],
                               c["core_embed_dim"])
        self.core_embed = nn.Embedding(c["core_count"], Ce, **kw)
        self.core_scale_proj = nn.Linear(Ce, D, **kw)
        self.core_shift_proj = nn.Linear(Ce, D, **kw)
        self.core_alpha_proj = nn.Linear(Ce, K, **kw)
        self.router_norm = nn.Parameter(torch.empty(D, **kw))
        self.router_w = nn.Parameter(torch.empty(R, D, **kw))
        self.router_swap_w = nn.Parameter(torch.empty(R, **kw))
        self.router_swap_b = nn.Parameter(torch.empty(1, **kw))
        self.bank_w = nn.Parameter(torch.empty(R, 4, **kw))
        self.bank_b = nn.Parameter(torch.empty(4, **kw))
        self.norm = nn.RMSNorm(D, eps=c["norm_eps"], **kw)
        self.w1 = nn.Linear(D, Fd, bias=False, **kw)
        self.w3 = nn.Linear(D, Fd, bias=False, **kw)
        self.w2 = nn.Linear(Fd, D, bias=False, **kw)
        self.collapse_basis = nn.Parameter(torch.empty(K, Rc, D, **kw))
        self.collapse_decoder = nn.Parameter(torch.empty(D, Rc, **kw))
        self.reset_parameters()

    @classmethod
    def from_config(cls, config: Union[str, Dict] = "default", dtype: torch.dtype = torch.float32,
                    device=None) -> "SwapFFN":
        """A layer of a config with fresh parameters (reset_parameters): config is a preset name
        ("default": SPEC section 1's, 1024 -> 4096 FFN, 512 cores; "tiny": a small one for tests
        and CPUs) or a dict of SPEC section 1's fields (swapffn.config_preset(name) gives one to
        edit). Raises swapffn.Error for an unknown preset, ValueError naming a bad field."""
        return cls(config, dtype=dtype, device=device)

    # -- parameters and files ------------------------------------------------------------------

    @torch.no_grad()
    def reset_parameters(self, generator: Optional[torch.Generator] = None) -> None:
        """Draws the parameters from docs/MODEL.md's distributions (torch's generator, so not the
        engine's values for a seed), rounded to bf16."""
        c, p = self.config, dict(self.named_parameters())
        D, Fd, R, K, Rc, Ce = (c["d_model"], c["d_ff"], c["d_router"], c["collapse_k"], c["collapse_r"],
                               c["core_embed_dim"])
        std = {"core_embed.weight": 1.0, "core_scale_proj.weight": 0.5 / math.sqrt(Ce),
               "core_shift_proj.weight": 2.0 / math.sqrt(Ce), "core_alpha_proj.weight": 1 / math.sqrt(Ce),
               "core_scale_proj.bias": 0.1, "core_shift_proj.bias": 0.1, "core_alpha_proj.bias": 0.1,
               "router_w": 1 / math.sqrt(D), "w1.weight": 1 / math.sqrt(D), "w3.weight": 1 / math.sqrt(D),
               "router_swap_w": 1 / math.sqrt(R), "bank_w": 1 / math.sqrt(R), "bank_b": 0.25,
               "w2.weight": 0.5 / math.sqrt(Fd), "collapse_basis": 1 / math.sqrt(K * D),
               "collapse_decoder": 1 / math.sqrt(Rc)}

        def normal(shape):
            return torch.randn(shape, generator=generator, dtype=torch.float64)

        for name, t in p.items():
            if name in std:
                v = std[name] * normal(t.shape)
            elif name in ("router_norm", "norm.weight"):
                v = 1 + 0.1 * normal(t.shape)
            else:  # router_swap_b: > 0, so a core that swapped in a zero bank swaps again
                v = 0.05 + 0.05 * normal(t.shape).abs()
            if name == "bank_b":  # distinct, so a zero h's bank choice is never a tie
                while torch.unique(v.to(torch.bfloat16)).numel() < 4:
                    v = std[name] * normal(t.shape)
            t.copy_(v.to(torch.float32).to(torch.bfloat16).to(t.dtype))

    @classmethod
    def from_safetensors(cls, path, dtype: torch.dtype = torch.float32, device=None) -> "SwapFFN":
        """Loads a model file as the engine does (docs/FORMATS.md): F32 tensors are rounded to bf16.
        Raises ValueError naming the file and the tensor or config field."""
        tensors, metadata = _safetensors.read(path)
        where = f"model {path}: "
        if "swapffn.config" not in metadata:
            raise ValueError(where + "__metadata__ has no 'swapffn.config' (not a swapffn model?)")
        try:
            config = validate_config(json.loads(metadata["swapffn.config"]))
        except (json.JSONDecodeError, ValueError) as e:
            raise ValueError(where + f"invalid swapffn.config: {e}") from None
        shapes = param_shapes(config)
        for name in tensors:
            if name not in shapes:
                raise ValueError(where + f"extra tensor '{name}' (not in SPEC)")
        model = cls(config, dtype=dtype, device=device)
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, shape in shapes.items():
                if name not in tensors:
                    raise ValueError(where + f"missing tensor '{name}'")
                dt, arr = tensors[name]
                if dt not in ("BF16", "F32"):
                    raise ValueError(where + f"tensor '{name}' has wrong dtype {dt} (accepted: BF16, F32)")
                if list(arr.shape) != shape:
                    raise ValueError(where + f"tensor '{name}' has wrong shape {list(arr.shape)}, expected "
                                     f"{shape} for the config")
                values = _safetensors.bf16_to_f32(arr if dt == "BF16" else _safetensors.f32_to_bf16(arr))
                bad = np.flatnonzero(~np.isfinite(values))
                if bad.size:
                    raise ValueError(where + f"tensor '{name}' has a non-finite value at index {bad[0]}")
                params[name].copy_(torch.from_numpy(values.reshape(shape)))
        return model

    def save_safetensors(self, path) -> None:
        """Writes the model file the engine writes: bf16 (round to nearest even), SPEC order, the
        config under `swapffn.config`, written atomically. Raises ValueError naming a non-finite
        parameter (the engine would refuse the file)."""
        params = dict(self.named_parameters())
        tensors = {}
        for name in param_shapes(self.config):
            values = params[name].detach().to("cpu", torch.float32).numpy()
            bits = _safetensors.f32_to_bf16(values)
            bad = np.flatnonzero(~np.isfinite(_safetensors.bf16_to_f32(bits)))
            if bad.size:
                raise ValueError(f"parameter '{name}' has a non-finite value at index {bad[0]}")
            tensors[name] = ("BF16", bits)
        config = json.dumps(self.config, sort_keys=True, separators=(",", ":"))
        _safetensors.write(path, tensors, {"swapffn.config": config, "format": "pt"})

    # -- state ---------------------------------------------------------------------------------

    def init_state(self, batch: int, dtype: torch.dtype = torch.float32, device=None) -> State:
        """SPEC section 3's initial state: zero RAM, identity stream maps."""
        c = self.config
        device = self.router_w.device if device is None else device
        ram = torch.zeros(batch, c["core_count"], 4, c["d_model"], dtype=dtype, device=device)
        return State(ram, torch.full((batch, c["core_count"]), IDENTITY_MAP, dtype=torch.uint8, device=device))

    def core_tables(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """core_scale [C, D], core_shift [C, D], core_alpha [C, K] (SPEC section 2)."""
        emb = self.core_embed.weight
        return (1 + self.core_scale_proj(emb), self.core_shift_proj(emb),
                torch.softmax(self.core_alpha_proj(emb), dim=-1))

    # -- the step ------------------------------------------------------------------------------

    def forward(self, x: torch.Tensor, state: Optional[State] = None,
                follow: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> Tuple[torch.Tensor, State]:
        """x [B, D] -> (delta [B, D], new state). `state` None: the initial state."""
        out = self.step(x, state, follow)
        return out.delta, out.state

    def step(self, x: torch.Tensor, state: Optional[State] = None,
             follow: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> Step:
        """One decode step (SPEC section 4). follow: (gate, slot), each [E, B, C], the decisions to
        apply instead of the module's own (a Trace, or one token of a dump's trace)."""
        c = self.config
        dt = self.router_w.dtype
        D, C, E, eps = c["d_model"], c["core_count"], c["n_events"], c["norm_eps"]
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != D or not x.is_floating_point():
            raise ValueError(f"x must be a float tensor [B, {D}], got "
                             f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        B = x.shape[0]
        state = self.init_state(B, device=x.device) if state is None else state
        ram, lanes = self._check_state(state, B)
        gates, slots = self._check_follow(follow, B, x.device) if follow is not None else (None, None)

        scale, shift, alpha = self.core_tables()
        h = x.to(dt)[:, None, :] * scale + shift  # [B, C, D]
        trace = Trace(torch.zeros(E, B, C, dtype=torch.uint8, device=h.device),
                      torch.zeros(E, B, C, dtype=torch.uint8, device=h.device),
                      h.new_zeros(E, B, C), h.new_zeros(E, B, C, 4))
        for e in range(E):
            z = F.linear(F.rms_norm(h, (D,), self.router_norm, eps), self.router_w)  # [B, C, R]
            s = z @ self.router_swap_w + self.router_swap_b                         # [B, C]
            logits = z @ self.bank_w + self.bank_b                                   # [B, C, 4]
            own_gate, own_slot = s > 0, logits.argmax(dim=-1)  # argmax: first maximum on ties
            for field, value in zip(trace, (own_gate, own_slot, s, logits)):
                field[e] = value.detach()
            gate, slot = (own_gate, own_slot) if gates is None else (gates[e], slots[e])
            h, ram, lanes = self._swap(h, ram, lanes, s, logits, gate, slot)
            for _ in range(c["k_ffn"]):
                n = self.norm(h)
                y = self.w2(F.silu(self.w1(n)) * self.w3(n))
                h = h + y if c["ffn_residual"] else y
        pooled = torch.einsum("ck,bcd->bkd", alpha, h)
        zc = torch.einsum("bkd,krd->br", pooled, self.collapse_basis)
        if c["collapse_silu"]:
            zc = F.silu(zc)
        delta = F.linear(zc, self.collapse_decoder)

        return Step(delta, State(ram.to(state.ram.dtype), _encode_map(lanes)), trace)

    @staticmethod
    def _swap(h, ram, lanes, s, logits, gate, slot):
        """SPEC's swap with hard decisions; straight-through gradients for both (class docstring)."""
        B, C, D = h.shape
        g = gate.to(h.dtype)
        y = F.one_hot(slot, 4).to(h.dtype)  # [B, C, 4] over logical slots
        sig, prob = torch.sigmoid(s), torch.softmax(logits, dim=-1)
        # Zero in value, so the forward stays hard; its gradient is d(g * y_k).
        dw = (sig - sig.detach())[..., None] * y + g[..., None] * (prob - prob.detach())
        dw = dw.gather(-1, lanes.argsort(dim=-1))[..., None]  # to physical banks [B, C, 4, 1]

        phys = lanes.gather(-1, slot[..., None])  # [B, C, 1]
        write = gate[..., None] & (torch.arange(4, device=h.device) == phys)  # [B, C, 4]
        read = ram.gather(2, phys[..., None].expand(B, C, 1, D)).squeeze(2)
        hq = h.float().to(torch.bfloat16).to(h.dtype) + (h - h.detach())  # bf16 storage, identity gradient
        h_new = torch.where(gate[..., None], read, h) + (dw * (ram - h[:, :, None])).sum(dim=2)
        ram_new = torch.where(write[..., None], hq[:, :, None], ram) + dw * (hq[:, :, None] - ram)

        order = torch.arange(4, device=h.device).expand(B, C, 4).clone()
        order.scatter_(-1, slot[..., None], 0)
        order[..., 0] = slot
        lanes_new = torch.where(gate[..., None], lanes.gather(-1, order), lanes)  # swap lanes 0 and slot
        return h_new, ram_new, lanes_new

    def _check_state(self, state: State, B: int) -> Tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        C, D = c["core_count"], c["d_model"]
        ram, sm = state
        if not isinstance(ram, torch.Tensor) or tuple(ram.shape) != (B, C, 4, D) or not ram.is_floating_point():
            raise ValueError(f"state.ram must be a float tensor [{B}, {C}, 4, {D}], got "
                             f"{tuple(ram.shape) if isinstance(ram, torch.Tensor) else type(ram).__name__}")
        if not isinstance(sm, torch.Tensor) or tuple(sm.shape) != (B, C) or sm.dtype != torch.uint8:
            raise ValueError(f"state.stream_map must be a uint8 tensor [{B}, {C}], got "
                             f"{(tuple(sm.shape), sm.dtype) if isinstance(sm, torch.Tensor) else type(sm)}")
        lanes = _decode_map(sm)
        if torch.compiler.is_compiling() or (sm.is_cuda and torch.cuda.is_current_stream_capturing()):
            return ram.to(self.router_w.dtype), lanes  # the check below reads its result on the host
        bad = (lanes.sort(dim=-1).values != torch.arange(4, device=sm.device)).any(dim=-1).flatten().nonzero()
        if bad.numel():
            i = int(bad[0])
            raise ValueError(f"state.stream_map[{i // C}, {i % C}] = 0x{int(sm.flatten()[i]):02X}: its lanes "
                             f"are not a permutation of 0..3")
        return ram.to(self.router_w.dtype), lanes

    def _check_follow(self, follow, B: int, device) -> Tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        want = (c["n_events"], B, c["core_count"])
        gate, slot = follow[0], follow[1]
        for name, t, top in (("gate", gate, 1), ("slot", slot, 3)):
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != want:
                raise ValueError(f"follow {name} must be a tensor {list(want)}, got "
                                 f"{list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
            if t.numel() and (int(t.min()) < 0 or int(t.max()) > top):
                raise ValueError(f"follow {name} values must be in 0..{top}")
        return gate.to(device, torch.bool), slot.to(device, torch.int64)

"""A byte-level decoder-only language model with a Swap-FFN in every block (shared by train.py and serve.py).

Each block is x + attn(norm1(x)), then x + SwapFFN(norm2(x)): causal multi-head self-attention in plain
PyTorch (with a KV cache for serving), then the Swap-FFN's delta added to the residual. The Swap-FFN is
recurrent per sequence (its RAM state persists across tokens, docs/SPEC.md section 7), so the PyTorch model
runs it token by token in order, carrying its state; attention sees the whole sequence at once.

A saved model is a directory: `lm.pt` (the config and every weight but the Swap-FFNs') and one engine
model file per block, `ffn0.safetensors`, `ffn1.safetensors`, ... (swapffn.torch.SwapFFN.save_safetensors:
what swapffn.Engine.load loads bit for bit).
"""
from __future__ import annotations

import dataclasses
import math
import os
import pickle
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import swapffn
from swapffn.torch import SwapFFN

VOCAB = 256  # byte tokens
LM_FILE = "lm.pt"
PRESETS = ("tiny", "default")
NORM_EPS = 1e-6


class ModelError(ValueError):
    """A model directory that cannot be loaded or served as it is; the message names the file and the problem."""


def ffn_file(layer: int) -> str:
    """The name of block `layer`'s Swap-FFN model file in a model directory."""
    return f"ffn{layer}.safetensors"


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """The language model's shape. Its d_model is the Swap-FFN's (the residual stream is the layer's input)."""
    d_model: int
    n_layers: int
    n_heads: int
    max_seq: int  # positions: the learned position table and the KV cache of one sequence
    ffn: Dict[str, Any]  # the Swap-FFN config of every block (SPEC section 1)
    tie_embeddings: bool = True  # the LM head is the token embedding

    def __post_init__(self) -> None:
        for name in ("d_model", "n_layers", "n_heads", "max_seq"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ModelError(f"LM config: {name} = {v!r} must be a positive integer")
        if self.d_model % self.n_heads:
            raise ModelError(f"LM config: d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")
        if self.ffn.get("d_model") != self.d_model:
            raise ModelError(f"LM config: the Swap-FFN's d_model is {self.ffn.get('d_model')}, the LM's is "
                             f"{self.d_model}")

    def shape(self) -> Dict[str, Any]:
        """The fields lm.pt stores: all but the Swap-FFN config, which the engine files hold."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "ffn"}


def preset(name: str) -> LMConfig:
    """A named LM around the Swap-FFN preset of the same name: "tiny" (2 blocks: seconds on a CPU) or
    "default" (SPEC section 1's shape, d_model 1024, 4 blocks: the engine's real workload)."""
    shapes = {"tiny": dict(n_layers=2, n_heads=4, max_seq=256), "default": dict(n_layers=4, n_heads=16, max_seq=512)}
    if name not in shapes:
        raise ModelError(f"unknown LM preset '{name}' (known: {', '.join(PRESETS)})")
    ffn = swapffn.config_preset(name)
    return LMConfig(d_model=ffn["d_model"], ffn=ffn, **shapes[name])


def check_ffn_configs(d_model: int, configs: Sequence[Dict[str, Any]], names: Sequence[str]) -> None:
    """Refuses Swap-FFN configs (one per block, from the files `names`) that do not fit the LM: a d_model
    other than the LM's, or a config that differs between blocks (the engines and the KV cache assume one
    shape). Raises ModelError naming the file and the fields."""
    for name, c in zip(names, configs):
        if c["d_model"] != d_model:
            raise ModelError(f"{name}: the Swap-FFN's d_model is {c['d_model']}, the LM's is {d_model}")
    first = configs[0]
    for name, c in zip(names[1:], configs[1:]):
        diff = [f"{k} {c.get(k)!r} vs {first.get(k)!r}" for k in sorted(set(c) | set(first))
                if c.get(k) != first.get(k)]
        if diff:
            raise ModelError(f"{name}: its Swap-FFN config differs from {names[0]}'s (every block must have the "
                             f"same): {', '.join(diff)}")


class Attention(nn.Module):
    """Causal multi-head self-attention: whole sequences (training, prefill) or one token per row against a
    KV cache (decode)."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def _qkv(self, x: torch.Tensor):
        """x [..., D] -> q, k, v, each [..., H, D / H]."""
        return self.qkv(x).unflatten(-1, (3, self.n_heads, -1)).unbind(-3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, D] -> [B, T, D], each position attending to itself and the earlier ones."""
        q, k, v = (t.transpose(1, 2) for t in self._qkv(x))  # [B, H, T, hd]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).flatten(2))

    def prefill(self, x: torch.Tensor, kv_cache: torch.Tensor, row: int) -> torch.Tensor:
        """A prompt x [T, D] from position 0: causal attention over it, its keys and values written into the
        cache row `row` (kv_cache: [rows, H, 2, max_seq, hd], keys then values). Returns [T, D]."""
        q, k, v = (t.transpose(0, 1) for t in self._qkv(x))  # [H, T, hd]
        kv_cache[row, :, 0, :x.shape[0]] = k
        kv_cache[row, :, 1, :x.shape[0]] = v
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(0, 1).flatten(1))

    def step(self, x: torch.Tensor, kv_cache: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor,
             hidden: torch.Tensor) -> torch.Tensor:
        """One token per row: x [B, D] at positions pos [B] of the sequences in cache rows `rows` [B] (int64).
        Writes each row's key and value at its position, then attends to positions 0..pos; hidden is
        step_mask's bias (shared by the blocks). No host synchronisation and fixed shapes, so it can be
        captured in a CUDA graph.
        One query per row and head: batched products over the gathered cache rather than SDPA, whose kernels
        tile the queries (64 rows for one) and ran one CTA per row and head (60 us per block at B = 1)."""
        qkv = self.qkv(x).unflatten(-1, (3, self.n_heads, -1))  # [B, 3, H, hd]
        kv_cache[rows, :, :, pos] = qkv[:, 1:].transpose(1, 2)  # [B, H, 2, hd]: one write for both
        kv = kv_cache[rows]  # [B, H, 2, max_seq, hd]: keys and values of a head adjacent, one gather
        q = (qkv[:, 0] * qkv.shape[-1] ** -0.5).flatten(0, 1)[:, None]  # [B H, 1, hd]
        scores = torch.baddbmm(hidden, q, kv[:, :, 0].flatten(0, 1).transpose(1, 2))  # [B H, 1, max_seq]
        y = torch.bmm(torch.softmax(scores, -1), kv[:, :, 1].flatten(0, 1))  # [B H, 1, hd]
        return self.proj(y.view(x.shape[0], -1))


def step_mask(pos: torch.Tensor, max_seq: int, n_heads: int, dtype: torch.dtype) -> torch.Tensor:
    """The decode step's attention bias [B * n_heads, 1, max_seq] (row b's heads together) in the
    activations' dtype: 0 at the positions 0..pos[b] that row b sees, -inf beyond."""
    hidden = torch.arange(max_seq, device=pos.device) > pos[:, None]
    bias = torch.zeros(hidden.shape, device=pos.device, dtype=dtype).masked_fill_(hidden, float("-inf"))
    return bias.repeat_interleave(n_heads, 0)[:, None]


class KVCache:
    """Keys and values of `slots` sequences for every block, kv [n_layers, slots + 1, H, 2, max_seq, hd] (a
    head's keys, then its values: one write and one gather per block and step); k and v are views of it. Row
    `slots` is scratch: padding rows of a batch write there, so a fixed-shape step never touches a sequence."""

    def __init__(self, cfg: LMConfig, slots: int, device: torch.device, dtype: torch.dtype = torch.float32) -> None:
        shape = (cfg.n_layers, slots + 1, cfg.n_heads, 2, cfg.max_seq, cfg.d_model // cfg.n_heads)
        self.kv = torch.zeros(shape, device=device, dtype=dtype)
        self.k, self.v = self.kv[:, :, :, 0], self.kv[:, :, :, 1]  # [n_layers, slots + 1, H, max_seq, hd]
        self.scratch = slots


class Block(nn.Module):
    """The norms and attention of one block; its Swap-FFN is LM.ffns[i] (or an engine, when served)."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.d_model, eps=NORM_EPS)
        self.attn = Attention(cfg.d_model, cfg.n_heads)
        self.norm2 = nn.RMSNorm(cfg.d_model, eps=NORM_EPS)


class LM(nn.Module):
    """The language model. With with_ffn=False it holds no Swap-FFNs: what a server runs around its engines."""

    def __init__(self, cfg: LMConfig, with_ffn: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(VOCAB, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        # Kept apart from the blocks so that the Swap-FFNs' weights stay out of lm.pt.
        self.ffns = nn.ModuleList(SwapFFN.from_config(cfg.ffn) for _ in range(cfg.n_layers)) if with_ffn else None
        self.norm = nn.RMSNorm(cfg.d_model, eps=NORM_EPS)
        self.head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, VOCAB, bias=False)
        self._init_glue()

    @torch.no_grad()
    def _init_glue(self) -> None:
        """GPT-2's initialisation for everything but the Swap-FFNs (they keep docs/MODEL.md's): small normal
        weights, the residual projections scaled down with depth."""
        for name, p in self.named_parameters():
            if name.startswith("ffns.") or p.dim() < 2:
                continue
            std = 0.02 / math.sqrt(2 * self.cfg.n_layers) if name.endswith("attn.proj.weight") else 0.02
            nn.init.normal_(p, std=std)

    def embed(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Token plus position embedding: tokens and pos of the same shape -> [..., D]."""
        return self.tok_emb(tokens) + self.pos_emb(pos)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The residual stream [..., D] -> next-byte logits [..., 256]."""
        return F.linear(self.norm(x), self.tok_emb.weight if self.head is None else self.head.weight)

    def forward(self, tokens: torch.Tensor, bptt: Optional[int] = 1, checkpoint_ffn: bool = False) -> torch.Tensor:
        """tokens [B, T] (int64, positions 0..T-1) -> logits [B, T, 256]. Block by block: attention over the
        whole sequence, then the Swap-FFN token by token from its initial state.

        bptt: the gradient flows through the Swap-FFN's state across this many tokens (None: all of them);
        the forward values are the same either way. Why 1 by default: the straight-through gradient through
        the RAM grows about 100-fold per token at the initialisation (measured on the tiny config), so it
        overflows within 8 tokens; attention still carries the gradient across tokens. checkpoint_ffn: keep
        only each token's Swap-FFN input and state for the backward pass and recompute the rest (the default
        shape's activations are hundreds of MB per token and row)."""
        if self.ffns is None:
            raise ModelError("this LM was built without its Swap-FFNs (with_ffn=False): serve it with the engines")
        b, t = tokens.shape
        if t > self.cfg.max_seq:
            raise ModelError(f"a sequence of {t} tokens exceeds max_seq {self.cfg.max_seq}")
        x = self.embed(tokens, torch.arange(t, device=tokens.device).expand(b, t))
        for block, ffn in zip(self.blocks, self.ffns):
            x = x + block.attn(block.norm1(x))
            h = block.norm2(x)
            state, deltas = ffn.init_state(b, device=x.device), []
            for i in range(t):  # the Swap-FFN's RAM carries from token to token, in order
                if checkpoint_ffn and torch.is_grad_enabled():
                    delta, state = checkpoint(ffn, h[:, i], state, use_reentrant=False)
                else:
                    delta, state = ffn(h[:, i], state)
                deltas.append(delta)
                if bptt is not None and (i + 1) % bptt == 0:
                    state = type(state)(state.ram.detach(), state.stream_map)
            x = x + torch.stack(deltas, dim=1)
        return self.logits(x)

    def save(self, directory: Union[str, os.PathLike]) -> None:
        """Writes the model directory: lm.pt and one engine model file per block (bf16, as the engine stores
        parameters, so a model loaded back rounds the Swap-FFNs' weights to bf16)."""
        if self.ffns is None:
            raise ModelError("this LM holds no Swap-FFNs (with_ffn=False): save the model it was loaded from")
        os.makedirs(directory, exist_ok=True)
        glue = {k: v.detach().cpu() for k, v in self.state_dict().items() if not k.startswith("ffns.")}
        torch.save({"config": self.cfg.shape(), "weights": glue}, os.path.join(directory, LM_FILE))
        for i, ffn in enumerate(self.ffns):
            ffn.save_safetensors(os.path.join(directory, ffn_file(i)))

    @classmethod
    def load(cls, directory: Union[str, os.PathLike], ffn_configs: Optional[List[Dict[str, Any]]] = None,
             device: Optional[torch.device] = None) -> "LM":
        """A saved model. Without ffn_configs, with its Swap-FFNs loaded from the engine files (bit for bit
        what the engines load); with the engines' configs (one per block), without Swap-FFNs, for a server.
        Either way the Swap-FFN configs are checked against the LM (check_ffn_configs). Raises ModelError."""
        shape, weights = read_saved(directory)
        names = [ffn_file(i) for i in range(shape["n_layers"])]
        ffns = None
        if ffn_configs is None:
            try:
                ffns = [SwapFFN.from_safetensors(os.path.join(directory, n)) for n in names]
            except (OSError, ValueError) as e:
                raise ModelError(f"{directory}: {e}") from None
            ffn_configs = [f.config for f in ffns]
        if len(ffn_configs) != len(names):
            raise ModelError(f"{directory}: {len(ffn_configs)} Swap-FFN configs for {len(names)} blocks")
        check_ffn_configs(shape["d_model"], ffn_configs, names)
        model = cls(LMConfig(ffn=dict(ffn_configs[0]), **shape), with_ffn=False)
        try:
            model.load_state_dict(weights)
        except RuntimeError as e:
            raise ModelError(f"{os.path.join(directory, LM_FILE)}: weights do not fit its config: {e}") from None
        if ffns is not None:
            model.ffns = nn.ModuleList(ffns)
        return model if device is None else model.to(device)


def read_saved(directory: Union[str, os.PathLike]) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """What a model directory's lm.pt holds: the LM fields (LMConfig.shape()) and the weights of all but the
    Swap-FFNs. Raises ModelError."""
    path = os.path.join(directory, LM_FILE)
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise ModelError(f"{path}: cannot load it: {e}") from None
    if not isinstance(blob, dict) or "config" not in blob or "weights" not in blob:
        raise ModelError(f"{path}: not an LM saved by LM.save (no config or weights)")
    known = {f.name for f in dataclasses.fields(LMConfig)} - {"ffn"}
    shape = blob["config"]
    if not isinstance(shape, dict) or set(shape) != known:
        raise ModelError(f"{path}: its config has fields {sorted(shape) if isinstance(shape, dict) else shape!r}, "
                         f"expected {sorted(known)}")
    return shape, blob["weights"]

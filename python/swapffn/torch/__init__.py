"""The PyTorch layer of swapffn: the engine's slot step as a PyTorch custom op (`step`), so that it
works under torch.compile and torch.cuda.graph, and SPEC as a trainable module (`SwapFFN`).

The pool's state lives in the engine, not in a tensor, so each StatePool carries a one-element
`token` tensor that the op declares as mutated and bumps: torch then orders every step of a pool
after the previous one and never merges or drops a step.
"""
from __future__ import annotations

import itertools
import weakref

import torch

import swapffn

from .module import SwapFFN

__all__ = ["step", "SwapFFN", "register"]

_pools: "weakref.WeakValueDictionary[int, swapffn.StatePool]" = weakref.WeakValueDictionary()
_ids = itertools.count(1)


@torch.compiler.disable  # host bookkeeping, outside any compiled graph
def register(pool: "swapffn.StatePool") -> int:
    """The integer handle by which the custom op names `pool` (made once per pool)."""
    if getattr(pool, "_op_handle", None) is None:
        pool._op_handle = next(_ids)
        dev = torch.device("cuda", pool.engine.device) if not pool.engine._h.on_host else torch.device("cpu")
        pool.token = torch.zeros(1, dtype=torch.int64, device=dev)
        _pools[pool._op_handle] = pool
    return pool._op_handle


@torch.library.custom_op("swapffn::step", mutates_args=("token",))
def _step(x: torch.Tensor, slot_ids: torch.Tensor, token: torch.Tensor, pool_handle: int) -> torch.Tensor:
    pool = _pools.get(pool_handle)
    if pool is None:
        raise swapffn.Error(f"pool handle {pool_handle}: no such pool (it was freed)")
    out = pool.engine.step(x.detach(), pool, slot_ids)  # step() refused a graph to keep, outside
    token.add_(1)
    return out


@_step.register_fake
def _(x, slot_ids, token, pool_handle):
    return x.new_empty(x.shape, dtype=torch.float32)


def step(x: torch.Tensor, pool: "swapffn.StatePool", slot_ids: torch.Tensor) -> torch.Tensor:
    """The engine's slot step (swapffn.Engine.step) as the custom op swapffn::step: x [B, D]
    (float32 or bfloat16), slot_ids [B] int32 on x's device (-1: padding). Returns delta [B, D]."""
    if isinstance(x, torch.Tensor):
        swapffn._refuse_grad(x, "x")
    if not isinstance(slot_ids, torch.Tensor):
        slot_ids = torch.tensor(slot_ids, dtype=torch.int32, device=x.device)
    handle = getattr(pool, "_op_handle", None)
    if handle is None:  # under torch.compile(fullgraph=True), register the pool first, outside
        handle = register(pool)
    return _step(x, slot_ids, pool.token, handle)

"""swapffn: the Swap-FFN decode engine from Python, with the recurrent state of many sequences held
in slots (SPEC section 7).

    import swapffn, numpy as np
    engine = swapffn.Engine.load("m.safetensors")           # backend "auto": fused on a Hopper GPU
    pool = swapffn.StatePool(engine, slots=64)
    pool.reset([3, 7])                                   # two sequences join
    x = np.random.randn(2, engine.config["d_model"]).astype(np.float32)
    delta = engine.step(x, pool, [3, 7])                 # [2, D]; slots 3 and 7 advance

Host arrays (NumPy, CPU torch tensors) run through a host round trip on any backend; CUDA tensors
(torch) run on the engine's device on torch's current stream, so a step can be captured in the
caller's CUDA graph once its batch size has run outside capture (valid while
engine.buffers_generation is unchanged: the engine's buffers grow to the largest batch so far and
serve every smaller one in place). A slot id of -1 is a padding row:
its delta is zero and no slot changes.

Bad arguments are refused with swapffn.Error (a ValueError) naming the argument, before anything
changes; a file that cannot be opened, read or written raises swapffn.FileError (also an OSError),
and a backend with no GPU to run on swapffn.NoGpuError (both are swapffn.Error too). Threads:
calls on one engine and its pools take turns (each holds the engine's lock with the GIL released),
so two threads stepping the same slot apply both steps, one after the other; a CUDA step on another
stream than the engine's last work waits for it (outside graph captures; docs/PYTHON.md).
"""
from __future__ import annotations

import json
import logging
import operator
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _swapffn
from ._swapffn import Error, FileError, NoGpuError

__all__ = ["Engine", "StatePool", "Error", "FileError", "NoGpuError", "PADDING", "MAX_VALUE", "AUTO", "backends",
           "gpu", "init_model", "config_preset", "CONFIG_PRESETS", "__version__"]

__version__ = _swapffn.version  # the engine's, as `swapffn --version` prints it

# An array argument or result: a NumPy array (or anything np.asarray takes) or a torch tensor.
Array = Any
PADDING = -1  # a slot id that marks a padding row
AUTO = "auto"  # the backend that suits the machine: fused on a Hopper GPU, else the reference
CONFIG_PRESETS = tuple(_swapffn.config_presets())  # the named configs of SPEC section 1 ("default", "tiny")
_log = logging.getLogger("swapffn")
MAX_VALUE = _swapffn.max_value  # the largest |x| the engines accept (SPEC section 4: 2^32)


def _index(v, what: str) -> int:
    """v as a Python int (int, NumPy or torch integer scalars; never a bool or a float)."""
    if isinstance(v, (bool, np.bool_)):
        raise Error(f"{what}: expected an integer, got a bool ({v!r})")
    try:
        return operator.index(v)
    except TypeError:
        raise Error(f"{what}: expected an integer, got {type(v).__name__} {v!r}") from None


def _slot(slot, pool: "StatePool", what: str = "slot") -> int:
    s = _index(slot, what)
    if not 0 <= s < pool.slots:
        raise Error(f"{what} = {s} is out of range: must be in [0, {pool.slots - 1}]")
    return s


def _path(path, what: str) -> str:
    try:
        p = os.fspath(path)
    except TypeError:
        raise Error(f"{what}: expected a path (str or os.PathLike), got {type(path).__name__}") from None
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not p:
        raise Error(f"{what}: the path is empty")
    nul = p.find("\0")
    if nul >= 0:
        raise Error(f"{what}: the path holds a NUL byte at offset {nul}")
    return p


def _is_bfloat16(dtype) -> bool:
    return getattr(dtype, "name", "") == "bfloat16"  # NumPy's bfloat16 comes from ml_dtypes


def _check_values(a: np.ndarray, what: str) -> None:
    """Refuses the first value of a host array that is non-finite or beyond MAX_VALUE (by flat index)."""
    bad = ~np.isfinite(a)
    if not bad.any():
        bad = np.abs(a) > MAX_VALUE
        if not bad.any():
            return
        i = int(np.flatnonzero(bad)[0])
        raise Error(f"{what}: value out of range at index {i} ({a.reshape(-1)[i]:g}): the engines accept "
                    f"magnitudes up to 2^32 (SPEC section 4)")
    i = int(np.flatnonzero(bad)[0])
    raise Error(f"{what}: non-finite value at index {i} ({a.reshape(-1)[i]})")


def backends(runnable: bool = True) -> List[str]:
    """The backends that run here: "reference" always, the GPU ones ("unfused", "fused", "fused-fp8")
    where this build has CUDA and the process sees a Hopper GPU. runnable=False: every backend
    compiled into this build. (Engine.load also takes "auto", which picks one of these.)"""
    return list(_swapffn.runnable_backends() if runnable else _swapffn.backends())


def _preset_name(config, what: str = "config") -> str:
    if not isinstance(config, str):
        raise Error(f"{what}: expected a preset name (str), got {type(config).__name__}")
    if config not in CONFIG_PRESETS:
        raise Error(f"{what}: unknown preset '{config}' (known: {', '.join(CONFIG_PRESETS)})")
    return config


def config_preset(name: str) -> Dict[str, Any]:
    """A named config of SPEC section 1 ("default" or "tiny") as a dict of its fields."""
    return json.loads(_swapffn.config_preset(_preset_name(name, "name")))


def init_model(path: str, config: str = "default", seed: int = 1) -> None:
    """Writes a model with random parameters of a preset config ("default" or "tiny"), as
    `swapffn init` does (the same default)."""
    _preset_name(config)
    seed = _index(seed, "seed")
    if not 0 <= seed < 2**64:
        raise Error(f"seed = {seed} is out of range: must be in [0, 2^64)")
    _swapffn.init_model(_path(path, "path"), config, seed)


def gpu() -> Dict[str, Any]:
    """The GPU this process sees: present, name (or why absent), hopper."""
    present, name, hopper = _swapffn.gpu()
    return {"present": present, "name" if present else "why_absent": name, "hopper": hopper}


def _torch():
    try:
        import torch
    except ImportError:  # torch is optional: NumPy arrays need none of it
        return None
    return torch


def _is_torch(a) -> bool:
    t = _torch()
    return t is not None and isinstance(a, t.Tensor)


def _refuse_grad(x, what: str) -> None:
    """The engine computes no gradients: a tensor that asks for them is refused under grad mode,
    rather than silently cut from the graph. torch.no_grad() or x.detach() says so deliberately."""
    if x.requires_grad and _torch().is_grad_enabled():
        raise Error(f"{what}: the tensor requires grad, and the engine computes no gradients (it is for "
                    f"inference): call under torch.no_grad() or pass {what}.detach(); to train, use "
                    "swapffn.torch.SwapFFN")


class Engine:
    """One model on one backend ("reference", "unfused", "fused" or "fused-fp8") and device."""

    def __init__(self, handle: Any, path: str) -> None:  # use Engine.load
        self._h = handle
        self.path = path
        self.config = json.loads(handle.config_json)

    @classmethod
    def load(cls, path: str, backend: str = AUTO, device: int = 0, threads: int = 0, graph: bool = True,
             kernels: str = "") -> "Engine":
        """Loads a model file (safetensors, as `swapffn init` writes) onto `backend`: one of
        backends(), or "auto" (on a Hopper GPU fused, or fused-fp8 for a model stored in fp8; else
        the reference; logged on the "swapffn" logger at INFO, and engine.name says which).

        threads: CPU threads of the reference (0: all). graph: GPU backends capture a step in a CUDA
        graph. kernels: the fused backends' pinned kernel choices, as `swapffn run --kernels`.
        """
        device = _index(device, "device")
        if not 0 <= device < 2**31:
            raise Error(f"device must be a CUDA device index >= 0, got {device!r}")
        threads = _index(threads, "threads")
        if not 0 <= threads <= 1024:
            raise Error(f"threads = {threads} is out of range: must be in [0, 1024] (0: all cores)")
        for name, v in (("backend", backend), ("kernels", kernels)):
            if not isinstance(v, str):
                raise Error(f"{name}: expected a str, got {type(v).__name__}")
        path = _path(path, "path")
        handle = _swapffn.load_engine(path, backend, device, threads, bool(graph), kernels)
        if handle.backend_why:
            _log.info("%s", handle.backend_why)
        return cls(handle, path)

    @property
    def name(self) -> str:
        return self._h.name

    @property
    def device(self) -> int:
        return self._h.device

    @property
    def buffers_generation(self) -> Optional[int]:
        """GPU backends: how many times the engine's per-row buffers have moved (None on the host).
        They grow only, to the largest batch so far, and serve every smaller batch in place; a CUDA
        graph that captured steps replays onto the buffers of its capture and is valid while this is
        unchanged (capture again otherwise). Running the largest batch first keeps every graph valid."""
        return self._h.buffers_generation

    def info(self) -> Dict[str, Any]:
        return {"backend": self.name, "device": self.device, "on_host": self._h.on_host, "model": self.path,
                "config": dict(self.config), "gpu": gpu()}

    def step(self, x: Array, pool: "StatePool", slot_ids: Array, out: Optional[Array] = None,
             trace: Optional[dict] = None) -> Array:
        """One decode step: x [B, D] (fp32 or bf16), slot_ids [B] int (distinct slots of `pool`, or -1
        for padding rows). Returns delta [B, D] fp32 (written into `out` when given), of x's kind:
        a NumPy array for host input, a torch tensor for torch input. With trace={} (host input
        only), trace["gate"] and trace["slot"] receive the decisions [E, B', C] of the B' non-padding
        rows. Bad arguments (x, slot_ids, out, trace; x non-finite or beyond MAX_VALUE) are refused
        before anything changes. A GPU step runs on the pool's slots in place: a fault after it has
        started leaves its slots torn (get, save and steps that name them refuse until they are
        reset or set), never silently wrong.
        """
        self._check_pool(pool)
        if trace is not None and not isinstance(trace, dict):
            raise Error(f"trace: expected a dict to receive the decisions, got {type(trace).__name__}")
        if _is_torch(x) and x.is_cuda:
            if trace is not None:
                raise Error("trace: decisions are recorded on the host path only (pass host arrays)")
            return self._step_cuda(x, pool, slot_ids, out)
        xh, as_torch = self._host_x(x, "x")
        b = self._rows(xh.shape, "x")
        ids = self._ids_host(slot_ids, b, pool)
        self._check_host_out(out, (b, self.config["d_model"]), "out")
        _check_values(xh, "x")
        return self._step_host(xh, as_torch, pool, ids, out, trace)

    def _check_pool(self, pool) -> None:
        if not isinstance(pool, StatePool) or pool.engine is not self:
            raise Error("pool: a StatePool made for this engine is required")

    def decode(self, xs: Array, pool: "StatePool", slot_ids: Array, out: Optional[Array] = None) -> Array:
        """T steps of the same rows: xs [T, B, D] (fp32 or bf16); returns deltas [T, B, D] fp32 (into
        `out` when given). On CUDA tensors outside a capture, each step is one replay of the engine's
        own graph of the slot step, joined to torch's current stream before and after, with no host
        synchronisation between steps; inside the caller's capture the steps are recorded one by one.
        Host arrays run step by step through the host path, every argument (every step's x
        included) checked before the first step."""
        self._check_pool(pool)
        if not hasattr(xs, "shape") or len(xs.shape) != 3:
            raise Error(f"xs: expected an array [T, B, D], got {getattr(xs, 'shape', type(xs).__name__)}")
        if _is_torch(xs) and xs.is_cuda:
            t = _torch()
            if not t.cuda.is_current_stream_capturing():
                return self._decode_cuda(xs, pool, slot_ids, out)
            if out is None:
                out = t.empty(xs.shape, dtype=t.float32, device=xs.device)
            else:
                self._check_cuda_out(out, tuple(xs.shape), "out")
            for i in range(xs.shape[0]):
                self.step(xs[i], pool, slot_ids, out=out[i])
            return out
        xh, as_torch = self._host_x(xs, "xs")
        steps, b = xh.shape[0], xh.shape[1]
        self._rows(xh.shape[1:], "xs[t]")
        ids = self._ids_host(slot_ids, b, pool)
        shape = (steps, b, self.config["d_model"])
        self._check_host_out(out, shape, "out")
        _check_values(xh, "xs")
        res = np.empty(shape, dtype=np.float32)
        for i in range(steps):
            res[i] = self._step_host(xh[i], False, pool, ids, None, None)
        return self._deliver(res, as_torch, out)

    def _decode_cuda(self, xs, pool, slot_ids, out):
        if not isinstance(pool, StatePool) or pool.engine is not self:
            raise Error("pool: a StatePool made for this engine is required")
        t = _torch()
        steps, b = xs.shape[0], xs.shape[1]
        dev = t.device("cuda", self.device)
        d = self.config["d_model"]
        if xs.shape[2] != d:
            raise Error(f"xs: expected shape [T, B, {d}] (rows of d_model), got {tuple(xs.shape)}")
        if not xs.is_contiguous():
            raise Error("xs: expected a contiguous [T, B, D] tensor (call .contiguous())")
        x, ids = self._device_args(xs.reshape(steps * b, xs.shape[2]), "xs", pool, slot_ids, b)
        x = x.reshape(xs.shape)
        if out is None:
            out = t.empty((steps, b, d), dtype=t.float32, device=dev)
        else:
            self._check_cuda_out(out, (steps, b, d), "out")
        if steps:
            _swapffn.decode_device(self._h, pool._h, x, ids, out, t.cuda.current_stream(dev).cuda_stream)
        return out

    def _rows(self, shape, what: str) -> int:
        d = self.config["d_model"]
        if len(shape) != 2 or shape[1] != d:
            raise Error(f"{what}: expected shape [B, {d}] (B rows of d_model), got {tuple(shape)}")
        return shape[0]

    def _ids_host(self, slot_ids, b: int, pool: "StatePool") -> np.ndarray:
        """slot_ids as int32, every id checked as the integer it is (never wrapped into int32): each in
        [0, S) or -1, none named twice."""
        if _is_torch(slot_ids):
            slot_ids = slot_ids.detach().cpu().numpy()
        if isinstance(slot_ids, (str, bytes)) or not hasattr(slot_ids, "__len__"):
            raise Error(f"slot_ids: expected a sequence of {b} integers, got {type(slot_ids).__name__}")
        ids = np.asarray(slot_ids) if isinstance(slot_ids, np.ndarray) else np.asarray(slot_ids, dtype=object)
        if ids.ndim != 1 or ids.shape[0] != b:
            raise Error(f"slot_ids: expected {b} slot ids (one per row of x), got shape {ids.shape}")
        if ids.size and ids.dtype != object and not np.issubdtype(ids.dtype, np.integer):
            raise Error(f"slot_ids: expected integers, got dtype {ids.dtype}")
        values = [_index(v, f"slot_ids[{i}]") for i, v in enumerate(ids.tolist())]
        for i, v in enumerate(values):
            if not (0 <= v < pool.slots or v == PADDING):
                raise Error(f"slot_ids[{i}] = {v} is out of range: must be in [0, {pool.slots - 1}] or "
                            f"{PADDING} (padding)")
        ids = np.array(values, dtype=np.int32)  # exact: every value is in [-1, S)
        _swapffn.check_slot_ids(values, pool.slots)
        return ids

    def _host_x(self, x, what: str):
        """x as a C-contiguous float32 NumPy array (a copy where it must convert), and whether it
        came as a torch tensor."""
        if _is_torch(x):
            _refuse_grad(x, what)
            return np.ascontiguousarray(x.detach().float().cpu().numpy()), True
        if not hasattr(x, "__array__") and not isinstance(x, (list, tuple)):
            raise Error(f"{what}: expected an array of float32 or bfloat16 values, got {type(x).__name__}")
        xh = np.asarray(x)
        if xh.dtype != np.float32:
            if not (np.issubdtype(xh.dtype, np.floating) or _is_bfloat16(xh.dtype)):
                raise Error(f"{what}: expected float32 or bfloat16 values, got dtype {xh.dtype}")
            xh = xh.astype(np.float32)
        return np.ascontiguousarray(xh), False

    def _check_host_out(self, out, shape, what: str) -> None:
        """out, where given, must be a float32 array of exactly `shape` that can be written: a NumPy
        array or a torch tensor (any device). Never cast or broadcast."""
        if out is None:
            return
        if _is_torch(out):
            t = _torch()
            if out.dtype != t.float32 or tuple(out.shape) != shape or not out.is_contiguous():
                raise Error(f"{what}: expected a contiguous float32 tensor of shape {shape}, got {out.dtype} "
                            f"{tuple(out.shape)}")
            if out.requires_grad:
                raise Error(f"{what}: a tensor that requires grad (the engine is for inference: pass one "
                            "without, or call under torch.no_grad() with a detached out)")
            return
        if not isinstance(out, np.ndarray):
            raise Error(f"{what}: expected a NumPy float32 array (or torch tensor) of shape {shape}, got "
                        f"{type(out).__name__}")
        if out.dtype != np.float32 or out.shape != shape:
            raise Error(f"{what}: expected a float32 array of shape {shape}, got {out.dtype} {out.shape}")
        if not out.flags.writeable:
            raise Error(f"{what}: the array is read-only")

    def _check_cuda_out(self, out, shape, what: str) -> None:
        t = _torch()
        dev = t.device("cuda", self.device)
        if not _is_torch(out) or out.device != dev or out.dtype != t.float32 or tuple(out.shape) != shape \
                or not out.is_contiguous():
            raise Error(f"{what}: expected a contiguous float32 tensor of shape {shape} on {dev}")
        if out.requires_grad:
            raise Error(f"{what}: a tensor that requires grad (the engine is for inference)")

    def _step_host(self, xh, as_torch, pool, ids, out, trace):
        """A checked host step: xh float32 [B, D], ids int32, out checked or None."""
        res = np.empty((xh.shape[0], self.config["d_model"]), dtype=np.float32)  # out is untouched on error
        gate, slot = _swapffn.step_host(self._h, pool._h, xh, ids, res, trace is not None)
        if trace is not None:
            trace["gate"], trace["slot"] = gate, slot
        return self._deliver(res, as_torch, out)

    @staticmethod
    def _deliver(res, as_torch, out):
        if out is None:
            return _torch().from_numpy(res) if as_torch else res
        if _is_torch(out):
            out.copy_(_torch().from_numpy(res))
        else:
            out[...] = res
        return out

    def _device_args(self, x, what: str, pool, slot_ids, b: int):
        """x as a contiguous fp32 tensor of finite values on the engine's device (rows of d_model; b
        rows per step), and the slot ids there as int32, each checked outside a capture."""
        t = _torch()
        dev = t.device("cuda", self.device)
        if self._h.on_host:
            raise Error(f"{what}: backend '{self.name}' runs on the host; pass a CPU tensor or a NumPy array")
        if x.device != dev:
            raise Error(f"{what}: on {x.device}, the engine runs on {dev}")
        _refuse_grad(x, what)
        x = x.detach()
        if x.dtype == t.bfloat16:
            x = x.float()
        elif x.dtype != t.float32:
            raise Error(f"{what}: expected float32 or bfloat16, got {x.dtype}")
        if not x.is_contiguous():
            raise Error(f"{what}: expected a contiguous tensor (call .contiguous())")
        self._rows(x.shape, what)
        capturing = t.cuda.is_current_stream_capturing()
        if _is_torch(slot_ids) and slot_ids.is_cuda:
            if slot_ids.device != dev or slot_ids.dtype != t.int32 or slot_ids.shape != (b,) \
                    or not slot_ids.is_contiguous():
                raise Error(f"slot_ids: expected a contiguous int32 tensor of shape ({b},) on {dev}, got "
                            f"{slot_ids.dtype} {tuple(slot_ids.shape)} on {slot_ids.device}")
            if not capturing:  # during a capture the ids stay on the device, unchecked
                self._ids_host(slot_ids, b, pool)
            ids = slot_ids
        elif capturing:
            raise Error("slot_ids: inside a CUDA graph capture, pass a CUDA int32 tensor (a host copy cannot be "
                        "captured)")
        else:
            ids = t.from_numpy(self._ids_host(slot_ids, b, pool)).to(dev)
        if not capturing and not bool((x.abs() <= MAX_VALUE).all()):  # false for NaN and inf too
            _check_values(x.cpu().numpy(), what)
        return x, ids

    def _step_cuda(self, x, pool, slot_ids, out):
        t = _torch()
        dev = t.device("cuda", self.device)
        x, ids = self._device_args(x, "x", pool, slot_ids, self._rows(x.shape, "x"))
        b = x.shape[0]
        if out is None:
            out = t.empty((b, self.config["d_model"]), dtype=t.float32, device=dev)
        else:
            self._check_cuda_out(out, (b, self.config["d_model"]), "out")
        _swapffn.step_device(self._h, pool._h, x, ids, out, t.cuda.current_stream(dev).cuda_stream)
        return out


class StatePool:
    """The recurrent state of `slots` sequences where the engine keeps it (its GPU, or the host)."""

    def __init__(self, engine: Engine, slots: int) -> None:
        if not isinstance(engine, Engine):
            raise Error(f"engine: expected a swapffn.Engine, got {type(engine).__name__}")
        n = _index(slots, "slots")
        if not 0 < n <= 65536:
            raise Error(f"slots = {n} is out of range: must be in [1, 65536]")
        self.engine = engine
        self._h = _swapffn.make_pool(engine._h, n)

    @property
    def slots(self) -> int:
        return self._h.slots

    def reset(self, slot_ids: Sequence[int]) -> None:
        """SPEC section 3's initial state in each named slot (a sequence joins)."""
        if isinstance(slot_ids, (str, bytes)) or not hasattr(slot_ids, "__iter__") or np.ndim(slot_ids) != 1:
            raise Error(f"slot_ids: expected a sequence of slots, got {type(slot_ids).__name__} "
                        f"of {np.ndim(slot_ids)} dimensions")
        ids = [_slot(s, self, f"slot_ids[{i}]") for i, s in enumerate(slot_ids)]
        _swapffn.check_slot_ids(ids, self.slots)
        self._h.reset(ids)

    def get(self, slot: int, as_torch: bool = False) -> Tuple[Array, Array]:
        """(ram [C, 4, D], stream_map [C] uint8) of one slot: as NumPy arrays, the RAM as bf16 bits in
        uint16; with as_torch=True as CPU torch tensors, the RAM in torch.bfloat16 (the values)."""
        if not isinstance(as_torch, bool):
            raise Error(f"as_torch: expected a bool, got {type(as_torch).__name__}")
        ram, stream_map = self._h.get(_slot(slot, self))
        if not as_torch:
            return ram, stream_map
        t = _torch()
        if t is None:
            raise Error("as_torch=True needs torch, which does not import here")
        return t.from_numpy(ram.view(np.int16)).view(t.bfloat16), t.from_numpy(stream_map)

    def set(self, slot: int, ram: Array, stream_map: Array) -> None:
        """Replaces one slot's state: ram [C, 4, D] as bf16 bits (uint16), or values in a float dtype
        (NumPy or torch: bfloat16, float16, float32, float64; swapffn.torch.SwapFFN's state.ram[b]
        included) rounded to bf16 to nearest even as a RAM write rounds (SPEC section 4; float64
        through float32); stream_map [C] uint8 (four 2-bit lanes forming a permutation). Validated
        first (shapes exactly, every RAM value finite and within 2^48, every map a permutation);
        refused, the slot is unchanged."""
        slot = _slot(slot, self)
        if _is_torch(ram):
            t = _torch()
            ram = ram.detach().cpu().contiguous()
            ram = (ram.view(t.int16) if ram.dtype == t.bfloat16 else
                   ram.float() if ram.is_floating_point() else ram).numpy()
        if _is_torch(stream_map):
            stream_map = stream_map.detach().cpu().numpy()
        ram = np.ascontiguousarray(ram)
        if _is_bfloat16(ram.dtype):
            ram = ram.view(np.uint16)
        elif ram.dtype in (np.float16, np.float32, np.float64):
            ram = np.ascontiguousarray(ram, dtype=np.float32)
        if ram.dtype not in (np.uint16, np.int16, np.float32):
            raise Error(f"ram: expected bf16 bits (uint16) or float values (bfloat16, float16, float32, float64), "
                        f"got dtype {ram.dtype}")
        c, d = self.engine.config["core_count"], self.engine.config["d_model"]
        if ram.shape != (c, 4, d):
            raise Error(f"ram: expected shape ({c}, 4, {d}) ([C, 4, D]), got {ram.shape}")
        stream_map = np.ascontiguousarray(stream_map)
        if stream_map.dtype != np.uint8:
            raise Error(f"stream_map: expected uint8, got dtype {stream_map.dtype}")
        if stream_map.shape != (c,):
            raise Error(f"stream_map: expected shape ({c},) ([C]), got {stream_map.shape}")
        if ram.dtype == np.float32:
            self._h.set_f32(slot, ram, stream_map)
        else:
            self._h.set(slot, ram.view(np.uint16), stream_map)

    def load(self, slot: int, path: str) -> None:
        """A state file of one sequence (as `swapffn run --state-out` writes for B = 1) into a slot; refused
        when it was saved for another model or records no model (docs/FORMATS.md, "State")."""
        self._h.load(_slot(slot, self), _path(path, "path"))

    def save(self, slot: int, path: str) -> None:
        """One slot as a state file of one sequence, written atomically, recording this engine's model
        (never over the engine's own model file)."""
        self._h.save(_slot(slot, self), _path(path, "path"))

"""The NVFP4 kernels (docs/NVFP4.md) from Python, in the calling convention of the GPU MODE NVFP4
competition: each function takes the tensors that the problem's `generate_input` builds, in the
same order, fills the output c and returns it, so `swapffn.nvfp4.gemm(*data)` does what a
submission's `custom_kernel(data)` does.

    import swapffn.nvfp4 as nvfp4
    c = nvfp4.gemv(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)             # (M, 1, L)
    c = nvfp4.gemm(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)             # (M, N, L)
    c = nvfp4.dual_gemm_swiglu(a, b1, b2, sfa, sfb1, sfb2, sfa_permuted, sfb1_permuted, sfb2_permuted, c)
    cs = nvfp4.grouped_gemm(abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes)

The tensors (L is the batch; every operand is K-major):
- data a, b, b1, b2: packed e2m1, dtype float4_e2m1fn_x2 or uint8, shape (rows, K/2, L), element 2j
  of a row in the low nibble of byte j and 2j+1 in the high one; laid out as the competition's
  permute(1, 2, 0) of a contiguous (L, rows, K/2) tensor: strides (K/2, 1, rows*K/2). The GEMV's b
  may store any number of rows per batch (the competition pads it to 128); row 0 is used.
- plain scales sfa, sfb, ...: float8_e4m3fn, one per 16 elements, (rows, K/16, L), strides
  (K/16, 1, rows*K/16).
- permuted scales sfa_permuted, ... (the grouped problem's sfasfb_reordered_tensors): float8_e4m3fn,
  the blocked 128x4 layout of cuBLAS block-scaled GEMMs as the competition views it,
  (32, 4, ceil(rows/128), 4, ceil(K/64), L): a contiguous (L, ceil(rows/128), ceil(K/64), 32, 4, 4)
  tensor permuted by (3, 4, 1, 5, 2, 0). Its padding rows are never read.
  Of an operand's two scale tensors the permuted one is used when given, else the plain one (either
  may be None); the unused one is not looked at (the grouped problem's plain scales are on the host).
- c: float16, (M, N, L), strides (N, 1, M*N) (GEMV: (M, 1, L)); every element is written.

c = fp16(sum over k of a*sfa * b*sfb), values dequantized exactly and summed in fp32; the dual GEMM
gives fp16(silu(a b1^T) * (a b2^T)) with silu and the product in fp32, the grouped GEMM one such
GEMM per group (L = 1 each, at most 64 groups, each with its own M, N and K).

Everything runs on one Hopper GPU on torch's current stream, asynchronously (capturable in a CUDA
graph). Checked before anything runs, naming the argument: dtypes (TypeError), shapes, strides,
devices, K (a multiple of 64 for the GEMV, of 256 for the others) and alignment (data 16 bytes,
scales and c 4) (swapffn.Error, a ValueError). The split-K workspace is kept per device and stream
(the kernels leave it zeroed); during a CUDA graph capture each call allocates its own.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch

from . import _swapffn
from ._swapffn import Error

__all__ = ["gemv", "gemm", "dual_gemm_swiglu", "grouped_gemm", "GEMV_K_MULTIPLE", "GEMM_K_MULTIPLE", "MAX_GROUPS"]

# As include/swapffn/nvfp4/nvfp4.hpp (a test compares them with the CUDA build's).
GEMV_K_MULTIPLE = 64
GEMM_K_MULTIPLE = 256
MAX_GROUPS = 64
_DATA_ALIGN, _SCALE_ALIGN, _C_ALIGN = 16, 4, 4

_FP4 = tuple(d for d in (getattr(torch, "float4_e2m1fn_x2", None), torch.uint8) if d is not None)
_E4M3 = (torch.float8_e4m3fn,)
_FP16 = (torch.float16,)

_workspaces: Dict[Tuple[int, int], torch.Tensor] = {}  # (device, stream) -> zeroed bytes the kernels leave zeroed
_gpu_refusals: Dict[int, str] = {}  # device index -> why it cannot run the kernels ("" when it can)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _dtype_name(d) -> str:
    return str(d).replace("torch.", "")


class _Call:
    """The checks of one call: each message names the function and the argument."""

    def __init__(self, op: str):
        self.op = op
        self.used: List[Tuple[str, torch.Tensor]] = []  # the tensors the kernel reads or writes

    def fail(self, name: str, msg: str, kind=Error):
        raise kind(f"nvfp4.{self.op}: {name}: {msg}")

    def tensor(self, name: str, t, dtypes, what: str) -> torch.Tensor:
        if not isinstance(t, torch.Tensor):
            self.fail(name, f"expected a torch.Tensor ({what}), got {type(t).__name__}", TypeError)
        if t.dtype not in dtypes:
            self.fail(name, f"expected dtype {' or '.join(map(_dtype_name, dtypes))}, got {_dtype_name(t.dtype)}",
                      TypeError)
        self.used.append((name, t))
        return t

    def layout(self, name: str, t: torch.Tensor, shape, strides, what: str, align: int) -> None:
        shape = tuple(shape)
        if tuple(t.shape) != shape:
            self.fail(name, f"expected shape {shape} {what}, got {tuple(t.shape)}")
        if any(n > 1 and s != e for n, s, e in zip(shape, t.stride(), strides)):
            self.fail(name, f"expected strides {tuple(strides)} {what}, got {t.stride()}")
        if t.data_ptr() % align:
            self.fail(name, f"must start {align}-byte aligned, starts at {t.data_ptr():#x} (pass a fresh tensor)")

    def dims(self, name: str, a) -> Tuple[int, int, int]:
        """(rows, K, L) of the data tensor `a`, the one the problem's sizes come from."""
        t = self.tensor(name, a, _FP4, "packed e2m1 data (rows, K/2, L)")
        if t.dim() != 3:
            self.fail(name, f"expected 3 dimensions (rows, K/2, L), got shape {tuple(t.shape)}")
        rows, k, l = t.shape[0], 2 * t.shape[1], t.shape[2]
        if min(rows, k, l) < 1:
            self.fail(name, f"every size must be >= 1, got shape {tuple(t.shape)}")
        return rows, k, l

    def k_multiple(self, name: str, k: int, multiple: int) -> None:
        if k % multiple:
            self.fail(name, f"K = 2 * {name}.shape[1] = {k} is not a multiple of {multiple} (the {self.op} "
                            "kernels' k step)")

    def data(self, name: str, t, rows: Optional[int], k: int, l: int) -> torch.Tensor:
        """Packed e2m1 (rows, K/2, L); rows None: any number >= 1 (the GEMV's b)."""
        t = self.tensor(name, t, _FP4, "packed e2m1 data (rows, K/2, L)")
        if rows is None:
            if t.dim() != 3 or t.shape[0] < 1:
                self.fail(name, f"expected shape (rows >= 1, {k // 2}, {l}) (rows, K/2, L), got {tuple(t.shape)}")
            rows = t.shape[0]
        kb = k // 2
        self.layout(name, t, (rows, kb, l), (kb, 1, rows * kb),
                    "(rows, K/2, L: a contiguous (L, rows, K/2) tensor permuted by (1, 2, 0))", _DATA_ALIGN)
        return t

    def scales(self, plain_name: str, plain, permuted_name: str, permuted, rows: int, k: int,
               l: int) -> Tuple[torch.Tensor, bool]:
        """(scales, blocked) of one operand of `rows` stored rows: the permuted ones when given."""
        ks = k // 16
        if permuted is not None:
            t = self.tensor(permuted_name, permuted, _E4M3, "blocked 128x4 scales")
            rm, rk = _ceil(rows, 128), _ceil(ks, 4)
            self.layout(permuted_name, t, (32, 4, rm, 4, rk, l), (16, 4, rk * 512, 1, 512, rm * rk * 512),
                        "(32, 4, rows/128, 4, K/64, L: a contiguous (L, rows/128, K/64, 32, 4, 4) tensor permuted "
                        "by (3, 4, 1, 5, 2, 0))", _SCALE_ALIGN)
            return t, True
        if plain is None:
            self.fail(f"{plain_name}, {permuted_name}", "both are None; pass the plain or the permuted scales")
        t = self.tensor(plain_name, plain, _E4M3, "plain scales (rows, K/16, L)")
        self.layout(plain_name, t, (rows, ks, l), (ks, 1, rows * ks),
                    "(rows, K/16, L: a contiguous (L, rows, K/16) tensor permuted by (1, 2, 0))", _SCALE_ALIGN)
        return t, False

    def output(self, name: str, c, m: int, n: int, l: int) -> torch.Tensor:
        t = self.tensor(name, c, _FP16, "the fp16 output (M, N, L)")
        self.layout(name, t, (m, n, l), (n, 1, m * n),
                    "(M, N, L: a contiguous (L, M, N) tensor permuted by (1, 2, 0))", _C_ALIGN)
        return t

    def device(self) -> torch.device:
        """The one CUDA device of every tensor used, once this build and that GPU can run the kernels."""
        if not _swapffn.with_cuda:
            raise RuntimeError(f"nvfp4.{self.op}: this build of swapffn has no CUDA (built without CUDA); the NVFP4 "
                               "kernels need a CUDA build and a Hopper GPU")
        first, t0 = self.used[0]
        for name, t in self.used:
            if t.device.type != "cuda":
                self.fail(name, f"expected a CUDA tensor, got one on {t.device}")
        for name, t in self.used:
            if t.device != t0.device:
                self.fail(name, f"on {t.device}, {first} is on {t0.device} (all tensors must be on one GPU)")
        why = _gpu_refusals.get(t0.device.index)
        if why is None:
            cc = torch.cuda.get_device_capability(t0.device)
            why = "" if cc == (9, 0) else (f"{t0.device} is a {torch.cuda.get_device_name(t0.device)} of compute "
                                           f"capability {cc[0]}.{cc[1]}; the kernels need Hopper (9.0)")
            _gpu_refusals[t0.device.index] = why
        if why:
            raise RuntimeError(f"nvfp4.{self.op}: {why}")
        return t0.device


def _u8(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)  # DLPack has no e2m1x2; e4m3 goes as its bits


def _launch(fn, args: tuple, device: torch.device) -> None:
    """fn(*args, workspace pointer, bytes, stream) on torch's current stream of `device`; fn returns
    the workspace bytes it needs when given fewer (launching nothing), else 0."""
    stream = torch.cuda.current_stream(device).cuda_stream
    capturing = _swapffn.nvfp4.stream_capturing(stream)
    ws = None if capturing else _workspaces.get((device.index, stream))
    need = fn(*args, ws.data_ptr() if ws is not None else 0, ws.numel() if ws is not None else 0, stream)
    if need:
        ws = torch.zeros(need, dtype=torch.uint8, device=device)  # on `stream`, before the kernels
        if not capturing:  # a capture's workspace lives in the graph's pool, with the graph
            _workspaces[(device.index, stream)] = ws
        need = fn(*args, ws.data_ptr(), ws.numel(), stream)
        if need:
            raise Error(f"nvfp4: the kernel asked for {need} workspace bytes after getting {ws.numel()}")


def gemv(a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor, sfa_permuted: torch.Tensor,
         sfb_permuted: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Batched GEMV, c[m, 0, l] = sum_k a[m, k, l] * b[0, k, l]: a (M, K/2, L) and b (rows, K/2, L)
    packed e2m1 (b's row 0 is used; the competition stores 128), scales of a and b plain or permuted
    (module docstring), c float16 (M, 1, L), filled and returned. K % 64 == 0."""
    call = _Call("gemv")
    m, k, l = call.dims("a", a)
    call.k_multiple("a", k, GEMV_K_MULTIPLE)
    call.data("a", a, m, k, l)
    call.data("b", b, None, k, l)
    sa = call.scales("sfa", sfa, "sfa_permuted", sfa_permuted, m, k, l)
    sb = call.scales("sfb", sfb, "sfb_permuted", sfb_permuted, b.shape[0], k, l)
    call.output("c", c, m, 1, l)
    dev = call.device()
    _launch(_swapffn.nvfp4.gemv, (_u8(a), _u8(sa[0]), sa[1], _u8(b), _u8(sb[0]), sb[1], c), dev)
    return c


def gemm(a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor, sfa_permuted: torch.Tensor,
         sfb_permuted: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """GEMM, c[m, n, l] = sum_k a[m, k, l] * b[n, k, l]: a (M, K/2, L) and b (N, K/2, L) packed e2m1,
    scales plain or permuted (module docstring), c float16 (M, N, L), filled and returned.
    K % 256 == 0."""
    call = _Call("gemm")
    m, k, l = call.dims("a", a)
    call.k_multiple("a", k, GEMM_K_MULTIPLE)
    call.data("a", a, m, k, l)
    n = call.dims("b", b)[0]
    call.data("b", b, n, k, l)
    sa = call.scales("sfa", sfa, "sfa_permuted", sfa_permuted, m, k, l)
    sb = call.scales("sfb", sfb, "sfb_permuted", sfb_permuted, n, k, l)
    call.output("c", c, m, n, l)
    dev = call.device()
    _launch(_swapffn.nvfp4.gemm, (_u8(a), _u8(sa[0]), sa[1], _u8(b), _u8(sb[0]), sb[1], c), dev)
    return c


def dual_gemm_swiglu(a: torch.Tensor, b1: torch.Tensor, b2: torch.Tensor, sfa: torch.Tensor, sfb1: torch.Tensor,
                     sfb2: torch.Tensor, sfa_permuted: torch.Tensor, sfb1_permuted: torch.Tensor,
                     sfb2_permuted: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Gated dual GEMM, c = fp16(silu(a b1^T) * (a b2^T)) per batch, silu (g / (1 + exp(-g))) and the
    product in fp32: a (M, K/2, L), b1 and b2 (N, K/2, L) packed e2m1, scales plain or permuted
    (module docstring), c float16 (M, N, L), filled and returned. K % 256 == 0."""
    call = _Call("dual_gemm_swiglu")
    m, k, l = call.dims("a", a)
    call.k_multiple("a", k, GEMM_K_MULTIPLE)
    call.data("a", a, m, k, l)
    n = call.dims("b1", b1)[0]
    call.data("b1", b1, n, k, l)
    call.data("b2", b2, n, k, l)
    sa = call.scales("sfa", sfa, "sfa_permuted", sfa_permuted, m, k, l)
    s1 = call.scales("sfb1", sfb1, "sfb1_permuted", sfb1_permuted, n, k, l)
    s2 = call.scales("sfb2", sfb2, "sfb2_permuted", sfb2_permuted, n, k, l)
    call.output("c", c, m, n, l)
    dev = call.device()
    _launch(_swapffn.nvfp4.dual_gemm_swiglu, (_u8(a), _u8(sa[0]), sa[1], _u8(b1), _u8(s1[0]), s1[1], _u8(b2),
                                               _u8(s2[0]), s2[1], c), dev)
    return c


def _entry(call: _Call, what: str, items, i: int) -> Sequence:
    """Group i's (sfa, sfb) of a scale list; (None, None) where the list or the entry is None."""
    item = None if items is None else items[i]
    if item is None:
        return (None, None)
    if not isinstance(item, (list, tuple)) or len(item) != 2:
        call.fail(f"{what}[{i}]", f"expected (sfa, sfb), got {type(item).__name__}", TypeError)
    return item


def grouped_gemm(abc_tensors: Sequence[Sequence[torch.Tensor]], sfasfb_tensors: Sequence[Sequence[torch.Tensor]],
                 sfasfb_reordered_tensors: Sequence[Sequence[torch.Tensor]],
                 problem_sizes: Optional[Sequence[Sequence[int]]] = None) -> List[torch.Tensor]:
    """G independent GEMMs in one launch, c_i = a_i b_i^T: abc_tensors[i] = (a, b, c) with a
    (M_i, K_i/2, 1) and b (N_i, K_i/2, 1) packed e2m1 and c float16 (M_i, N_i, 1);
    sfasfb_tensors[i] = (sfa, sfb) plain and sfasfb_reordered_tensors[i] = (sfa, sfb) permuted scales
    (module docstring; either list, or any entry, may be None); problem_sizes[i] = (M_i, N_i, K_i, 1),
    checked when given. 1 <= G <= 64, K_i % 256 == 0. Fills and returns [c_0, ..., c_{G-1}]."""
    call = _Call("grouped_gemm")
    if not isinstance(abc_tensors, (list, tuple)):
        call.fail("abc_tensors", f"expected a list of (a, b, c) per group, got {type(abc_tensors).__name__}",
                  TypeError)
    g = len(abc_tensors)
    if not 1 <= g <= MAX_GROUPS:
        call.fail("abc_tensors", f"{g} groups; 1 to {MAX_GROUPS} are supported")
    for what, items in (("sfasfb_tensors", sfasfb_tensors), ("sfasfb_reordered_tensors", sfasfb_reordered_tensors),
                        ("problem_sizes", problem_sizes)):
        if items is not None and not isinstance(items, (list, tuple)):
            call.fail(what, f"expected a list with one entry per group, got {type(items).__name__}", TypeError)
        if items is not None and len(items) != g:
            call.fail(what, f"{len(items)} entries for {g} groups (abc_tensors)")
    lists: List[list] = [[] for _ in range(7)]  # a, sfa, a blocked, b, sfb, b blocked, c
    for i in range(g):
        abc = abc_tensors[i]
        if not isinstance(abc, (list, tuple)) or len(abc) != 3:
            call.fail(f"abc_tensors[{i}]", f"expected (a, b, c), got {type(abc).__name__}", TypeError)
        plain = _entry(call, "sfasfb_tensors", sfasfb_tensors, i)
        blocked = _entry(call, "sfasfb_reordered_tensors", sfasfb_reordered_tensors, i)
        a, b, c = abc
        names = {x: f"abc_tensors[{i}].{x}" for x in "abc"}
        m, k, l = call.dims(names["a"], a)
        if l != 1:
            call.fail(names["a"], f"L = {l}; the grouped GEMM takes L = 1 per group")
        call.k_multiple(names["a"], k, GEMM_K_MULTIPLE)
        call.data(names["a"], a, m, k, l)
        n = call.dims(names["b"], b)[0]
        call.data(names["b"], b, n, k, l)
        sa = call.scales(f"sfasfb_tensors[{i}].sfa", plain[0], f"sfasfb_reordered_tensors[{i}].sfa", blocked[0],
                         m, k, l)
        sb = call.scales(f"sfasfb_tensors[{i}].sfb", plain[1], f"sfasfb_reordered_tensors[{i}].sfb", blocked[1],
                         n, k, l)
        call.output(names["c"], c, m, n, l)
        if problem_sizes is not None and (not isinstance(problem_sizes[i], (list, tuple))
                                          or tuple(problem_sizes[i]) != (m, n, k, l)):
            call.fail(f"problem_sizes[{i}]", f"{problem_sizes[i]!r}, the tensors give (m, n, k, l) = {(m, n, k, l)}")
        for dst, x in zip(lists, (_u8(a), _u8(sa[0]), sa[1], _u8(b), _u8(sb[0]), sb[1], c)):
            dst.append(x)
    dev = call.device()
    _launch(_swapffn.nvfp4.grouped_gemm, tuple(lists), dev)
    return lists[6]

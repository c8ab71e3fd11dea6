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
graph). Each function is a direct call into the extension swapffn._nvfp4 (nvfp4/python/), which checks
in C++ before anything runs, naming the argument: dtypes (TypeError), shapes, strides, devices, K (a
multiple of 64 for the GEMV, of 256 for the others) and alignment (data 16 bytes, scales and c 4)
(swapffn.Error, a ValueError); it reads the tensors through torch's DLPack C exchange API where torch
has it (2.10+), so that an eager call costs about what its launches cost. The split-K workspace is kept
per device and stream in C++ (the kernels leave it zeroed); during a CUDA graph capture each call gets
its own, allocated in the graph (it lives as long as the graph).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from . import _nvfp4

__all__ = ["gemv", "gemm", "dual_gemm_swiglu", "grouped_gemm", "GEMV_K_MULTIPLE", "GEMM_K_MULTIPLE", "MAX_GROUPS"]

GEMV_K_MULTIPLE = _nvfp4.gemv_k_multiple  # 64
GEMM_K_MULTIPLE = _nvfp4.gemm_k_multiple  # 256
MAX_GROUPS = _nvfp4.max_groups  # 64


def gemv(a: torch.Tensor, b: torch.Tensor, sfa: Optional[torch.Tensor], sfb: Optional[torch.Tensor],
         sfa_permuted: Optional[torch.Tensor], sfb_permuted: Optional[torch.Tensor], c: torch.Tensor) -> torch.Tensor:
    """Batched GEMV, c[m, 0, l] = sum_k a[m, k, l] * b[0, k, l]: a (M, K/2, L) and b (rows, K/2, L)
    packed e2m1 (b's row 0 is used; the competition stores 128), scales of a and b plain or permuted
    (module docstring), c float16 (M, 1, L), filled and returned. K % 64 == 0."""
    return _nvfp4.gemv(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)


def gemm(a: torch.Tensor, b: torch.Tensor, sfa: Optional[torch.Tensor], sfb: Optional[torch.Tensor],
         sfa_permuted: Optional[torch.Tensor], sfb_permuted: Optional[torch.Tensor], c: torch.Tensor) -> torch.Tensor:
    """GEMM, c[m, n, l] = sum_k a[m, k, l] * b[n, k, l]: a (M, K/2, L) and b (N, K/2, L) packed e2m1,
    scales plain or permuted (module docstring), c float16 (M, N, L), filled and returned.
    K % 256 == 0."""
    return _nvfp4.gemm(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)


def dual_gemm_swiglu(a: torch.Tensor, b1: torch.Tensor, b2: torch.Tensor, sfa: Optional[torch.Tensor],
                     sfb1: Optional[torch.Tensor], sfb2: Optional[torch.Tensor], sfa_permuted: Optional[torch.Tensor],
                     sfb1_permuted: Optional[torch.Tensor], sfb2_permuted: Optional[torch.Tensor],
                     c: torch.Tensor) -> torch.Tensor:
    """Gated dual GEMM, c = fp16(silu(a b1^T) * (a b2^T)) per batch, silu (g / (1 + exp(-g))) and the
    product in fp32: a (M, K/2, L), b1 and b2 (N, K/2, L) packed e2m1, scales plain or permuted
    (module docstring), c float16 (M, N, L), filled and returned. K % 256 == 0."""
    return _nvfp4.dual_gemm_swiglu(a, b1, b2, sfa, sfb1, sfb2, sfa_permuted, sfb1_permuted, sfb2_permuted, c)


def grouped_gemm(abc_tensors: Sequence[Sequence[torch.Tensor]],
                 sfasfb_tensors: Optional[Sequence[Optional[Sequence[Optional[torch.Tensor]]]]],
                 sfasfb_reordered_tensors: Optional[Sequence[Optional[Sequence[Optional[torch.Tensor]]]]],
                 problem_sizes: Optional[Sequence[Sequence[int]]] = None) -> List[torch.Tensor]:
    """G independent GEMMs in one launch, c_i = a_i b_i^T: abc_tensors[i] = (a, b, c) with a
    (M_i, K_i/2, 1) and b (N_i, K_i/2, 1) packed e2m1 and c float16 (M_i, N_i, 1);
    sfasfb_tensors[i] = (sfa, sfb) plain and sfasfb_reordered_tensors[i] = (sfa, sfb) permuted scales
    (module docstring; either list, or any entry, may be None); problem_sizes[i] = (M_i, N_i, K_i, 1),
    checked when given. 1 <= G <= 64, K_i % 256 == 0. Fills and returns [c_0, ..., c_{G-1}]."""
    return _nvfp4.grouped_gemm(abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes)

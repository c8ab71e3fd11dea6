"""swapffn.nvfp4: the NVFP4 kernels on the GPU MODE competition's tensors. On the host: every argument
check names the argument (wrong dtype, shape, strides, alignment, device, group lists), and the test
helpers themselves (the e2m1 decode, the blocked scale layout). With a Hopper GPU: the four kernels
against a torch reference (values dequantized exactly, sums in float64, so exact where fp32 sums are):
GEMV, GEMM and grouped GEMM bit-exact (the inputs make every fp32 sum exact), the dual GEMM within
1e-3 + 1e-3 |ref|, as nvfp4/tests/gpu_test_nvfp4.cu; outputs are NaN-poisoned before each run."""
import pytest

import swapffn

torch = pytest.importorskip("torch", exc_type=ImportError)
if not hasattr(torch, "float4_e2m1fn_x2"):
    pytest.skip("this torch has no float4_e2m1fn_x2", allow_module_level=True)
from swapffn import _nvfp4, nvfp4  # noqa: E402  (needs torch)

needs_hopper = pytest.mark.skipif(not torch.cuda.is_available() or not swapffn.gpu()["hopper"],
                                  reason="needs CUDA: a Hopper GPU")

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
NAN_E4M3 = 0x7F


# ---------------- inputs in the competition's layout ----------------

def fp4_data(rows, k, l, kind, gen, device):
    """Packed e2m1 (rows, K/2, L): a contiguous (L, rows, K/2) byte tensor permuted by (1, 2, 0), bytes
    drawn as issue 5's distributions (nvfp4/include/swapffn/nvfp4/reference.hpp, InputKind)."""
    shape = (l, rows, k // 2)
    if kind == "gemv":
        raw = torch.randint(0, 4, shape, generator=gen, dtype=torch.uint8)
    elif kind == "gemm":
        raw = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    else:  # dual, grouped: signs and the two low bits, values in [-1.5, 1.5]
        raw = torch.randint(0, 255, shape, generator=gen, dtype=torch.uint8) & 0xBB
    return raw.to(device).permute(1, 2, 0).view(torch.float4_e2m1fn_x2)


def plain_scales(rows, k, l, kind, gen, device):
    """e4m3 scales (rows, K/16, L): a contiguous (L, rows, K/16) tensor permuted by (1, 2, 0)."""
    shape = (l, rows, k // 16)
    if kind == "dual":
        v = torch.rand(shape, generator=gen)
    else:
        lo, hi = {"gemv": (0, 3), "gemm": (0, 4), "grouped": (1, 3)}[kind]
        v = torch.randint(lo, hi, shape, generator=gen).float()
    return v.to(torch.float8_e4m3fn).to(device).permute(1, 2, 0)


def permuted(plain):
    """The competition's permuted scales (32, 4, rows/128, 4, K/64, L) of plain ones (rows, K/16, L):
    128x4 blocks stored contiguously as (L, rows/128, K/64, 32, 4, 4); the padding is NaN, so that any
    use of it shows."""
    rows, ks, l = plain.shape
    rm, rk = -(-rows // 128), -(-ks // 4)
    buf = torch.full((l, rm * 128, rk * 4), NAN_E4M3, dtype=torch.uint8, device=plain.device)
    buf[:, :rows, :ks] = plain.permute(2, 0, 1).view(torch.uint8)
    blocks = buf.view(l, rm, 4, 32, rk, 4).permute(0, 1, 4, 3, 2, 5).contiguous()
    return blocks.view(torch.float8_e4m3fn).permute(3, 4, 1, 5, 2, 0)


def poisoned_c(m, n, l, device):
    return torch.full((l, m, n), float("nan"), dtype=torch.float16, device=device).permute(1, 2, 0)


def gemv_inputs(m, k, l, b_rows=128, seed=1, device="cpu"):
    """(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c) as nvfp4_gemv's generate_input: b padded to 128 rows."""
    gen = torch.Generator().manual_seed(seed)
    a, b = fp4_data(m, k, l, "gemv", gen, device), fp4_data(b_rows, k, l, "gemv", gen, device)
    sfa, sfb = plain_scales(m, k, l, "gemv", gen, device), plain_scales(b_rows, k, l, "gemv", gen, device)
    return a, b, sfa, sfb, permuted(sfa), permuted(sfb), poisoned_c(m, 1, l, device)


def gemm_inputs(m, n, k, l, seed=2, device="cpu"):
    """(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c) as nvfp4_gemm's generate_input."""
    gen = torch.Generator().manual_seed(seed)
    a, b = fp4_data(m, k, l, "gemm", gen, device), fp4_data(n, k, l, "gemm", gen, device)
    sfa, sfb = plain_scales(m, k, l, "gemm", gen, device), plain_scales(n, k, l, "gemm", gen, device)
    return a, b, sfa, sfb, permuted(sfa), permuted(sfb), poisoned_c(m, n, l, device)


def dual_inputs(m, n, k, l, seed=3, device="cpu"):
    """(a, b1, b2, sfa, sfb1, sfb2, sfa_permuted, sfb1_permuted, sfb2_permuted, c) as nvfp4_dual_gemm's."""
    gen = torch.Generator().manual_seed(seed)
    a, b1, b2 = (fp4_data(r, k, l, "dual", gen, device) for r in (m, n, n))
    sfa, sfb1, sfb2 = (plain_scales(r, k, l, "dual", gen, device) for r in (m, n, n))
    return a, b1, b2, sfa, sfb1, sfb2, permuted(sfa), permuted(sfb1), permuted(sfb2), poisoned_c(m, n, l, device)


def grouped_inputs(sizes, seed=4, device="cpu"):
    """(abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes) as nvfp4_group_gemm's:
    sizes [(m, n, k)], L = 1; the plain scales stay on the host, as there."""
    gen = torch.Generator().manual_seed(seed)
    abc, plain, reordered, problem_sizes = [], [], [], []
    for m, n, k in sizes:
        a, b = fp4_data(m, k, 1, "grouped", gen, device), fp4_data(n, k, 1, "grouped", gen, device)
        sfa, sfb = plain_scales(m, k, 1, "grouped", gen, "cpu"), plain_scales(n, k, 1, "grouped", gen, "cpu")
        abc.append((a, b, poisoned_c(m, n, 1, device)))
        plain.append((sfa, sfb))
        reordered.append((permuted(sfa).to(device), permuted(sfb).to(device)))
        problem_sizes.append((m, n, k, 1))
    return abc, plain, reordered, problem_sizes


# ---------------- the torch reference ----------------

def dequantize(data, scales):
    """Values (rows, K, L) in float64 of packed e2m1 data (rows, K/2, L) and plain scales (rows, K/16, L)."""
    lut = torch.tensor(E2M1 + [-v for v in E2M1], dtype=torch.float64, device=data.device)
    d = data.view(torch.uint8).long()
    v = torch.stack((lut[d & 15], lut[d >> 4]), dim=2).reshape(d.shape[0], -1, d.shape[2])
    return v * scales.to(data.device).to(torch.float64).repeat_interleave(16, dim=1)


def ref_gemm(a, b, sfa, sfb):
    """c (M, N, L) fp16: exact products summed in float64 (as fp32 where fp32 sums are exact), rounded once."""
    return torch.einsum("mkl,nkl->mnl", dequantize(a, sfa), dequantize(b, sfb)).float().half()


def ref_gemv(a, b, sfa, sfb):
    return ref_gemm(a, b[:1], sfa, sfb[:1])


def ref_dual(a, b1, b2, sfa, sfb1, sfb2):
    x = dequantize(a, sfa)
    g = torch.einsum("mkl,nkl->mnl", x, dequantize(b1, sfb1)).float()
    u = torch.einsum("mkl,nkl->mnl", x, dequantize(b2, sfb2)).float()
    return (g / (1 + torch.exp(-g)) * u).half()


def mismatches(got, want, exact):
    g, w = got.float(), want.float()
    ok = (g == w) if exact else ((g - w).abs() <= 1e-3 + 1e-3 * w.abs())
    bad = ~(ok | (g.isnan() & w.isnan()))
    if not bad.any():
        return ""
    i = tuple(int(x) for x in bad.nonzero()[0])
    return f"{int(bad.sum())} of {bad.numel()} elements differ; first at {i}: got {g[i].item()}, want {w[i].item()}"


def with_scales(args, plain_at, permuted_at, which):
    """The competition's tuple with one kind of scales left out (None) for which = "plain" or "permuted"."""
    args = list(args)
    for i in (permuted_at if which == "plain" else plain_at if which == "permuted" else ()):
        args[i] = None
    return args


# ---------------- host checks ----------------

def test_dequantize_decodes_e2m1_nibbles_low_first_times_the_scale():
    data = torch.tensor([0x21, 0xF8, 0x7C] + [0] * 5, dtype=torch.uint8).view(1, 8, 1)
    scales = torch.tensor([2.0], dtype=torch.float8_e4m3fn).view(1, 1, 1)
    v = dequantize(data, scales)[0, :6, 0].tolist()
    assert v == [1.0, 2.0, -0.0, -12.0, -4.0, 12.0]


def test_permuted_scales_follow_the_blocked_128x4_layout():
    plain = plain_scales(200, 1536, 2, "gemm", torch.Generator().manual_seed(5), "cpu")  # 96 scale columns
    rm, rk, l = 2, 24, 2
    p = permuted(plain)
    assert p.shape == (32, 4, rm, 4, rk, l) and p.stride() == (16, 4, rk * 512, 1, 512, rm * rk * 512)
    stored = p.permute(5, 2, 4, 0, 1, 3).contiguous().view(torch.uint8).flatten()  # in memory order

    def offset(i, j, b):  # scale_offset() of nvfp4/include/swapffn/nvfp4/nvfp4.hpp
        return b * rm * rk * 512 + (i // 128) * rk * 512 + (j // 4) * 512 + (i % 32) * 16 + (i % 128) // 32 * 4 + j % 4

    src = plain.view(torch.uint8)
    for i, j, b in [(0, 0, 0), (31, 3, 0), (32, 4, 1), (127, 95, 1), (128, 5, 0), (199, 94, 1)]:
        assert stored[offset(i, j, b)] == src[i, j, b], (i, j, b)
    assert stored[offset(200, 0, 0)] == NAN_E4M3 and stored[offset(255, 95, 1)] == NAN_E4M3  # padding rows


def test_k_and_group_limits_are_the_documented_ones():
    assert (nvfp4.GEMV_K_MULTIPLE, nvfp4.GEMM_K_MULTIPLE, nvfp4.MAX_GROUPS) == (64, 256, 64)


def expect_refusal(fn, args, kind, fragment):
    with pytest.raises(kind) as err:
        fn(*args)
    assert fragment in str(err.value)


def expect_device_refusal(fn, args, first):
    """Arguments that pass every check but the device: CPU tensors are refused naming `first`, or, in a
    CPU-only build, the build is."""
    if _nvfp4.with_cuda:
        expect_refusal(fn, args, swapffn.Error, f"{first}: expected a CUDA tensor, got one on cpu")
    else:
        expect_refusal(fn, args, RuntimeError, "built without CUDA")


def put(args, i, value):
    args = list(args)
    args[i] = value
    return args


def misaligned_fp4(like):
    """A tensor with `like`'s shape and strides whose data starts one byte past an allocation."""
    rows, kb, l = like.shape
    raw = torch.zeros(l * rows * kb + 1, dtype=torch.uint8)[1:]
    return raw.view(l, rows, kb).permute(1, 2, 0).view(torch.float4_e2m1fn_x2)


def wider_fp4(like):
    """`like`'s shape with a row pitch twice as long (a slice of a wider tensor)."""
    rows, kb, l = like.shape
    return torch.zeros(l, rows, 2 * kb, dtype=torch.uint8)[:, :, :kb].permute(1, 2, 0)


GEMM = gemm_inputs(130, 70, 256, 2)  # a, b, sfa, sfb, sfa_permuted, sfb_permuted, c


@pytest.mark.parametrize("args,kind,fragment", [
    (put(GEMM, 1, GEMM[1].view(torch.uint8).float()), TypeError,
     "nvfp4.gemm: b: expected dtype float4_e2m1fn_x2 or uint8, got float32"),
    (put(GEMM, 0, GEMM[0].view(torch.uint8).numpy()), TypeError, "nvfp4.gemm: a: expected a torch.Tensor"),
    (put(GEMM, 4, GEMM[4].view(torch.uint8)), TypeError, "sfa_permuted: expected dtype float8_e4m3fn, got uint8"),
    (put(GEMM, 6, GEMM[6].float()), TypeError, "nvfp4.gemm: c: expected dtype float16, got float32"),
    (put(GEMM, 1, gemm_inputs(130, 70, 512, 2)[1]), ValueError, "nvfp4.gemm: b: expected shape (70, 128, 2)"),
    (put(GEMM, 0, GEMM[0].contiguous()), ValueError, "nvfp4.gemm: a: expected strides (128, 1, 16640)"),
    (put(GEMM, 1, wider_fp4(GEMM[1])), ValueError, "nvfp4.gemm: b: expected strides (128, 1, 8960)"),
    (put(GEMM, 0, misaligned_fp4(GEMM[0])), ValueError, "nvfp4.gemm: a: must start 16-byte aligned"),
    (put(put(GEMM, 5, None), 3, GEMM[3][:69]), ValueError, "nvfp4.gemm: sfb: expected shape (70, 16, 2)"),
    (put(put(GEMM, 5, None), 3, GEMM[3].contiguous()), ValueError, "nvfp4.gemm: sfb: expected strides (16, 1, 1120)"),
    (put(put(GEMM, 4, None), 2, None), ValueError, "nvfp4.gemm: sfa, sfa_permuted: both are None"),
    (put(GEMM, 4, permuted(gemm_inputs(300, 70, 256, 2)[2])), ValueError,
     "nvfp4.gemm: sfa_permuted: expected shape (32, 4, 2, 4, 4, 2)"),
    (put(GEMM, 4, GEMM[4].contiguous()), ValueError, "nvfp4.gemm: sfa_permuted: expected strides"),
    (put(GEMM, 6, poisoned_c(130, 71, 2, "cpu")), ValueError, "nvfp4.gemm: c: expected shape (130, 70, 2)"),
    (put(GEMM, 6, GEMM[6].contiguous()), ValueError, "nvfp4.gemm: c: expected strides (70, 1, 9100)"),
    (gemm_inputs(130, 70, 128, 2), ValueError, "nvfp4.gemm: a: K = 2 * a.shape[1] = 128 is not a multiple of 256"),
], ids=["b-dtype", "a-not-a-tensor", "sfa_permuted-dtype", "c-dtype", "b-k", "a-contiguous", "b-row-pitch",
        "a-misaligned", "sfb-rows", "sfb-contiguous", "sfa-none", "sfa_permuted-rows", "sfa_permuted-contiguous",
        "c-shape", "c-contiguous", "k-multiple"])
def test_gemm_refuses_bad_arguments_naming_them(args, kind, fragment):
    expect_refusal(nvfp4.gemm, args, kind, fragment)


def test_gemm_takes_the_competition_tensors_up_to_the_device_check():
    expect_device_refusal(nvfp4.gemm, GEMM, "a")
    expect_device_refusal(nvfp4.gemm, put(put(GEMM, 4, None), 5, None), "a")  # plain scales only
    # the plain scales are not looked at when the permuted ones are given
    expect_device_refusal(nvfp4.gemm, put(put(GEMM, 2, "unused"), 3, None), "a")
    expect_device_refusal(nvfp4.gemm, put(GEMM, 0, GEMM[0].view(torch.uint8)), "a")  # uint8 data


GEMV = gemv_inputs(160, 192, 3)


@pytest.mark.parametrize("args,kind,fragment", [
    (gemv_inputs(160, 96, 3), ValueError, "nvfp4.gemv: a: K = 2 * a.shape[1] = 96 is not a multiple of 64"),
    (put(GEMV, 6, poisoned_c(160, 2, 3, "cpu")), ValueError, "nvfp4.gemv: c: expected shape (160, 1, 3)"),
    (put(put(GEMV, 5, None), 3, GEMV[3][:1]), ValueError, "nvfp4.gemv: sfb: expected shape (128, 12, 3)"),
    (put(GEMV, 5, permuted(gemv_inputs(160, 192, 3, b_rows=200)[3])), ValueError,
     "nvfp4.gemv: sfb_permuted: expected shape (32, 4, 1, 4, 3, 3)"),
    (put(GEMV, 1, GEMV[1][:, :, :2]), ValueError, "nvfp4.gemv: b: expected shape (128, 96, 3)"),
], ids=["k-multiple", "c-shape", "sfb-rows", "sfb_permuted-rows", "b-batches"])
def test_gemv_refuses_bad_arguments_naming_them(args, kind, fragment):
    expect_refusal(nvfp4.gemv, args, kind, fragment)


def test_gemv_takes_b_with_128_or_1_stored_rows():
    expect_device_refusal(nvfp4.gemv, GEMV, "a")
    one = gemv_inputs(160, 192, 3, b_rows=1)
    expect_device_refusal(nvfp4.gemv, one, "a")


DUAL = dual_inputs(100, 70, 256, 2)


@pytest.mark.parametrize("args,kind,fragment", [
    (put(DUAL, 2, dual_inputs(100, 71, 256, 2)[2]), ValueError,
     "nvfp4.dual_gemm_swiglu: b2: expected shape (70, 128, 2)"),
    (put(DUAL, 8, DUAL[8].float()), TypeError, "nvfp4.dual_gemm_swiglu: sfb2_permuted: expected dtype float8_e4m3fn"),
    (put(DUAL, 9, DUAL[9].half().float()), TypeError, "nvfp4.dual_gemm_swiglu: c: expected dtype float16"),
], ids=["b2-rows", "sfb2_permuted-dtype", "c-dtype"])
def test_dual_gemm_refuses_bad_arguments_naming_them(args, kind, fragment):
    expect_refusal(nvfp4.dual_gemm_swiglu, args, kind, fragment)


def test_dual_gemm_takes_the_competition_tensors_up_to_the_device_check():
    expect_device_refusal(nvfp4.dual_gemm_swiglu, DUAL, "a")


GROUPED = grouped_inputs([(80, 128, 256), (40, 256, 512)])


def grouped_with(i, j, value):
    abc = [list(x) for x in GROUPED[0]]
    abc[i][j] = value
    return [[tuple(x) for x in abc], *GROUPED[1:]]


@pytest.mark.parametrize("args,kind,fragment", [
    ((GROUPED[0][:1] * 65, None, GROUPED[2][:1] * 65, None), ValueError,
     "nvfp4.grouped_gemm: abc_tensors: 65 groups; 1 to 64 are supported"),
    (([], None, [], None), ValueError, "abc_tensors: 0 groups"),
    ((GROUPED[0][0], None, None, None), TypeError, "nvfp4.grouped_gemm: abc_tensors[0]: expected (a, b, c)"),
    ((GROUPED[0], GROUPED[1], GROUPED[2][:1], GROUPED[3]), ValueError,
     "nvfp4.grouped_gemm: sfasfb_reordered_tensors: 1 entries for 2 groups"),
    ((*GROUPED[:3], [(80, 128, 256, 1), (40, 256, 256, 1)]), ValueError, "nvfp4.grouped_gemm: problem_sizes[1]"),
    (grouped_with(1, 2, GROUPED[0][1][2].float()), TypeError, "nvfp4.grouped_gemm: abc_tensors[1].c: expected dtype"),
    (grouped_with(0, 1, GROUPED[0][1][1]), ValueError, "nvfp4.grouped_gemm: abc_tensors[0].b: expected shape"),
    (grouped_with(0, 0, gemm_inputs(80, 128, 256, 2)[0]), ValueError, "abc_tensors[0].a: L = 2"),
], ids=["65-groups", "no-groups", "not-a-list-of-groups", "reordered-length", "problem-sizes", "c-dtype",
        "b-of-another-group", "batched-group"])
def test_grouped_gemm_refuses_bad_arguments_naming_them(args, kind, fragment):
    expect_refusal(nvfp4.grouped_gemm, args, kind, fragment)


def test_grouped_gemm_takes_the_competition_tensors_up_to_the_device_check():
    expect_device_refusal(nvfp4.grouped_gemm, GROUPED, "abc_tensors[0].a")


# The checks are the extension's (C++, nvfp4/python/nvfp4_arguments.cpp): more of the arguments each names.
@pytest.mark.parametrize("fn,args,kind,fragment", [
    (nvfp4.gemv, put(GEMV, 1, None), TypeError, "nvfp4.gemv: b: expected a torch.Tensor (packed e2m1 data"),
    (nvfp4.gemv, put(GEMV, 0, GEMV[0][:, :, 0]), ValueError,
     "nvfp4.gemv: a: expected 3 dimensions (rows, K/2, L), got shape (160, 96)"),
    (nvfp4.gemv, put(GEMV, 0, GEMV[0][:0]), ValueError, "nvfp4.gemv: a: every size must be >= 1, got shape (0, 96, 3)"),
    (nvfp4.gemv, put(GEMV, 1, GEMV[1][:0]), ValueError, "nvfp4.gemv: b: expected shape (rows >= 1, 96, 3)"),
    (nvfp4.gemv, put(GEMV, 5, GEMV[5].contiguous()), ValueError, "nvfp4.gemv: sfb_permuted: expected strides"),
    (nvfp4.gemv, put(GEMV, 6, torch.zeros(3 * 160 + 1, dtype=torch.float16)[1:].view(3, 160, 1).permute(1, 2, 0)),
     ValueError, "nvfp4.gemv: c: must start 4-byte aligned"),
    (nvfp4.gemm, put(put(GEMM, 5, None), 3, GEMM[1]), TypeError, "nvfp4.gemm: sfb: expected dtype float8_e4m3fn, got "
     "float4_e2m1fn_x2"),
    (nvfp4.gemm, put(GEMM, 5, GEMM[1]), TypeError, "nvfp4.gemm: sfb_permuted: expected dtype float8_e4m3fn"),
    (nvfp4.gemm, put(GEMM, 6, GEMM[6].to(torch.bfloat16)), TypeError, "nvfp4.gemm: c: expected dtype float16, got "
     "bfloat16"),
    (nvfp4.dual_gemm_swiglu, put(DUAL, 1, DUAL[1][:, :64]), ValueError,
     "nvfp4.dual_gemm_swiglu: b1: expected shape (70, 128, 2)"),
    (nvfp4.dual_gemm_swiglu, put(put(DUAL, 7, None), 4, None), ValueError,
     "nvfp4.dual_gemm_swiglu: sfb1, sfb1_permuted: both are None"),
    (nvfp4.grouped_gemm, (GROUPED[0], "scales", *GROUPED[2:]), TypeError,
     "nvfp4.grouped_gemm: sfasfb_tensors: expected a list with one entry per group, got str"),
    (nvfp4.grouped_gemm, (GROUPED[0], GROUPED[1], [GROUPED[2][0], 7], GROUPED[3]), TypeError,
     "nvfp4.grouped_gemm: sfasfb_reordered_tensors[1]: expected (sfa, sfb), got int"),
    (nvfp4.grouped_gemm, (tuple(GROUPED[0]), None, None, None), ValueError,
     "nvfp4.grouped_gemm: sfasfb_tensors[0].sfa, sfasfb_reordered_tensors[0].sfa: both are None"),
    (nvfp4.grouped_gemm, (GROUPED[0][0][0], None, None, None), TypeError,
     "nvfp4.grouped_gemm: abc_tensors: expected a list of (a, b, c) per group, got Tensor"),
    (nvfp4.grouped_gemm, (*GROUPED[:3], [(80, 128, 256, 1), "sizes"]), ValueError,
     "nvfp4.grouped_gemm: problem_sizes[1]: 'sizes', the tensors give (m, n, k, l) = (40, 256, 512, 1)"),
], ids=["gemv-b-none", "gemv-a-2d", "gemv-a-empty", "gemv-b-no-rows", "gemv-sfb_permuted-contiguous",
        "gemv-c-misaligned", "gemm-data-as-scales", "gemm-data-as-permuted-scales", "gemm-c-bf16", "dual-b1-k",
        "dual-sfb1-none", "grouped-scales-not-a-list", "grouped-scale-entry", "grouped-no-scales",
        "grouped-not-a-list", "grouped-problem-sizes-entry"])
def test_the_extension_refuses_each_bad_argument_naming_it(fn, args, kind, fragment):
    expect_refusal(fn, args, kind, fragment)


def test_problem_sizes_compare_as_python_compares():
    abc, plain, reordered, sizes = GROUPED
    expect_device_refusal(nvfp4.grouped_gemm, (abc, plain, reordered, [list(s) for s in sizes]), "abc_tensors[0].a")
    as_tensors = [tuple(torch.tensor(v) for v in s) for s in sizes]
    expect_device_refusal(nvfp4.grouped_gemm, (abc, plain, reordered, as_tensors), "abc_tensors[0].a")


def test_tensors_are_read_through_torchs_dlpack_exchange_api_where_torch_has_it():
    has_api = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    assert _nvfp4.exchange() == ("dlpack_c_exchange_api" if has_api else "attributes")


_ATTRIBUTES_CHECK = """
import torch
if hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
    del torch.Tensor.__dlpack_c_exchange_api__
import sys
sys.path.insert(0, {here!r})
import test_nvfp4 as t
from swapffn import _nvfp4
assert _nvfp4.exchange() == "attributes", _nvfp4.exchange()
for fn, args, kind, fragment in [
        (t.nvfp4.gemm, t.put(t.GEMM, 0, t.GEMM[0].contiguous()), ValueError, "a: expected strides (128, 1, 16640)"),
        (t.nvfp4.gemm, t.put(t.GEMM, 6, t.GEMM[6].float()), TypeError, "c: expected dtype float16, got float32"),
        (t.nvfp4.gemm, t.put(t.GEMM, 0, t.misaligned_fp4(t.GEMM[0])), ValueError, "a: must start 16-byte aligned")]:
    t.expect_refusal(fn, args, kind, fragment)
t.expect_device_refusal(t.nvfp4.gemm, t.GEMM, "a")
t.expect_device_refusal(t.nvfp4.grouped_gemm, t.GROUPED, "abc_tensors[0].a")
print("ok")
"""


def test_older_torch_without_the_exchange_api_gets_the_same_checks():
    """torch before 2.10 has no __dlpack_c_exchange_api__: the extension reads the tensors' attributes."""
    import pathlib
    import subprocess
    import sys
    here = str(pathlib.Path(__file__).resolve().parent)
    run = subprocess.run([sys.executable, "-c", _ATTRIBUTES_CHECK.format(here=here)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr


# ---------------- on the GPU ----------------

def run_and_check(fn, args, want, exact):
    c = fn(*args)
    torch.cuda.synchronize()
    assert c is args[-1], "returns the c it was given"
    bad = mismatches(c, want, exact)
    assert not bad, bad
    return c.clone()


@needs_hopper
@pytest.mark.parametrize("which", ["competition", "plain", "permuted"])
@pytest.mark.parametrize("m,k,l,b_rows", [(200, 1024, 3, 128), (77, 768, 1, 1), (128, 64, 2, 128)],
                         ids=["200x1024x3", "77x768x1-b1", "128x64x2"])
def test_gemv_is_bit_exact(m, k, l, b_rows, which):
    x = gemv_inputs(m, k, l, b_rows=b_rows, device="cuda")
    run_and_check(nvfp4.gemv, with_scales(x, (2, 3), (4, 5), which), ref_gemv(*x[:4]), exact=True)


@needs_hopper
def test_gemv_is_bit_exact_on_a_competition_shape():
    x = gemv_inputs(7168, 2048, 4, device="cuda")
    run_and_check(nvfp4.gemv, x, ref_gemv(*x[:4]), exact=True)


@needs_hopper
@pytest.mark.parametrize("which", ["competition", "plain", "permuted"])
@pytest.mark.parametrize("m,n,k,l", [(200, 136, 512, 2), (48, 256, 256, 1), (300, 200, 1536, 1)],
                         ids=["200x136x512x2", "48x256x256x1", "300x200x1536x1"])
def test_gemm_is_bit_exact(m, n, k, l, which):
    x = gemm_inputs(m, n, k, l, device="cuda")
    run_and_check(nvfp4.gemm, with_scales(x, (2, 3), (4, 5), which), ref_gemm(*x[:4]), exact=True)


@needs_hopper
@pytest.mark.parametrize("m,n,k", [(128, 7168, 2048), (128, 4096, 7168)], ids=["128x7168x2048", "128x4096x7168"])
def test_gemm_is_bit_exact_and_deterministic_on_competition_shapes(m, n, k):
    x = gemm_inputs(m, n, k, 1, device="cuda")
    first = run_and_check(nvfp4.gemm, x, ref_gemm(*x[:4]), exact=True)
    x[-1].fill_(float("nan"))
    assert torch.equal(run_and_check(nvfp4.gemm, x, ref_gemm(*x[:4]), exact=True), first)


@needs_hopper
def test_gemm_mixes_scale_layouts_per_operand():
    x = gemm_inputs(200, 136, 512, 2, device="cuda")
    run_and_check(nvfp4.gemm, put(put(x, 2, None), 5, None), ref_gemm(*x[:4]), exact=True)  # a permuted, b plain


@needs_hopper
@pytest.mark.parametrize("which", ["competition", "plain", "permuted"])
@pytest.mark.parametrize("m,n,k,l", [(100, 200, 512, 2), (40, 128, 256, 1)], ids=["100x200x512x2", "40x128x256x1"])
def test_dual_gemm_swiglu_is_within_tolerance(m, n, k, l, which):
    x = dual_inputs(m, n, k, l, device="cuda")
    run_and_check(nvfp4.dual_gemm_swiglu, with_scales(x, (3, 4, 5), (6, 7, 8), which), ref_dual(*x[:6]), exact=False)


@needs_hopper
@pytest.mark.parametrize("m,n,k", [(256, 3072, 4096), (512, 3072, 7168)], ids=["256x3072x4096", "512x3072x7168"])
def test_dual_gemm_swiglu_is_within_tolerance_on_competition_shapes(m, n, k):
    x = dual_inputs(m, n, k, 1, device="cuda")
    run_and_check(nvfp4.dual_gemm_swiglu, x, ref_dual(*x[:6]), exact=False)


def check_grouped(data):
    abc, plain, _, _ = data
    cs = nvfp4.grouped_gemm(*data)
    torch.cuda.synchronize()
    assert len(cs) == len(abc) and all(c is t[2] for c, t in zip(cs, abc))
    for i, ((a, b, c), (sfa, sfb)) in enumerate(zip(abc, plain)):
        bad = mismatches(c, ref_gemm(a, b, sfa, sfb), exact=True)
        assert not bad, f"group {i}: {bad}"


@needs_hopper
@pytest.mark.parametrize("sizes", [
    [(80, 256, 256), (200, 128, 512), (33, 384, 256)],
    [(16, 256, 256), (40, 128, 512)],  # mean m <= 48: the 64-row tile
], ids=["3-groups", "small-m"])
def test_grouped_gemm_is_bit_exact(sizes):
    check_grouped(grouped_inputs(sizes, device="cuda"))


@needs_hopper
@pytest.mark.parametrize("n,k,ms", [(4096, 1536, (128, 384)), (7168, 2048, (40, 76, 168, 72, 164, 148, 196, 160))],
                         ids=["4096x1536-2-groups", "7168x2048-8-groups"])
def test_grouped_gemm_is_bit_exact_on_competition_shapes(n, k, ms):
    check_grouped(grouped_inputs([(m, n, k) for m in ms], device="cuda"))


@needs_hopper
def test_gemm_runs_on_the_current_stream_and_in_a_cuda_graph():
    x = gemm_inputs(128, 4096, 7168, 1, device="cuda")  # split-K: a workspace is needed
    want = ref_gemm(*x[:4])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        nvfp4.gemm(*x)
    side.synchronize()
    assert not mismatches(x[-1], want, exact=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        nvfp4.gemm(*x)
    x[-1].fill_(float("nan"))
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert not mismatches(x[-1], want, exact=True)


@needs_hopper
def test_a_graph_of_calls_with_workspaces_replays_beside_eager_calls_that_grow_theirs():
    """A captured call's workspace is the graph's (memory nodes): replays stay right while eager calls on
    the same stream grow that stream's workspace (a bigger split-K GEMM, then a dual GEMM's fp16 A)."""
    g = gemm_inputs(128, 4096, 7168, 1, device="cuda")  # split-K
    d = dual_inputs(256, 3072, 4096, 1, device="cuda")  # the fp16 copy of A
    gr = grouped_inputs([(80, 256, 256), (200, 128, 512)], device="cuda")
    want = (ref_gemm(*g[:4]), ref_dual(*d[:6]), [ref_gemm(a, b, sa, sb) for (a, b, _), (sa, sb) in zip(gr[0], gr[1])])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        calls = ((nvfp4.gemm, g), (nvfp4.dual_gemm_swiglu, d), (nvfp4.grouped_gemm, gr))
        for fn, args in calls:  # warm-up before the capture, as torch advises (the kernels' first launch)
            fn(*args)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            for fn, args in calls:
                fn(*args)
        big = gemm_inputs(128, 7168, 16384, 1, device="cuda")
        for _ in range(3):
            for c in (g[-1], d[-1], *(t[2] for t in gr[0])):
                c.fill_(float("nan"))
            graph.replay()
            nvfp4.gemm(*big)  # eager, on the same stream as the replays
            nvfp4.dual_gemm_swiglu(*dual_inputs(512, 4096, 7168, 1, seed=7, device="cuda"))
            side.synchronize()
            assert not mismatches(g[-1], want[0], exact=True)
            assert not mismatches(d[-1], want[1], exact=False)
            for (_, _, c), w in zip(gr[0], want[2]):
                assert not mismatches(c, w, exact=True)
        assert not mismatches(big[-1], ref_gemm(*big[:4]), exact=True)


@needs_hopper
def test_streams_beyond_the_limit_evict_workspaces_still_in_use_safely():
    """With the limit lowered to 3, split-K calls on 7 streams (each behind a long kernel, so every victim's
    GEMM is still pending when its workspace is evicted) keep at most 3 workspaces, and every result is
    right: an eviction frees only after the victim's last use. A call refused by its checks leaves the
    count alone."""
    from swapffn import _nvfp4
    device = torch.cuda.current_device()
    limit = _nvfp4._stream_workspace_limit()
    assert limit >= 32  # torch's pool of streams (32 per priority) never evicts
    with pytest.raises(ValueError):
        _nvfp4._set_stream_workspace_limit(0)
    x = gemm_inputs(128, 4096, 7168, 1, device="cuda")  # split-K: a workspace
    want = ref_gemm(*x[:4])
    torch.cuda.synchronize()
    _nvfp4._set_stream_workspace_limit(3)
    try:
        outputs, streams = [], [torch.cuda.Stream() for _ in range(7)]
        torch.cuda._sleep(200_000_000)  # ~0.1 s: everything below stays queued behind it
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                c = torch.full_like(x[-1], float("nan"))
                nvfp4.gemm(*x[:-1], c)
                outputs.append(c)
            assert _nvfp4._stream_workspaces(device) <= 3
        before = _nvfp4._stream_workspaces(device)
        with torch.cuda.stream(streams[0]), pytest.raises(swapffn.Error, match="c: expected shape"):
            nvfp4.gemm(*x[:-1], x[-1][:64])
        assert _nvfp4._stream_workspaces(device) == before
        torch.cuda.synchronize()
        for c in outputs:
            assert not mismatches(c, want, exact=True)
    finally:
        _nvfp4._set_stream_workspace_limit(limit)


_ATTRIBUTES_ON_THE_GPU = """
import torch
del torch.Tensor.__dlpack_c_exchange_api__
import sys
sys.path.insert(0, {here!r})
import test_nvfp4 as t
from swapffn import _nvfp4
assert _nvfp4.exchange() == "attributes"
x = t.gemm_inputs(128, 4096, 7168, 1, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    t.nvfp4.gemm(*x)
side.synchronize()
assert not t.mismatches(x[-1], t.ref_gemm(*x[:4]), exact=True)
print("ok")
"""


@needs_hopper
def test_older_torch_without_the_exchange_api_runs_the_kernels_on_its_current_stream():
    import pathlib
    import subprocess
    import sys
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("needs CUDA: a torch with __dlpack_c_exchange_api__ to take away (this one reads attributes)")
    here = str(pathlib.Path(__file__).resolve().parent)
    run = subprocess.run([sys.executable, "-c", _ATTRIBUTES_ON_THE_GPU.format(here=here)], capture_output=True,
                         text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr


@needs_hopper
def test_cuda_tensors_on_the_host_or_mixed_are_refused_naming_them():
    x = gemm_inputs(128, 256, 256, 1, device="cuda")
    expect_refusal(nvfp4.gemm, put(x, 6, x[6].cpu()), ValueError,
                   "nvfp4.gemm: c: expected a CUDA tensor, got one on cpu")
    expect_refusal(nvfp4.gemm, put(put(x, 4, None), 2, x[2].cpu()), ValueError,
                   "nvfp4.gemm: sfa: expected a CUDA tensor")
    abc, plain, _, sizes = grouped_inputs([(80, 128, 256)], device="cuda")  # its plain scales are on the host
    expect_refusal(nvfp4.grouped_gemm, (abc, plain, None, sizes), ValueError,
                   "nvfp4.grouped_gemm: sfasfb_tensors[0].sfa: expected a CUDA tensor, got one on cpu")

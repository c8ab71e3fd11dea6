"""A seeded fuzz corpus of the Python API's arguments (CI runs it with every test): slot ids of every
integer dtype and range, x of every dtype and value class, `out` and `trace` of every wrong kind,
states of every wrong shape, dtype and value. Each case's validity is decided here, independently
of the engine: a valid call must give bitwise what the same call with plain arguments gives on a
twin pool, and a refused call must raise swapffn.Error and leave the pool bitwise unchanged."""
import numpy as np
import pytest

import swapffn

from test_engine import pool_snapshot, random_state, same_pool

SEED = 20261206
CASES = 240
SLOTS = 5
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "tiny.safetensors"
    swapffn.init_model(path, config="tiny", seed=9)
    return swapffn.Engine.load(path, backend="reference", threads=1)


def pick(rng, good, bad, p_good=0.8):
    """A kind of argument: one of the good ones with probability p_good (so that a call whose every
    argument is drawn this way is valid often enough), else one of the bad ones."""
    return str(rng.choice(good if rng.random() < p_good else bad))


def gen_ids(rng, b):
    """(slot ids in some container, the plain list or None when invalid)."""
    plain = [int(v) for v in rng.permutation(SLOTS)[:b]]
    if b and rng.random() < 0.3:
        plain[int(rng.integers(b))] = swapffn.PADDING
    kind = pick(rng, ["list", "array"], ["huge", "negative", "duplicate", "length", "float", "bool", "2d"])
    if kind == "list":
        return plain, plain
    if kind == "array":
        dt = INT_DTYPES[int(rng.integers(len(INT_DTYPES)))]
        if np.issubdtype(dt, np.unsignedinteger) and swapffn.PADDING in plain:
            return np.array([v % 2**(8 * np.dtype(dt).itemsize) for v in plain], dtype=dt), None  # -1 wrapped: out of range
        return np.array(plain, dtype=dt), plain
    if b == 0:
        return plain, plain
    bad = list(plain)
    i = int(rng.integers(b))
    if kind == "huge":
        bad[i] = int(rng.choice([SLOTS, 2**31, 2**32 + bad[i] % SLOTS + 1, 2**63 - 1, 2**64 + 1, 2**80]))
    elif kind == "negative":
        bad[i] = int(rng.choice([-2, -2**31, -2**32 + 1, -2**63]))
    elif kind == "duplicate":
        if b < 2 or plain.count(swapffn.PADDING) == b:
            return plain, plain
        j = next(k for k in range(b) if plain[k] != swapffn.PADDING)
        bad[(j + 1) % b] = plain[j]
        if plain[(j + 1) % b] == plain[j]:
            return plain, plain
    elif kind == "length":
        return bad + [bad[0]], None
    elif kind == "float":
        return np.array(bad, dtype=np.float64), None
    elif kind == "bool":
        return [True] + bad[1:], None
    else:
        return np.array([bad]), None
    if kind in ("huge", "negative") and rng.random() < 0.5:
        for dt in (np.int64, np.uint64):
            try:
                return np.array(bad, dtype=dt), None
            except OverflowError:
                pass
    return bad, None


def gen_x(rng, b, d):
    """(x, its float32 values or None when invalid)."""
    x = rng.standard_normal((b, d)).astype(np.float32)
    kind = pick(rng, ["f32", "f64", "f16", "bound", "list"], ["int", "nan", "inf", "huge", "shape"])
    if kind == "f32":
        return x, x
    if kind == "f64":
        return x.astype(np.float64), x
    if kind == "f16":
        h = x.astype(np.float16)
        return h, h.astype(np.float32)
    if kind == "int":
        return x.astype(np.int32), None
    if kind == "shape":
        return x[:, : d - 1], None
    if kind == "list":
        return (x.tolist(), x) if b else (x.tolist(), None)  # [] has no row length
    if b == 0:
        return x, x
    bad = x.copy()
    i, j = int(rng.integers(b)), int(rng.integers(d))
    bad[i, j] = {"nan": np.nan, "inf": -np.inf, "huge": 3e38, "bound": swapffn.MAX_VALUE}[kind]
    return bad, (bad if kind == "bound" else None)


def gen_out(rng, b, d):
    """(out, whether it is valid)."""
    kind = pick(rng, ["none", "ok", "strided"], ["dtype", "rows", "cols", "readonly", "list", "scalar"])
    if kind == "none":
        return None, True
    if kind == "ok":
        return np.full((b, d), np.nan, np.float32), True
    if kind == "strided":
        return np.full((b, 2 * d), np.nan, np.float32)[:, ::2], True
    if kind == "dtype":
        return np.empty((b, d), np.float64), False
    if kind == "rows":
        return np.empty((b + 1, d), np.float32), False
    if kind == "cols":
        return np.empty((b, 1), np.float32), False
    if kind == "readonly":
        a = np.empty((b, d), np.float32)
        a.flags.writeable = False
        return a, False
    if kind == "list":
        return [[0.0] * d for _ in range(b)], False
    return np.float32(0), False


def gen_trace(rng):
    kind = pick(rng, ["none", "dict"], ["list", "str", "int"])
    return {"none": (None, True), "dict": ({}, True), "list": ([], False), "str": ("t", False),
            "int": (0, False)}[kind]


def _values(bits):
    """bf16 bits (uint16) as their float32 values."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def _bits(ram):
    """A valid RAM argument as bf16 bits: float32 values on the bf16 grid keep their top half."""
    ram = np.asarray(ram)
    return (ram.view(np.uint32) >> 16).astype(np.uint16) if ram.dtype == np.float32 else ram.view(np.uint16)


def gen_state(rng, engine):
    """(slot, ram, stream_map, whether valid)."""
    ram, smap = random_state(engine, rng)
    kind = pick(rng, ["ok", "bf16", "f32"], ["slot", "flat", "transposed", "f32nan", "nan", "huge", "map", "mapshape"])
    slot = int(rng.integers(SLOTS))
    c = ram.shape[0]
    if kind == "ok":
        return slot, ram, smap, True
    if kind == "bf16":
        return slot, ram.view(np.int16), smap, True
    if kind == "slot":
        return int(rng.choice([SLOTS, -1, 2**31, 2**32 + slot])), ram, smap, False
    if kind == "flat":
        return slot, ram.reshape(-1), smap, False
    if kind == "transposed":
        return slot, np.ascontiguousarray(ram.transpose(1, 0, 2)), smap, c == 4
    if kind == "f32":  # the values, on the bf16 grid
        return slot, _values(ram), smap, True
    if kind == "f32nan":
        bad = _values(ram)
        bad[tuple(int(rng.integers(n)) for n in bad.shape)] = rng.choice([np.nan, np.inf, 2.0**49])
        return slot, bad, smap, False
    if kind == "mapshape":
        return slot, ram, smap.reshape(c, 1), False
    bad = ram.copy()
    idx = tuple(int(rng.integers(n)) for n in bad.shape)
    if kind == "nan":
        bad[idx] = int(rng.choice([0x7FC0, 0xFF80, 0x7F80]))
        return slot, bad, smap, False
    if kind == "huge":
        bad[idx] = int(rng.choice([0x5781, 0xDF80, 0x7F7F]))  # just past 2^48, -2^64, bf16's largest
        return slot, bad, smap, False
    badmap = smap.copy()
    badmap[int(rng.integers(c))] = int(rng.choice([0x00, 0xFF, 0xE5]))
    return slot, ram, badmap, False


def twin(engine, pool):
    other = swapffn.StatePool(engine, SLOTS)
    for s in range(SLOTS):
        other.set(s, *pool.get(s))
    return other


def test_api_fuzz_corpus(engine):
    rng = np.random.default_rng(SEED)
    d = engine.config["d_model"]
    pool = swapffn.StatePool(engine, SLOTS)
    for s in range(SLOTS):
        pool.set(s, *random_state(engine, rng))
    counts = {"accepted": 0, "refused": 0}
    for case in range(CASES):
        before = pool_snapshot(pool)
        what = rng.choice(["step", "step", "step", "decode", "set"])
        if what == "set":
            slot, ram, smap, valid = gen_state(rng, engine)
            call = lambda: pool.set(slot, ram, smap)  # noqa: E731
            plain = lambda p: p.set(slot, _bits(ram), smap)  # noqa: E731
        else:
            b = int(rng.integers(0 if what == "step" else 1, 4))
            ids, plain_ids = gen_ids(rng, b)
            x, xv = gen_x(rng, b, d)
            if what == "step":
                out, out_ok = gen_out(rng, b, d)
                trace, trace_ok = gen_trace(rng)
                valid = plain_ids is not None and xv is not None and out_ok and trace_ok
                call = lambda: engine.step(x, pool, ids, out=out, trace=trace)  # noqa: E731
                plain = lambda p: engine.step(xv, p, plain_ids)  # noqa: E731
            else:
                steps = int(rng.integers(1, 3))
                xs = np.stack([x] * steps) if np.ndim(x) == 2 else x
                xsv = None if xv is None else np.stack([xv] * steps)
                valid = plain_ids is not None and xsv is not None
                call = lambda: engine.decode(xs, pool, ids)  # noqa: E731
                plain = lambda p: np.stack([engine.step(xsv[t], p, plain_ids) for t in range(steps)])  # noqa: E731
        if valid:
            control = twin(engine, pool)
            got = call()
            want = plain(control)
            if what != "set":
                assert np.array_equal(np.asarray(got), want), f"case {case}: {what} differs from its plain twin"
            assert same_pool(pool_snapshot(pool), pool_snapshot(control)), f"case {case}: pools differ"
            counts["accepted"] += 1
        else:
            try:
                call()
            except swapffn.Error:
                pass
            else:
                raise AssertionError(f"case {case}: invalid {what} accepted")
            assert same_pool(pool_snapshot(pool), before), f"case {case}: a refused {what} changed the pool"
            counts["refused"] += 1
    assert counts["accepted"] > CASES // 5 and counts["refused"] > CASES // 3, counts

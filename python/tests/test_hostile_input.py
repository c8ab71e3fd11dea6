"""The Python API under hostile input (the second hardening round): slot ids are checked as the
integers they are, every argument is refused before anything changes, RAM and inputs beyond what the
engines accept are refused, threads that share an engine take turns, and files are read and
written safely (no FIFO waits, no planted link followed, no model overwritten). Reference backend
on the host; each refused call leaves the pool bitwise as it was."""
import os
import stat
import subprocess
import sys
import threading

import numpy as np
import pytest

import swapffn
from swapffn import _safetensors

from test_engine import pool_snapshot, random_state, same_pool


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.safetensors"
    swapffn.init_model(path, config="tiny", seed=7)
    return str(path)


@pytest.fixture
def setup(model):
    engine = swapffn.Engine.load(model, backend="reference", threads=1)
    pool = swapffn.StatePool(engine, 4)
    rng = np.random.default_rng(11)
    for s in range(4):
        pool.set(s, *random_state(engine, rng))
    x = rng.standard_normal((2, engine.config["d_model"])).astype(np.float32)
    return engine, pool, x


def refused(call, needle, pool):
    before = pool_snapshot(pool)
    with pytest.raises(swapffn.Error) as err:
        call()
    assert needle in str(err.value), str(err.value)
    assert same_pool(pool_snapshot(pool), before)
    return str(err.value)


# 1. Slot ids beyond int32 were wrapped into another sequence's slot (2**32 + 1 stepped slot 1).
@pytest.mark.parametrize("ids,needle", [
    ([2**32 + 1, 0], "slot_ids[0] = 4294967297 is out of range"),
    ([0, -2**32 + 2], "slot_ids[1] = -4294967294 is out of range"),
    (np.array([2**64 - 1, 0], dtype=np.uint64), "slot_ids[0] = 18446744073709551615"),
    (np.array([0, 2**31], dtype=np.int64), "slot_ids[1] = 2147483648"),
    (np.array([0, 65535], dtype=np.uint16), "slot_ids[1] = 65535"),
    ([0, 2**70], "slot_ids[1] = 1180591620717411303424"),
    ([True, 0], "slot_ids[0]: expected an integer, got a bool"),
    ([0, 1.0], "slot_ids[1]: expected an integer, got float"),
    (np.array([0.0, 1.0]), "slot_ids: expected integers, got dtype float64"),
    ("01", "slot_ids: expected a sequence"),
])
def test_slot_ids_are_checked_as_the_integers_they_are(setup, ids, needle):
    engine, pool, x = setup
    refused(lambda: engine.step(x, pool, ids), needle, pool)


def test_pool_slots_beyond_int32_are_refused_naming_them(setup, tmp_path):
    engine, pool, _ = setup
    ram, smap = pool.get(1)
    for call, needle in [
        (lambda: pool.get(2**31), "slot = 2147483648 is out of range"),
        (lambda: pool.get(2**64 + 1), "slot = 18446744073709551617 is out of range"),
        (lambda: pool.set(-2**32 + 1, ram, smap), "slot = -4294967295"),
        (lambda: pool.save(2**32, tmp_path / "s.st"), "slot = 4294967296"),
        (lambda: pool.load(True, tmp_path / "s.st"), "slot: expected an integer, got a bool"),
        (lambda: pool.reset([0, 2**32 + 2]), "slot_ids[1] = 4294967298"),
        (lambda: pool.reset([1, 1]), "named twice"),
    ]:
        refused(call, needle, pool)
    assert not (tmp_path / "s.st").exists()
    assert np.array_equal(pool.get(np.int64(1))[0], ram)  # NumPy integers are integers


# 3. out, trace and a later step's x were checked after the state had advanced.
def test_every_argument_is_refused_before_the_state_advances(setup):
    engine, pool, x = setup
    d = engine.config["d_model"]
    ro = np.empty((2, d), np.float32)
    ro.flags.writeable = False
    for call, needle in [
        (lambda: engine.step(x, pool, [0, 1], out=np.empty((3, d), np.float32)), "out: expected a float32 array of shape (2, 128)"),
        (lambda: engine.step(x, pool, [0, 1], out=np.empty((1, d), np.float32)), "got float32 (1, 128)"),
        (lambda: engine.step(x, pool, [0, 1], out=np.empty((2, d), np.float64)), "got float64"),
        (lambda: engine.step(x, pool, [0, 1], out=ro), "out: the array is read-only"),
        (lambda: engine.step(x, pool, [0, 1], out=[[0.0] * d] * 2), "out: expected a NumPy float32 array"),
        (lambda: engine.step(x, pool, [0, 1], trace=[]), "trace: expected a dict"),
        (lambda: engine.step(x, pool, [0, 1], trace="gate"), "trace: expected a dict"),
        (lambda: engine.step(x, "pool", [0, 1]), "pool: a StatePool made for this engine"),
    ]:
        refused(call, needle, pool)
    xs = np.stack([x, x, x])
    xs[2, 1, 5] = np.nan
    refused(lambda: engine.decode(xs, pool, [0, 1]), "xs: non-finite value at index " + str(2 * 2 * d + d + 5), pool)
    xs[2, 1, 5] = 0
    refused(lambda: engine.decode(xs, pool, [0, 1], out=np.empty((2, 2, d), np.float32)), "out:", pool)
    refused(lambda: engine.decode(xs, pool, [0, 1, 2]), "slot_ids", pool)


def test_host_decode_equals_host_steps_and_fills_out(setup, model):
    engine, pool, x = setup
    other = swapffn.StatePool(engine, 4)
    for s in range(4):
        other.set(s, *pool.get(s))
    xs = np.stack([x, -x, 0.5 * x])
    out = np.full(xs.shape, np.nan, np.float32)
    assert engine.decode(xs, pool, [3, 1], out=out) is out
    steps = np.stack([engine.step(xs[t], other, [3, 1]) for t in range(3)])
    assert np.array_equal(out, steps)
    assert same_pool(pool_snapshot(pool), pool_snapshot(other))


# 5 and 9. RAM and x beyond what the engines accept; shapes that only match in element count.
def test_values_and_shapes_the_engines_refuse(setup, tmp_path):
    engine, pool, x = setup
    c, d = engine.config["core_count"], engine.config["d_model"]
    ram, smap = pool.get(2)
    bad = ram.copy()
    bad[3, 1, 7] = 0x7FC0  # NaN
    refused(lambda: pool.set(0, bad, smap), "non-finite value at index " + str((3 * 4 + 1) * d + 7), pool)
    bad[3, 1, 7] = 0x5780  # 2^48 (accepted), then 2^49
    pool.set(0, bad, smap)
    pool.set(0, ram, smap)
    bad[3, 1, 7] = 0x5800
    refused(lambda: pool.set(0, bad, smap), "out of range", pool)
    refused(lambda: pool.set(0, ram.reshape(-1), smap), f"ram: expected shape ({c}, 4, {d})", pool)
    refused(lambda: pool.set(0, ram.reshape(4, c, d), smap), "ram: expected shape", pool)
    refused(lambda: pool.set(0, ram, smap.reshape(c, 1)), f"stream_map: expected shape ({c},)", pool)
    big = x.copy()
    big[1, 2] = 1e38
    refused(lambda: engine.step(big, pool, [0, 1]), f"x: value out of range at index {d + 2}", pool)
    big[1, 2] = -np.inf
    refused(lambda: engine.step(big, pool, [0, 1]), f"x: non-finite value at index {d + 2}", pool)
    big[1, 2] = swapffn.MAX_VALUE  # the bound itself is accepted, and gives finite deltas
    assert np.isfinite(engine.step(big, pool, [0, 1])).all()
    pool.save(0, tmp_path / "s.st")
    pool.load(3, tmp_path / "s.st")  # whatever save writes, load takes


def test_arguments_of_the_wrong_kind_are_errors_naming_them(setup):
    engine, pool, x = setup
    for call, needle in [
        (lambda: swapffn.StatePool(engine, True), "slots: expected an integer, got a bool"),
        (lambda: swapffn.StatePool(engine, 2.0), "slots: expected an integer, got float"),
        (lambda: swapffn.StatePool(engine, 2**40), "slots = 1099511627776 is out of range"),
        (lambda: swapffn.StatePool("engine", 2), "engine: expected a swapffn.Engine"),
        (lambda: engine.step(x.astype(np.int32), pool, [0, 1]), "x: expected float32 or bfloat16 values, got dtype int32"),
        (lambda: engine.step("x", pool, [0, 1]), "x: expected an array"),
        (lambda: swapffn.Engine.load(engine.path, backend="reference", threads=2**40), "threads = 1099511627776"),
        (lambda: swapffn.Engine.load(engine.path, backend="reference", device=2**40), "device must be"),
        (lambda: swapffn.Engine.load(engine.path, backend=None), "backend: expected a str"),
        (lambda: swapffn.init_model(engine.path + ".new", seed=2**64), "seed = 18446744073709551616"),
        (lambda: swapffn.init_model(engine.path + ".new", config=1), "config: expected a preset name"),
        (lambda: pool.reset(np.array(3)), "slot_ids: expected a sequence of slots"),
    ]:
        refused(call, needle, pool)
    assert swapffn.StatePool(engine, np.int64(3)).slots == 3
    assert swapffn.Engine.load(engine.path, backend="reference", device=np.int64(0)).device == 0
    empty = np.zeros((0, x.shape[1]), np.float32)  # no rows: no ids, of whatever dtype
    assert engine.step(empty, pool, np.array([])).shape == (0, x.shape[1])
    ro = x.copy()
    ro.flags.writeable = False  # a read-only x is an input like any other
    assert np.array_equal(engine.step(ro, swapffn.StatePool(engine, 4), [0, 1]),
                          engine.step(x, swapffn.StatePool(engine, 4), [0, 1]))


def test_numpy_bfloat16_x_is_accepted(setup):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    engine, pool, x = setup
    xb = x.astype(ml_dtypes.bfloat16)
    other = swapffn.StatePool(engine, 4)
    for s in range(4):
        other.set(s, *pool.get(s))
    assert np.array_equal(engine.step(xb, pool, [0, 1]), engine.step(xb.astype(np.float32), other, [0, 1]))
    ram, smap = pool.get(0)
    pool.set(1, ram.view(ml_dtypes.bfloat16), smap)
    assert np.array_equal(pool.get(1)[0], ram)


# 6. Two threads stepping one slot lost updates (the step releases the GIL); now they take turns.
def test_threads_stepping_one_slot_lose_no_update(model):
    engine = swapffn.Engine.load(model, backend="reference", threads=1)
    d = engine.config["d_model"]
    x = np.random.default_rng(3).standard_normal((1, d)).astype(np.float32)
    shared, alone = swapffn.StatePool(engine, 2), swapffn.StatePool(engine, 2)
    steps, errors = 12, []

    def worker():
        try:
            for _ in range(steps):
                engine.step(x, shared, [1])
        except Exception as e:  # surfaced below: a thread's exception is otherwise lost
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for _ in range(steps):  # the main thread reads the pool meanwhile: a whole slot every time
        shared.get(1)
    for t in threads:
        t.join()
    assert not errors
    for _ in range(3 * steps):
        engine.step(x, alone, [1])
    assert same_pool(pool_snapshot(shared), pool_snapshot(alone))


# 7. A FIFO as a path hung forever; now it is refused at once (in a child, so a hang fails, not hangs).
def test_a_fifo_is_refused_by_every_loader(model, tmp_path):
    fifo = tmp_path / "f.safetensors"
    os.mkfifo(fifo)
    code = f"""
import swapffn
from swapffn import _safetensors
e = swapffn.Engine.load({model!r}, backend="reference")
p = swapffn.StatePool(e, 1)
for call in (lambda: swapffn.Engine.load({str(fifo)!r}, backend="reference"), lambda: p.load(0, {str(fifo)!r}),
             lambda: _safetensors.read({str(fifo)!r})):
    try:
        call()
        raise SystemExit("not refused")
    except ValueError as err:
        assert "not a regular file" in str(err), err
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


# 8 and 9. A state is never saved over the engine's model, nor to a path cut at a NUL byte.
def test_save_refuses_the_model_file_and_nul_paths(setup, model, tmp_path):
    engine, pool, _ = setup
    before = open(model, "rb").read()
    refused(lambda: pool.save(0, model), "is the engine's model file", pool)
    os.symlink(model, tmp_path / "link.st")
    refused(lambda: pool.save(0, tmp_path / "link.st"), "is the engine's model file", pool)
    assert open(model, "rb").read() == before
    refused(lambda: pool.save(0, str(tmp_path / "x") + "\0.st"), "path: the path holds a NUL byte", pool)
    refused(lambda: pool.load(0, str(tmp_path / "x") + "\0.st"), "NUL byte", pool)
    refused(lambda: swapffn.Engine.load(model + "\0x"), "NUL byte", pool)
    assert not (tmp_path / "x").exists()


# 2. The Python writer opened a predictable temporary name and followed a link planted there.
def test_python_writer_follows_no_planted_link_and_keeps_the_mode(tmp_path):
    victim, path = tmp_path / "victim", tmp_path / "m.safetensors"
    victim.write_bytes(b"precious")
    os.chmod(victim, 0o600)
    for n in range(64):
        os.symlink(victim, f"{path}.tmp-{os.getpid()}-{n}")
    os.symlink(victim, path)
    tensors = {"a": ("F32", np.arange(6, dtype=np.float32).reshape(2, 3))}
    _safetensors.write(path, tensors)
    assert victim.read_bytes() == b"precious" and not path.is_symlink()
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o600
    os.chmod(path, 0o600)
    _safetensors.write(path, tensors, {"k": "v"})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # a private file stays private
    got, meta = _safetensors.read(path)
    assert np.array_equal(got["a"][1], tensors["a"][1]) and meta == {"k": "v"}
    umask = os.umask(0o022)
    try:
        _safetensors.write(tmp_path / "new.st", tensors)
    finally:
        os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "new.st").st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp" in p.name and not p.is_symlink()) == []


# 9. Huge shapes or offsets wrapped in int64 or raised OverflowError instead of naming the file.
@pytest.mark.parametrize("entry,needle", [
    ('{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}', "overflows int64"),
    ('{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616000]}', "run past"),
    ('{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}', "is not a list of non-negative integers"),
    ('{"dtype":"F32","shape":[' + ",".join(["1"] * 65) + '],"data_offsets":[0,4]}', "65 dimensions, more than 64"),
])
def test_python_reader_names_the_file_for_huge_numbers(tmp_path, entry, needle):
    path = tmp_path / "bad.st"
    header = ('{"t":' + entry + '}').encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    with pytest.raises(ValueError) as err:
        _safetensors.read(path)
    assert str(path) in str(err.value) and needle in str(err.value), str(err.value)


try:
    import torch
except ImportError:  # the CUDA cases below need torch with a Hopper GPU
    torch = None
needs_cuda = pytest.mark.skipif(torch is None or not torch.cuda.is_available() or not swapffn.gpu()["hopper"],
                                reason="needs CUDA: torch with a Hopper GPU")


# 6 on the GPU: steps of one engine enqueued on two streams (by two threads, with no event between
# them) share its buffers; the engine orders each after the other stream's last step.
@needs_cuda
def test_cuda_steps_on_two_streams_from_two_threads_lose_no_update(model):
    engine = swapffn.Engine.load(model, backend="fused")
    d = engine.config["d_model"]
    dev = torch.device("cuda", engine.device)
    x = torch.randn(2, d, device=dev)
    ids = torch.tensor([1, 3], dtype=torch.int32, device=dev)
    shared, alone = swapffn.StatePool(engine, 4), swapffn.StatePool(engine, 4)
    engine.step(x, alone, ids)  # the first step at a batch size allocates
    alone.reset([1, 3])
    steps, errors = 10, []
    outs = {}

    def worker(k):
        try:
            s = torch.cuda.Stream(device=dev)
            with torch.cuda.stream(s):
                outs[k] = [engine.step(x, shared, ids) for _ in range(steps)]
            s.synchronize()
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for _ in range(2 * steps):
        engine.step(x, alone, ids)
    torch.cuda.synchronize()
    assert same_pool(pool_snapshot(shared), pool_snapshot(alone))


@needs_cuda
def test_cuda_range_is_refused_before_the_step(model):
    engine = swapffn.Engine.load(model, backend="fused")
    d = engine.config["d_model"]
    pool = swapffn.StatePool(engine, 4)
    x = torch.randn(2, d, device=torch.device("cuda", engine.device))
    x[1, 4] = 1e38
    refused(lambda: engine.step(x, pool, [0, 1]), f"x: value out of range at index {d + 4}", pool)
    x[1, 4] = 0
    refused(lambda: engine.step(x, pool, [0, 2**32]), "slot_ids[1] = 4294967296 is out of range", pool)


def test_version_and_the_backends_that_run_here():
    assert swapffn.__version__.count(".") == 2
    here, built = swapffn.backends(), swapffn.backends(runnable=False)
    assert "reference" in here and set(here) <= set(built)
    assert ("fused" in built) == swapffn._swapffn.with_cuda
    assert ("fused" in here) == (swapffn._swapffn.with_cuda and swapffn.gpu()["hopper"])


def test_errors_of_the_environment_have_their_own_classes(model, tmp_path):
    with pytest.raises(swapffn.FileError) as err:
        swapffn.Engine.load(tmp_path / "missing.safetensors", backend="reference")
    assert isinstance(err.value, OSError) and isinstance(err.value, swapffn.Error) and "cannot open" in str(err.value)
    engine = swapffn.Engine.load(model, backend="reference")
    pool = swapffn.StatePool(engine, 1)
    with pytest.raises(OSError):
        pool.load(0, tmp_path / "missing.safetensors")
    with pytest.raises(OSError):
        pool.save(0, tmp_path / "no_dir" / "s.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(swapffn.Error) as err:  # a malformed file: its content, not the environment
        pool.load(0, tmp_path / "junk.safetensors")
    assert not isinstance(err.value, OSError)
    with pytest.raises(swapffn.NoGpuError):
        swapffn.Engine.load(model, backend="reference", device=4096)
    if swapffn._swapffn.with_cuda and not swapffn.gpu()["hopper"]:
        with pytest.raises(swapffn.NoGpuError):
            swapffn.Engine.load(model, backend="fused")

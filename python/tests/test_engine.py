"""The Python engine API: slot steps against dense steps bitwise (SPEC section 7), padding rows,
the pool's round trips, and bad input refused naming the argument with the pool unchanged. Every
test runs on the reference backend on the host; the CUDA tests run where torch sees a Hopper GPU."""
import numpy as np
import pytest

import swapffn


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.safetensors"
    swapffn.init_model(path, config="tiny", seed=5)
    return str(path)


def random_state(engine, rng):
    c, d = engine.config["core_count"], engine.config["d_model"]
    ram = (rng.standard_normal((c, 4, d)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    perms = [rng.permutation(4) for _ in range(c)]
    smap = np.array([p[0] | p[1] << 2 | p[2] << 4 | p[3] << 6 for p in perms], dtype=np.uint8)
    return ram, smap


def pool_snapshot(pool):
    return [tuple(a.copy() for a in pool.get(s)) for s in range(pool.slots)]


def same_pool(a, b):
    return all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b))


def engines(model):
    out = [swapffn.Engine.load(model, backend="reference", threads=2)]
    if swapffn.gpu()["hopper"]:
        out += [swapffn.Engine.load(model, backend=b) for b in ("fused", "unfused")]
    return out


def test_slot_steps_equal_dense_steps_bitwise(model):
    for engine in engines(model):
        rng = np.random.default_rng(1)
        d = engine.config["d_model"]
        states = [random_state(engine, rng) for _ in range(3)]
        xs = rng.standard_normal((4, 3, d)).astype(np.float32)
        # Dense: each sequence alone in a pool of one slot.
        want = []
        for k in range(3):
            one = swapffn.StatePool(engine, 1)
            one.set(0, *states[k])
            want.append(np.stack([engine.step(xs[t, k:k + 1], one, [0])[0] for t in range(4)]))
        # Slots 6, 0, 3 of a pool of 8, rows in a different order every token, with padding.
        pool = swapffn.StatePool(engine, 8)
        slot = [6, 0, 3]
        for k in range(3):
            pool.set(slot[k], *states[k])
        untouched = pool_snapshot(pool)
        orders = [[2, -1, 0, 1], [1, 0, 2], [-1, 2, 1, -1, 0], [0, 2, 1]]
        got = [[None] * 4 for _ in range(3)]
        for t, order in enumerate(orders):
            x = np.stack([xs[t, k] if k >= 0 else np.full(d, 7.0, np.float32) for k in order])
            delta = engine.step(x, pool, [slot[k] if k >= 0 else swapffn.PADDING for k in order])
            for r, k in enumerate(order):
                if k < 0:
                    assert not delta[r].any(), "a padding row's delta must be zero"
                else:
                    got[k][t] = delta[r]
        for k in range(3):
            assert np.array_equal(np.stack(got[k]), want[k]), f"{engine.name}: sequence {k} differs from dense"
        after = pool_snapshot(pool)
        for s in (1, 2, 4, 5, 7):
            assert same_pool([after[s]], [untouched[s]]), f"{engine.name}: unnamed slot {s} changed"


def test_decode_equals_steps_and_records_a_trace(model):
    engine = swapffn.Engine.load(model, backend="reference", threads=2)
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((3, 2, engine.config["d_model"])).astype(np.float32)
    a, b = swapffn.StatePool(engine, 4), swapffn.StatePool(engine, 4)
    deltas = engine.decode(xs, a, [3, 1])
    for t in range(3):
        assert np.array_equal(deltas[t], engine.step(xs[t], b, [3, 1]))
    trace = {}
    engine.step(xs[0], b, [3, 1], trace=trace)
    e, c = engine.config["n_events"], engine.config["core_count"]
    assert trace["gate"].shape == (e, 2, c) and trace["slot"].shape == (e, 2, c)
    assert set(np.unique(trace["gate"])) <= {0, 1} and trace["slot"].max() <= 3


def test_pool_round_trips(model, tmp_path):
    engine = swapffn.Engine.load(model, backend="reference")
    pool = swapffn.StatePool(engine, 3)
    ram, smap = random_state(engine, np.random.default_rng(3))
    pool.set(1, ram, smap)
    got_ram, got_map = pool.get(1)
    assert np.array_equal(got_ram, ram) and np.array_equal(got_map, smap)
    path = tmp_path / "s.safetensors"
    pool.save(1, path)
    pool.load(2, path)
    assert same_pool([pool.get(2)], [pool.get(1)])
    pool.reset([1])
    fresh_ram, fresh_map = pool.get(1)
    assert not fresh_ram.any() and (fresh_map == 0xE4).all()


def test_pool_refuses_a_state_of_another_model(model, tmp_path):
    other = tmp_path / "other.safetensors"
    swapffn.init_model(str(other), config="tiny", seed=2)  # the same shapes as `model`, another seed
    mine = swapffn.StatePool(swapffn.Engine.load(model, backend="reference"), 1)
    theirs = swapffn.StatePool(swapffn.Engine.load(other, backend="reference"), 1)
    path = tmp_path / "s.safetensors"
    theirs.save(0, path)
    with pytest.raises(swapffn.Error) as refused:
        mine.load(0, path)
    assert "not to model " + str(model) in str(refused.value)
    theirs.load(0, path)


@pytest.mark.parametrize("case", ["duplicate", "range", "count", "dtype", "shape", "nonfinite", "map", "ram"])
def test_bad_input_names_the_argument_and_leaves_the_pool(model, case):
    engine = swapffn.Engine.load(model, backend="reference")
    d = engine.config["d_model"]
    pool = swapffn.StatePool(engine, 4)
    pool.set(2, *random_state(engine, np.random.default_rng(4)))
    before = pool_snapshot(pool)
    x = np.random.default_rng(5).standard_normal((2, d)).astype(np.float32)
    ids = [2, 0]
    ram, smap = pool.get(0)
    if case == "duplicate":
        call, needle = (lambda: engine.step(x, pool, [2, 2])), "named twice"
    elif case == "range":
        call, needle = (lambda: engine.step(x, pool, [2, 4])), "slot_ids[1] = 4"
    elif case == "count":
        call, needle = (lambda: engine.step(x, pool, [2])), "slot_ids"
    elif case == "dtype":
        call, needle = (lambda: engine.step(x.astype(np.int32), pool, ids)), "x: expected float32"
    elif case == "shape":
        call, needle = (lambda: engine.step(x[:, :-1], pool, ids)), "x: expected shape"
    elif case == "nonfinite":
        x[1, 3] = np.inf
        call, needle = (lambda: engine.step(x, pool, ids)), f"index {d + 3}"
    elif case == "map":
        bad = smap.copy()
        bad[5] = 0
        call, needle = (lambda: pool.set(1, ram, bad)), "stream map"
    else:
        call, needle = (lambda: pool.set(1, ram[:, :2], smap)), "ram:"
    with pytest.raises(swapffn.Error) as err:
        call()
    assert needle in str(err.value)
    assert same_pool(pool_snapshot(pool), before)


def test_engine_refuses_a_foreign_pool_and_bad_backends(model):
    a = swapffn.Engine.load(model, backend="reference")
    b = swapffn.Engine.load(model, backend="reference")
    x = np.zeros((1, a.config["d_model"]), np.float32)
    with pytest.raises(swapffn.Error, match="pool"):
        a.step(x, swapffn.StatePool(b, 1), [0])
    with pytest.raises(swapffn.Error, match="unknown backend 'magic'"):
        swapffn.Engine.load(model, backend="magic")


try:
    import torch
except ImportError:  # torch is optional (or unusable here): the host tests above need none
    torch = None
needs_cuda = pytest.mark.skipif(torch is None or not torch.cuda.is_available() or not swapffn.gpu()["hopper"],
                                reason="needs CUDA: torch with a Hopper GPU")


@needs_cuda
@pytest.mark.parametrize("backend", ["fused", "unfused"])
def test_cuda_step_equals_host_step_and_captures_in_a_torch_graph(model, backend):
    engine = swapffn.Engine.load(model, backend=backend)
    d = engine.config["d_model"]
    rng = np.random.default_rng(6)
    states = [random_state(engine, rng) for _ in range(3)]
    xs = rng.standard_normal((3, 4, d)).astype(np.float32)
    ids = [5, -1, 1, 2]

    def filled():
        p = swapffn.StatePool(engine, 6)
        for s, st in zip([5, 1, 2], states):
            p.set(s, *st)
        return p

    host_pool, dev_pool, graph_pool = filled(), filled(), filled()
    want = np.stack([engine.step(xs[t], host_pool, ids) for t in range(3)])
    dev = torch.device("cuda", 0)
    got = torch.stack([engine.step(torch.from_numpy(xs[t]).to(dev), dev_pool, ids) for t in range(3)])
    assert np.array_equal(got.cpu().numpy(), want)
    # Under the caller's graph: warm up at this batch size, capture one step, replay per token.
    x_static = torch.from_numpy(xs[0]).to(dev)
    ids_dev = torch.tensor(ids, dtype=torch.int32, device=dev)
    out = torch.empty((4, d), dtype=torch.float32, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        engine.step(x_static, swapffn.StatePool(engine, 6), ids_dev, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        engine.step(x_static, graph_pool, ids_dev, out=out)
    replayed = []
    for t in range(3):
        x_static.copy_(torch.from_numpy(xs[t]).to(dev))
        graph.replay()
        replayed.append(out.clone())
    assert np.array_equal(torch.stack(replayed).cpu().numpy(), want)
    for s in (5, 1, 2):
        assert same_pool([graph_pool.get(s)], [host_pool.get(s)])


@needs_cuda
def test_cuda_decode_replays_graphs_and_equals_host_steps(model):
    engine = swapffn.Engine.load(model, backend="fused")
    d = engine.config["d_model"]
    rng = np.random.default_rng(8)
    states = [random_state(engine, rng) for _ in range(2)]
    xs = rng.standard_normal((5, 3, d)).astype(np.float32)
    ids = [4, -1, 0]

    def filled():
        p = swapffn.StatePool(engine, 5)
        for s, st in zip([4, 0], states):
            p.set(s, *st)
        return p

    host_pool, dev_pool, capture_pool = filled(), filled(), filled()
    want = engine.decode(xs, host_pool, ids)
    dev = torch.device("cuda", 0)
    # Five steps: the first runs eagerly, the second is captured, the rest replay the engine's graph;
    # on a side stream, so the join to the caller's stream is what orders the result's read.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = engine.decode(torch.from_numpy(xs).to(dev), dev_pool, ids)
        x_bf16 = torch.from_numpy(xs).to(dev).bfloat16()
        got_bf16 = engine.decode(x_bf16, filled(), ids)
    torch.cuda.current_stream().wait_stream(side)
    assert np.array_equal(got.cpu().numpy(), want)
    for s in (4, 0):
        assert same_pool([dev_pool.get(s)], [host_pool.get(s)])
    assert np.array_equal(got_bf16.cpu().numpy(), engine.decode(x_bf16.float().cpu().numpy(), filled(), ids))
    # Inside the caller's capture the steps are recorded one by one (slot ids on the device).
    x_static = torch.from_numpy(xs).to(dev)
    ids_dev = torch.tensor(ids, dtype=torch.int32, device=dev)
    warm = engine.decode(x_static, filled(), ids_dev)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with pytest.raises(swapffn.Error, match="slot_ids: inside a CUDA graph capture"):
            engine.decode(x_static, capture_pool, ids)
        captured = engine.decode(x_static, capture_pool, ids_dev, out=warm)
    graph.replay()
    assert np.array_equal(captured.cpu().numpy(), want)
    for s in (4, 0):
        assert same_pool([capture_pool.get(s)], [host_pool.get(s)])
    with pytest.raises(swapffn.Error, match="xs: expected a contiguous"):
        engine.decode(torch.from_numpy(xs).to(dev).transpose(0, 1), dev_pool, ids)
    with pytest.raises(swapffn.Error, match="out: expected"):
        engine.decode(x_static, dev_pool, ids, out=torch.empty(4, 3, d, device=dev))


@needs_cuda
def test_cuda_bad_input_is_refused(model):
    engine = swapffn.Engine.load(model, backend="fused")
    d = engine.config["d_model"]
    pool = swapffn.StatePool(engine, 4)
    before = pool_snapshot(pool)
    dev = torch.device("cuda", 0)
    x = torch.randn(2, d, device=dev)
    with pytest.raises(swapffn.Error, match="contiguous"):
        engine.step(torch.randn(d, 2, device=dev).t(), pool, [0, 1])
    with pytest.raises(swapffn.Error, match="x: expected float32"):
        engine.step(x.half(), pool, [0, 1])
    with pytest.raises(swapffn.Error, match="named twice"):
        engine.step(x, pool, torch.tensor([1, 1], dtype=torch.int32, device=dev))
    with pytest.raises(swapffn.Error, match="out: expected"):
        engine.step(x, pool, [0, 1], out=torch.empty(3, d, device=dev))
    bad = x.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(swapffn.Error, match=f"index {d + 2}"):
        engine.step(bad, pool, [0, 1])
    assert same_pool(pool_snapshot(pool), before)

"""swapffn.torch.step, the engine's slot step as a PyTorch custom op: the same bits as Engine.step,
eagerly and under torch.compile (the pool's token orders the steps) on the host (reference), and,
where torch sees a Hopper GPU, on CUDA tensors eagerly, under torch.compile and under
torch.cuda.graph."""
import numpy as np
import pytest

import swapffn

torch = pytest.importorskip("torch", exc_type=ImportError)
import swapffn.torch as st  # noqa: E402  (needs torch)

needs_hopper = pytest.mark.skipif(not torch.cuda.is_available() or not swapffn.gpu()["hopper"],
                                  reason="needs CUDA: a Hopper GPU")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.safetensors"
    swapffn.init_model(path, config="tiny", seed=7)
    return str(path)


def run_steps(fn, engine, xs, ids):
    pool = swapffn.StatePool(engine, 4)
    return torch.stack([fn(xs[t], pool, ids) for t in range(xs.shape[0])])


def test_op_equals_engine_step_eager_and_compiled_on_the_host(model):
    engine = swapffn.Engine.load(model, backend="reference", threads=2)
    xs = torch.from_numpy(np.random.default_rng(1).standard_normal((3, 2, engine.config["d_model"])).astype(np.float32))
    ids = torch.tensor([3, 1], dtype=torch.int32)
    want = run_steps(lambda x, p, i: engine.step(x, p, i), engine, xs, ids)
    assert torch.equal(run_steps(st.step, engine, xs, ids), want)

    def two_steps(x0, x1, pool, i):  # two steps of one pool: neither may be merged or reordered
        return st.step(x0, pool, i), st.step(x1, pool, i)

    compiled = torch.compile(two_steps, backend="aot_eager", fullgraph=True)
    pool = swapffn.StatePool(engine, 4)
    st.register(pool)  # host bookkeeping happens outside the compiled region
    a, b = compiled(xs[0], xs[1], pool, ids)
    assert torch.equal(a, want[0]) and torch.equal(b, want[1])
    assert int(pool.token) == 2


def test_op_has_a_fake_implementation(model):
    engine = swapffn.Engine.load(model, backend="reference")
    pool = swapffn.StatePool(engine, 2)
    st.register(pool)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(2, engine.config["d_model"])
        out = torch.ops.swapffn.step(x, torch.tensor([0, 1], dtype=torch.int32), pool.token, pool._op_handle)
    assert out.shape == (2, engine.config["d_model"]) and out.dtype == torch.float32


@needs_hopper
def test_op_on_cuda_eagerly_and_under_a_cuda_graph(model):
    engine = swapffn.Engine.load(model, backend="fused")
    dev = torch.device("cuda", 0)
    xs = torch.from_numpy(np.random.default_rng(2).standard_normal((3, 2, engine.config["d_model"])).astype(np.float32))
    ids = torch.tensor([3, 1], dtype=torch.int32, device=dev)
    want = run_steps(lambda x, p, i: engine.step(x, p, i), engine, xs.to(dev), ids)
    assert torch.equal(run_steps(st.step, engine, xs.to(dev), ids), want)
    pool = swapffn.StatePool(engine, 4)
    st.register(pool)
    x_static = xs[0].to(dev).clone()
    st.step(x_static, swapffn.StatePool(engine, 4), ids)  # warm-up at this batch size, outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = st.step(x_static, pool, ids)
    got = []
    for t in range(3):
        x_static.copy_(xs[t].to(dev))
        graph.replay()
        got.append(out.clone())
    assert torch.equal(torch.stack(got), want)


def pool_bits(pool):
    return [tuple(a.copy() for a in pool.get(s)) for s in range(pool.slots)]


def same_pool_bits(a, b):
    return all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b))


@needs_hopper
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
@pytest.mark.parametrize("backend", ["fused", "unfused"])
def test_op_on_cuda_under_torch_compile_gives_the_eager_bits_step_by_step(model, backend, compiler):
    engine = swapffn.Engine.load(model, backend=backend)
    dev = torch.device("cuda", 0)
    d = engine.config["d_model"]
    xs = torch.from_numpy(np.random.default_rng(3).standard_normal((3, 2, d)).astype(np.float32)).to(dev)
    ids = torch.tensor([3, 1], dtype=torch.int32, device=dev)
    torch._dynamo.reset()
    compiled = torch.compile(st.step, backend=compiler)
    # Two fresh pools; the compiled one is registered by its first call (a graph break there).
    eager_pool, compiled_pool = swapffn.StatePool(engine, 4), swapffn.StatePool(engine, 4)
    for t in range(3):
        want = st.step(xs[t], eager_pool, ids)
        got = compiled(xs[t], compiled_pool, ids)
        assert torch.equal(got, want), f"step {t}: delta differs from eager"
        assert same_pool_bits(pool_bits(compiled_pool), pool_bits(eager_pool)), f"step {t}: the pool differs from eager"
    assert int(compiled_pool.token) == 3

    # Three steps in one compiled graph, on a registered pool: one step after another, none merged.
    def three_steps(x0, x1, x2, pool, i):
        return st.step(x0, pool, i), st.step(x1, pool, i), st.step(x2, pool, i)

    torch._dynamo.reset()
    graph = torch.compile(three_steps, backend=compiler, fullgraph=True)
    eager_pool, compiled_pool = swapffn.StatePool(engine, 4), swapffn.StatePool(engine, 4)
    st.register(compiled_pool)
    want = torch.stack([st.step(xs[t], eager_pool, ids) for t in range(3)])
    got = torch.stack(graph(xs[0], xs[1], xs[2], compiled_pool, ids))
    assert torch.equal(got, want)
    assert same_pool_bits(pool_bits(compiled_pool), pool_bits(eager_pool))
    assert int(compiled_pool.token) == 3

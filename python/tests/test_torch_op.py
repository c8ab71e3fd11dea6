"""swapffn.torch.step, the engine's slot step as a PyTorch custom op: the same bits as Engine.step,
eagerly and under torch.compile (the pool's token orders the steps) on the host (reference), and,
where torch sees a Hopper GPU, eagerly on CUDA tensors and under torch.cuda.graph."""
import numpy as np
import pytest

import swapffn

torch = pytest.importorskip("torch", exc_type=ImportError)
import swapffn.torch as st  # noqa: E402  (needs torch)


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


@pytest.mark.skipif(not torch.cuda.is_available() or not swapffn.gpu()["hopper"], reason="needs a Hopper GPU")
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

"""The PyTorch side of the API's defaults: SwapFFN from a preset or a dict, state as torch tensors
both ways (the module's state into a pool and back, bit for bit), and the engine refusing a tensor
that requires grad under grad mode (the op too). Host; CUDA tensors take the same checks."""
import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import swapffn  # noqa: E402
import swapffn.torch  # noqa: E402
from swapffn.torch import SwapFFN  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.safetensors"
    swapffn.init_model(path, config="tiny", seed=13)
    return str(path)


def test_swapffn_from_a_preset_or_a_dict():
    assert SwapFFN.__doc__ and "SPEC" in SwapFFN.__doc__ and "from_config" in SwapFFN.__doc__
    assert "preset" in SwapFFN.from_config.__doc__
    tiny = swapffn.config_preset("tiny")
    for m in (SwapFFN("tiny"), SwapFFN.from_config("tiny"), SwapFFN.from_config(dict(tiny)),
              SwapFFN(config=tiny, dtype=torch.float64)):
        assert m.config == tiny
    assert SwapFFN.from_config("tiny", dtype=torch.float64).w1.weight.dtype == torch.float64
    assert inspect.signature(SwapFFN).parameters["config"].default == "default"
    with pytest.raises(swapffn.Error, match="unknown preset 'small'"):
        SwapFFN("small")
    with pytest.raises(ValueError, match="d_model"):
        SwapFFN.from_config({**tiny, "d_model": 0})


def test_state_as_torch_tensors_both_ways(model):
    engine = swapffn.Engine.load(model, backend="reference", threads=2)
    pool = swapffn.StatePool(engine, 2)
    layer = SwapFFN.from_safetensors(model)
    torch.manual_seed(0)
    state = layer.init_state(1)
    with torch.no_grad():
        for _ in range(3):  # a few steps so that the RAM holds swapped, non-initial values
            _, state = layer(torch.randn(1, layer.config["d_model"]), state)
    pool.set(1, state.ram[0], state.stream_map[0])  # fp32 values on the bf16 grid
    ram, smap = pool.get(1, as_torch=True)
    assert ram.dtype == torch.bfloat16 and smap.dtype == torch.uint8
    assert torch.equal(ram.float(), state.ram[0]) and torch.equal(smap, state.stream_map[0])
    bits, map_np = pool.get(1)
    assert np.array_equal(ram.view(torch.int16).numpy().view(np.uint16), bits)
    pool.set(0, ram, smap)  # bf16 tensors back in
    assert np.array_equal(pool.get(0)[0], bits)
    pool.reset([0])
    pool.set(0, ram.double(), smap)  # any float dtype: values on the grid stay
    assert np.array_equal(pool.get(0)[0], bits)


def test_a_tensor_that_requires_grad_is_refused_under_grad_mode(model):
    engine = swapffn.Engine.load(model, backend="reference", threads=2)
    pool = swapffn.StatePool(engine, 2)
    pool.reset([0])
    x = torch.randn(1, engine.config["d_model"], requires_grad=True)
    before = [a.copy() for a in pool.get(0)]
    with pytest.raises(swapffn.Error, match="x: the tensor requires grad.*no_grad.*detach"):
        engine.step(x, pool, [0])
    with pytest.raises(swapffn.Error, match="xs: the tensor requires grad"):
        engine.decode(x.unsqueeze(0), pool, [0])
    ids = torch.tensor([0], dtype=torch.int32)
    with pytest.raises(swapffn.Error, match="requires grad"):
        swapffn.torch.step(x, pool, ids)
    after = pool.get(0)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])
    with torch.no_grad():  # told otherwise: the same step
        a = engine.step(x, pool, [0])
    pool.reset([0])
    b = engine.step(x.detach(), pool, [0])
    assert torch.equal(a, b) and not a.requires_grad
    pool.reset([0])
    with torch.no_grad():
        c = swapffn.torch.step(x, pool, ids)
    assert torch.equal(a, c)

"""The API's defaults and conversions: backend "auto", the config presets, float RAM into a pool
(rounded to bf16 as a RAM write rounds), each refused input naming its argument with nothing
changed. Host only; the torch side is in test_torch_api.py."""
import inspect
import logging

import numpy as np
import pytest

import swapffn


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.safetensors"
    swapffn.init_model(path, config="tiny", seed=11)
    return str(path)


def test_auto_is_the_default_and_says_which(model, caplog):
    want = "fused" if swapffn.gpu()["hopper"] and "fused" in swapffn.backends(runnable=False) else "reference"
    assert inspect.signature(swapffn.Engine.load).parameters["backend"].default == swapffn.AUTO == "auto"
    with caplog.at_level(logging.INFO, logger="swapffn"):
        engine = swapffn.Engine.load(model, threads=2)
    assert engine.name == want
    assert f"backend auto: {want}" in caplog.text
    assert want in swapffn.backends()
    assert set(swapffn.backends()) <= set(swapffn.backends(runnable=False))
    with pytest.raises(swapffn.Error, match="unknown backend 'automatic'.*auto"):
        swapffn.Engine.load(model, backend="automatic")


def test_config_presets_and_one_default_for_init():
    assert swapffn.CONFIG_PRESETS == ("default", "tiny")
    tiny = swapffn.config_preset("tiny")
    default = swapffn.config_preset("default")
    assert default["d_model"] == 1024 and default["d_ff"] == 4096 and default["core_count"] == 512
    assert tiny["d_model"] < default["d_model"]
    tiny["d_model"] = 1  # a copy: the next call is unchanged
    assert swapffn.config_preset("tiny")["d_model"] != 1
    assert inspect.signature(swapffn.init_model).parameters["config"].default == "default"
    for bad, match in (("huge", "unknown preset 'huge'"), (None, "expected a preset name")):
        with pytest.raises(swapffn.Error, match=match):
            swapffn.config_preset(bad)
        with pytest.raises(swapffn.Error, match=match):
            swapffn.init_model("/nonexistent/never-written.safetensors", config=bad)


def rne_bits(values):
    """float32 values rounded to bf16 bits, to nearest even (what a RAM write does)."""
    u = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_pool_set_takes_float_ram_rounded_to_bf16(model):
    engine = swapffn.Engine.load(model, backend="reference", threads=2)
    pool = swapffn.StatePool(engine, 2)
    c, d = engine.config["core_count"], engine.config["d_model"]
    rng = np.random.default_rng(4)
    values = rng.standard_normal((c, 4, d)).astype(np.float32)
    values.reshape(-1)[:3] = [1.00390625, 1.01171875, -3.0078125]  # halfway: to even (down, up, down)
    smap = np.full(c, 0xE4, np.uint8)
    for dtype in (np.float32, np.float16, np.float64):
        pool.set(1, values.astype(dtype), smap)
        ram, got_map = pool.get(1)
        assert np.array_equal(ram, rne_bits(values.astype(dtype).astype(np.float32))), dtype
        assert np.array_equal(got_map, smap)
    assert list(rne_bits(values.reshape(-1)[:3])) == [0x3F80, 0x3F82, 0xC040]


@pytest.mark.parametrize("bad, match", [
    (np.nan, "non-finite|NaN|nan"), (np.inf, "non-finite|inf"), (2.0**49, "2\\^48|out of range|beyond"),
])
def test_pool_set_refuses_bad_float_ram_leaving_the_slot(model, bad, match):
    engine = swapffn.Engine.load(model, backend="reference", threads=2)
    pool = swapffn.StatePool(engine, 1)
    before = [a.copy() for a in pool.get(0)]
    c, d = engine.config["core_count"], engine.config["d_model"]
    ram = np.ones((c, 4, d), np.float32)
    ram[c - 1, 3, d - 1] = bad
    with pytest.raises(swapffn.Error, match=match):
        pool.set(0, ram, np.full(c, 0xE4, np.uint8))
    after = pool.get(0)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])
    with pytest.raises(swapffn.Error, match="ram: expected bf16 bits"):
        pool.set(0, np.ones((c, 4, d), np.complex64), np.full(c, 0xE4, np.uint8))
    with pytest.raises(swapffn.Error, match="as_torch: expected a bool"):
        pool.get(0, as_torch="yes")


def test_buffers_generation_is_none_on_the_host(model):
    assert swapffn.Engine.load(model, backend="reference", threads=2).buffers_generation is None


@pytest.mark.skipif(not swapffn.gpu()["hopper"] or "fused" not in swapffn.backends(runnable=False),
                    reason="needs CUDA: a Hopper GPU and the CUDA build")
def test_buffers_generation_counts_each_move(model):
    engine = swapffn.Engine.load(model, backend="fused")
    pool = swapffn.StatePool(engine, 4)
    d = engine.config["d_model"]
    rng = np.random.default_rng(5)
    g0 = engine.buffers_generation
    engine.step(rng.standard_normal((2, d)).astype(np.float32), pool, [0, 1])
    g2 = engine.buffers_generation
    assert g2 == g0 + 1
    engine.step(rng.standard_normal((2, d)).astype(np.float32), pool, [1, 0])
    assert engine.buffers_generation == g2  # the same batch size: the same buffers
    engine.step(rng.standard_normal((1, d)).astype(np.float32), pool, [3])
    assert engine.buffers_generation == g2  # a smaller batch runs in the same buffers
    engine.step(rng.standard_normal((3, d)).astype(np.float32), pool, [3, 2, 1])
    assert engine.buffers_generation == g2 + 1  # a larger one moves them

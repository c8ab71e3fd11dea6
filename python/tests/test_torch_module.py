"""swapffn.torch.SwapFFN, SPEC as a trainable module: its files are the engine's bit for bit, it agrees
with the engine's reference under SPEC section 5 (following the reference's decision trace, fp32
tolerance), and a few training steps on CPU lower a toy loss with finite gradients everywhere and
leave a model the engine loads and still agrees with."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from swapffn import _safetensors  # noqa: E402
from swapffn.torch.module import SwapFFN  # noqa: E402  (needs torch)

TAU, DELTA_RTOL, STATE_RTOL = 1e-3, 1e-4, 1e-4  # Tolerance::fp32 (src/core/check.cpp)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tensors are tiny: with more threads, OpenMP waits on a busy machine make steps 100x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_file(cli, tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.safetensors"
    cli("init", "--config", "tiny", "--seed", 3, "--out", path)
    return path


def rel_l2(got, want):
    return float((got - want).norm() / want.norm())


def agreement(model, dump_path):
    """Runs `model` over a `swapffn run --dump` file token by token from its initial state, following
    the dump's decision trace (SPEC section 5). A decision may differ only where the module's own
    margin (|s|; the top-2 bank logit gap where the gate is open) is within TAU."""
    t = {k: torch.from_numpy(v if dt != "BF16" else _safetensors.bf16_to_f32(v))
         for k, (dt, v) in _safetensors.read(dump_path)[0].items()}
    x, gate, slot = t["x"], t["gate"], t["slot"]
    state = model.init_state(x.shape[1])
    if "ram0" in t:
        state = state._replace(ram=t["ram0"], stream_map=t["stream_map0"])
    stats = dict(checked=0, disagree=0, over_tau=0)
    deltas = []
    for i in range(x.shape[0]):
        out = model.step(x[i], state, follow=(gate[i], slot[i]))
        state = out.state
        deltas.append(out.delta.detach())
        top2 = out.trace.logits.topk(2, dim=-1).values
        opened = gate[i].bool()
        for own, theirs, margin, where in (
                (out.trace.gate, gate[i], out.trace.s.abs(), torch.ones_like(opened)),
                (out.trace.slot, slot[i], top2[..., 0] - top2[..., 1], opened)):
            differ = (own != theirs) & where
            stats["checked"] += int(where.sum())
            stats["disagree"] += int(differ.sum())
            stats["over_tau"] += int((differ & (margin > TAU)).sum())
    stats["delta_rel_l2"] = rel_l2(torch.stack(deltas), t["delta"])
    stats["state_rel_l2"] = rel_l2(state.ram.detach(), t["ram"])
    stats["stream_maps_equal"] = torch.equal(state.stream_map, t["stream_map"])
    stats["swaps"] = int(gate.sum())
    return stats


def assert_agrees(model, cli, model_path, tmp_path, batch=2, tokens=3):
    dump = tmp_path / "dump.safetensors"
    cli("run", "--model", model_path, "--backend", "reference", "--batch", batch, "--tokens", tokens,
        "--dump", dump, "--threads", 2)
    stats = agreement(model, dump)
    print(f"agreement with the reference: {stats}")
    assert stats["swaps"] > 0
    assert stats["over_tau"] == 0, stats
    assert stats["delta_rel_l2"] <= DELTA_RTOL and stats["state_rel_l2"] <= STATE_RTOL, stats
    assert stats["stream_maps_equal"]
    return stats


def test_save_reproduces_the_engines_file_bit_for_bit(model_file, tmp_path):
    model = SwapFFN.from_safetensors(model_file)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    out = tmp_path / "saved.safetensors"
    model.save_safetensors(out)
    (want, want_meta), (got, got_meta) = _safetensors.read(model_file), _safetensors.read(out)
    assert json.loads(got_meta["swapffn.config"]) == json.loads(want_meta["swapffn.config"])
    assert got_meta == want_meta
    assert set(got) == set(want) == {n for n, _ in model.named_parameters()}
    for name in want:
        assert got[name][0] == "BF16" and np.array_equal(got[name][1], want[name][1]), name
    assert out.read_bytes() == model_file.read_bytes()


def test_saving_rounds_to_nearest_even_bf16():
    v = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8 + 2 ** -20), 3.0e38, 1e-40], np.float32)
    want = torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(_safetensors.f32_to_bf16(v), want)


def test_agrees_with_the_reference_under_spec_section_5(model_file, cli, tmp_path):
    assert_agrees(SwapFFN.from_safetensors(model_file), cli, model_file, tmp_path)


def test_forward_is_the_same_with_and_without_autograd(model_file):
    model = SwapFFN.from_safetensors(model_file)
    x = torch.randn(2, model.config["d_model"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        d0, s0 = model(x)
    d1, s1 = model(x)
    assert torch.equal(d0, d1) and torch.equal(s0.ram, s1.ram) and torch.equal(s0.stream_map, s1.stream_map)
    # RAM writes hold bf16 values even in an fp32 RAM.
    assert torch.equal(s1.ram, s1.ram.to(torch.bfloat16).float())


def test_gradients_flow_through_the_state_across_tokens(model_file):
    model = SwapFFN.from_safetensors(model_file)
    x = torch.randn(2, 2, model.config["d_model"], generator=torch.Generator().manual_seed(1))
    _, state = model(x[0])
    delta, _ = model(x[1], state)
    (grad,) = torch.autograd.grad(delta.square().sum(), state.ram)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_a_few_training_steps_lower_the_loss_and_the_engine_loads_the_result(model_file, cli, tmp_path):
    torch.manual_seed(0)
    model = SwapFFN.from_safetensors(model_file)
    T, B, D = 2, 2, model.config["d_model"]
    x = torch.randn(T, B, D)
    with torch.no_grad():  # a random target of delta's scale
        target = torch.stack([model(x[t])[0] for t in range(T)]).std() * torch.randn(T, B, D)

    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for it in range(5):
        state, deltas = None, []
        for t in range(T):  # unrolled: the gradient of token 1 reaches token 0 through the state
            delta, state = model(x[t], state)
            deltas.append(delta)
        loss = (torch.stack(deltas) - target).square().mean() / target.square().mean()
        opt.zero_grad()
        loss.backward()
        if it == 0:
            for name, p in model.named_parameters():
                assert p.grad is not None and torch.isfinite(p.grad).all(), name
                assert p.grad.abs().sum() > 0, f"no gradient reaches {name}"
        opt.step()
        losses.append(loss.item())
    print(f"losses: {losses}")
    assert all(b < a for a, b in zip(losses, losses[1:]))

    saved = tmp_path / "trained.safetensors"
    model.save_safetensors(saved)
    cli("run", "--model", saved, "--backend", "reference", "--batch", 1, "--tokens", 2)
    reloaded = SwapFFN.from_safetensors(saved)
    assert_agrees(reloaded, cli, saved, tmp_path)


def test_bad_input_names_the_argument(model_file):
    model = SwapFFN.from_safetensors(model_file)
    D, C, E = (model.config[k] for k in ("d_model", "core_count", "n_events"))
    x = torch.zeros(1, D)
    with pytest.raises(ValueError, match="^x must"):
        model(torch.zeros(1, D + 1))
    state = model.init_state(1)
    bad = state.stream_map.clone()
    bad[0, 5] = 0
    with pytest.raises(ValueError, match=r"state.stream_map\[0, 5\] = 0x00"):
        model(x, state._replace(stream_map=bad))
    with pytest.raises(ValueError, match="state.ram"):
        model(x, state._replace(ram=torch.zeros(1, C, 4, D - 1)))
    slot = torch.zeros(E, 1, C, dtype=torch.uint8)
    with pytest.raises(ValueError, match="follow gate"):
        model(x, follow=(torch.zeros(E, 2, C), slot))
    with pytest.raises(ValueError, match="follow slot"):
        model(x, follow=(torch.zeros(E, 1, C), slot + 4))
    with pytest.raises(ValueError, match="config field n_banks"):
        SwapFFN(dict(model.config, n_banks=3))


def test_a_fresh_module_saves_a_file_the_engine_loads(model_file, cli, tmp_path):
    config = SwapFFN.from_safetensors(model_file).config
    model = SwapFFN(config)
    model.reset_parameters(torch.Generator().manual_seed(5))
    path = tmp_path / "fresh.safetensors"
    model.save_safetensors(path)
    assert_agrees(model, cli, path, tmp_path, batch=1, tokens=2)


def test_compiles_whole_to_the_same_step():
    """torch.compile traces a step without a graph break (fullgraph; the stream-map check, which waits for
    the device, is skipped there and in a CUDA graph capture): what examples/lm/bench.py compiles and
    captures. Dynamo's eager backend: the trace, without a C++ or Triton build."""
    model = SwapFFN("tiny").to(torch.bfloat16)
    state = model.init_state(3, dtype=torch.bfloat16)
    x = torch.randn(3, model.config["d_model"], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(x, state)
        torch.compiler.reset()
        got = torch.compile(model, dynamic=False, fullgraph=True, backend="eager")(x, state)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1].ram, want[1].ram)
    assert torch.equal(got[1].stream_map, want[1].stream_map)

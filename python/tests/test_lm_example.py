"""examples/lm: the byte-level LM with a Swap-FFN in every block, trained in PyTorch and served with the engines.

On the CPU: a tiny LM trained a few steps, saved, and served with the reference backend for two overlapping
requests (one joins while the other is mid-generation), whose logits agree with the PyTorch model's; bad
requests and bad model directories refused, the other requests unaffected (bitwise); the padding rows of the
step that the CUDA graphs capture; the scripts' command lines; bench.py's rows and refusals. With a Hopper GPU:
the fused and fused-fp8 backends against the PyTorch model, the decode step's CUDA graphs against eager steps,
a request's tokens whatever else is scheduled with it, and bench.py's graphs.
"""
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

import swapffn

torch = pytest.importorskip("torch", exc_type=ImportError)

LM_DIR = pathlib.Path(__file__).resolve().parents[2] / "examples" / "lm"
sys.path.insert(0, str(LM_DIR))
import bench  # noqa: E402  (examples/lm, on the path above)
import model as lm_model  # noqa: E402
import serve  # noqa: E402
import train  # noqa: E402
from swapffn.torch import SwapFFN  # noqa: E402

PROMPT_A, PROMPT_B = "import os\n", "def f(x):"
NEW_TOKENS = 32
JOIN_AFTER = 5  # B joins after this many decode steps of A
EIGHT_PROMPTS = ("import ", "def ", "class A:", "    return", "# ", "for i in", "if x:\n", "from . import")
needs_hopper = pytest.mark.skipif(
    not (torch.cuda.is_available() and swapffn.gpu()["hopper"] and "fused" in swapffn.backends()),
    reason="needs CUDA: a Hopper GPU and swapffn built with CUDA (the fused backends)")


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The tiny model's ops are too small to split, and on a loaded 2-core machine torch's two threads spin
    against each other: the PyTorch model over the two 40-token requests below took 27 s on two threads, 2 s on
    one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def train_tiny(out):
    model, losses = train.train("tiny", steps=2, batch=2, seq=16, seed=5, device="cpu", data_bytes=1 << 18,
                                eval_batches=0, log=lambda _: None)
    model.save(out)
    return model, losses


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("lm") / "tiny"
    _, losses = train_tiny(out)
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    return out


def rel_l2(got, want):
    return float((got - want).norm() / want.norm())


def overlapping(server, interrupt=lambda: None):
    """A runs alone for JOIN_AFTER steps, then B joins; both to NEW_TOKENS tokens. `interrupt` runs once both
    are active (the bad requests of the test that needs them)."""
    a = server.add(PROMPT_A, NEW_TOKENS)
    for _ in range(JOIN_AFTER):
        server.step()
    b = server.add(PROMPT_B, NEW_TOKENS)
    interrupt()
    while server.active:
        server.step()
    return a, b


@pytest.fixture(scope="module")
def clean_run(trained):
    return overlapping(serve.Server(trained, backend="reference", slots=2, record_logits=True))


def pytorch_logits(lm, req):
    """The PyTorch model's logits at the positions where req's tokens were chosen (teacher-forced on them)."""
    with torch.no_grad():
        seq = torch.tensor([req.prompt + req.tokens[:-1]], device=next(lm.parameters()).device)
        return lm(seq)[0, len(req.prompt) - 1:].cpu()


def test_training_is_seeded_and_saves_what_the_engines_load(trained, tmp_path):
    again, _ = train_tiny(tmp_path / "again")
    for name in ["lm.pt"] + [lm_model.ffn_file(i) for i in range(2)]:
        assert (tmp_path / "again" / name).is_file()
    first = lm_model.LM.load(trained)
    for (name, p), q in zip(first.state_dict().items(), lm_model.LM.load(tmp_path / "again").state_dict().values()):
        assert torch.equal(p, q), name
    for i in range(2):  # the engine loads each Swap-FFN file bit for bit (SwapFFN.from_safetensors is its twin)
        engine = swapffn.Engine.load(trained / lm_model.ffn_file(i), backend="reference")
        assert engine.config == first.ffns[i].config


def test_served_reference_agrees_with_the_pytorch_model_over_overlapping_requests(trained, clean_run):
    a, b = clean_run
    assert a.done and b.done and len(a.tokens) == len(b.tokens) == NEW_TOKENS
    assert a.slot != b.slot
    lm = lm_model.LM.load(trained).eval()
    for req in (a, b):
        want = pytorch_logits(lm, req)
        got = torch.stack(req.logits)
        assert got.shape == want.shape == (NEW_TOKENS, lm_model.VOCAB)
        assert rel_l2(got, want) <= 1e-4, req.id
        assert req.tokens == want.argmax(-1).tolist()  # greedy on the PyTorch model's logits too


def test_bad_requests_and_models_are_refused_and_the_others_unaffected(trained, clean_run, tmp_path):
    server = serve.Server(trained, backend="reference", slots=2, record_logits=True)
    max_seq = server.lm.cfg.max_seq
    mixed = tmp_path / "mixed"  # block 1's Swap-FFN of another d_ff
    shutil.copytree(trained, mixed)
    tiny = swapffn.config_preset("tiny")
    SwapFFN.from_config(dict(tiny, d_ff=256)).save_safetensors(mixed / "ffn1.safetensors")
    narrow = tmp_path / "narrow"  # every block's Swap-FFN of d_model 64 in an LM of 128
    shutil.copytree(trained, narrow)
    for i in range(2):
        SwapFFN.from_config(dict(tiny, d_model=64)).save_safetensors(narrow / lm_model.ffn_file(i))

    def bad():
        refusals = [
            (lambda: server.add(PROMPT_A, 1), "no free slot: all 2 slots"),
            (lambda: server.add("", 4), "zero tokens"),
            (lambda: server.add([], 4), "zero tokens"),
            (lambda: server.add("x" * (max_seq + 1), 1), "too long for the KV cache"),
            (lambda: server.add("x" * 10, max_seq - 8), f"need {max_seq + 1} positions"),
            (lambda: server.add([65, 256], 4), r"prompt\[1\] = 256 is not a byte token"),
            (lambda: server.add("x", 0), "max_new_tokens = 0"),
            (lambda: serve.Server(mixed, backend="reference"),
             "ffn1.safetensors: its Swap-FFN config differs .*: d_ff 256 vs 384"),
            (lambda: serve.Server(narrow, backend="reference"),
             "ffn0.safetensors: the Swap-FFN's d_model is 64, the LM's is 128"),
        ]
        for call, message in refusals:
            with pytest.raises(ValueError, match=message) as err:
                call()
            assert isinstance(err.value, (serve.ServeError, lm_model.ModelError)), err.value
            server.step()  # and the requests go on
        assert len(server.active) == 2 and server.free_slots == 0

    for got, want in zip(overlapping(server, bad), clean_run):
        assert got.tokens == want.tokens
        assert all(torch.equal(g, w) for g, w in zip(got.logits, want.logits))
    assert server.free_slots == 2 and server.add(PROMPT_B, 2).slot == 0  # the slots came back
    # The PyTorch model refuses the same directories.
    with pytest.raises(lm_model.ModelError, match="d_ff 256 vs 384"):
        lm_model.LM.load(mixed)
    with pytest.raises(lm_model.ModelError, match="d_model is 64"):
        lm_model.LM.load(narrow)


def test_padding_rows_of_a_bucket_touch_no_sequence(trained):
    """The step that the CUDA graphs capture (Server.model_step), here on the CPU: padding rows (slot -1)
    that fill a bucket leave the real rows' logits as they are without them, and write no slot's state and
    no KV cache row but the scratch one."""
    def two_requests():
        server = serve.Server(trained, backend="reference", slots=3)
        return server, [server.add(PROMPT_A, 8), server.add(PROMPT_B, 8)]

    (plain, reqs), (padded, _) = two_requests(), two_requests()
    rows = torch.tensor([[r.tokens[-1] for r in reqs], [r.position for r in reqs], [r.slot for r in reqs]])
    idle = [p.get(2) for p in padded.pools]
    with torch.no_grad():
        want = plain.model_step(rows)
        got = padded.model_step(torch.cat([rows, torch.tensor([[0, 0], [0, 0], [swapffn.PADDING] * 2])], dim=1))
    assert got.shape == (4, lm_model.VOCAB)
    assert rel_l2(got[:2], want) <= 1e-6  # not bitwise: torch's CPU GEMMs block by batch size
    assert torch.allclose(padded.cache.k[:, :2], plain.cache.k[:, :2], rtol=1e-5, atol=1e-6)
    assert not padded.cache.k[:, 2].any() and not padded.cache.v[:, 2].any()  # slot 2 is free
    assert padded.cache.k[:, padded.cache.scratch].any()
    for pool, (ram, stream_map) in zip(padded.pools, idle):
        now = pool.get(2)
        assert (now[0] == ram).all() and (now[1] == stream_map).all()


def main(module, monkeypatch, *args):
    """Runs a script's main() in this process (a fresh interpreter spends about 9 s importing torch here)."""
    monkeypatch.setattr(sys, "argv", [module.__file__, *map(str, args)])
    module.main()


def test_command_lines_train_then_serve(tmp_path, monkeypatch, capsys):
    main(train, monkeypatch, "--device", "cpu", "--steps", "1", "--batch", "1", "--seq", "8", "--data-mb", "0.1",
         "--eval-batches", "1", "--out", tmp_path / "m")
    out = capsys.readouterr().out
    assert "step    0: loss" in out and "validation:" in out and f"saved {tmp_path / 'm'}" in out
    main(serve, monkeypatch, "--model", tmp_path / "m", "--backend", "reference", "--requests", "3", "--slots", "2",
         "--new-tokens", "3", "--arrive-every", "1", "--show", "1")
    out = capsys.readouterr().out
    assert "reference on cpu" in out and "3 requests through 2 slots" in out
    assert "decode: " in out and "tok/s" in out and "ms per token" in out
    with pytest.raises(SystemExit) as e:
        main(serve, monkeypatch, "--model", tmp_path / "nothing", "--backend", "reference")
    assert str(e.value.code).startswith("serve.py: ") and "lm.pt" in str(e.value.code)
    for module in (train, serve):
        with pytest.raises(SystemExit) as e:
            main(module, monkeypatch, "--help")
        assert e.value.code == 0 and "usage:" in capsys.readouterr().out


def bench_json(trained, tmp_path, monkeypatch, *args):
    """Runs bench.py on the trained tiny LM at B = 1 and 2, a few steps; returns its JSON."""
    out = tmp_path / "bench.json"
    main(bench, monkeypatch, "--model", trained, "--batches", "1,2", "--steps", "2", "--repeats", "2", "--warmup",
         "1", "--json", out, *args)
    return json.loads(out.read_text())


def check_bench_rows(result, served_mode, pytorch_paths):
    """Each batch size has a served row (its step, its Server.step loop, its engines alone) and a timed row
    of each PyTorch path, and a speed-up of the one over the other."""
    assert result["settings"]["batches"] == [1, 2] and result["lm"]["n_layers"] == 2
    assert result["ffn"] == swapffn.config_preset("tiny") and result["commit"] and result["device"]
    for b in (1, 2):
        rows = {r["path"]: r for r in result["rows"] if r["batch"] == b}
        assert set(rows) == {"served", *pytorch_paths}, rows
        s = rows["served"]
        assert s["mode"] == served_mode and s["bucket"] == b and len(s["runs_ms"]) == 2
        for key in ("ms_per_step", "ffn_ms_per_step", "loop_ms_per_step"):
            assert s[key] > 0, key
        assert s["tok_per_s"] == pytest.approx(b * 1e3 / s["ms_per_step"]) and 0 < s["ffn_share"] < 2
        for path in pytorch_paths:
            assert "error" not in rows[path] and rows[path]["ms_per_step"] > 0, rows[path]
            speedup = [r for r in result["speedups"] if r["batch"] == b and r["vs"] == path]
            assert len(speedup) == 1
            assert speedup[0]["speedup"] == pytest.approx(rows[path]["ms_per_step"] / s["ms_per_step"])


def test_bench_on_the_cpu_checks_its_paths_and_says_it_measures_nothing(trained, tmp_path, monkeypatch, capsys):
    result = bench_json(trained, tmp_path, monkeypatch, "--backend", "reference", "--profile")
    out = capsys.readouterr().out
    assert "not a performance measurement" in out and bench.TABLE_HEAD in out and "| 2 | pytorch-eager |" in out
    assert "no --profile" in out and "kernels per step" not in out
    assert result["performance_measurement"] is False and result["device"].startswith("cpu")
    assert result["settings"]["compile"] is False and result["targets"] == []
    check_bench_rows(result, "eager", ["pytorch-eager"])
    assert {r["backend"] for r in result["speedups"]} == {"reference"}


@pytest.mark.parametrize("args,message", [
    (["--batches", "0"], "batch size 0: must be in"), (["--batches", "65"], "batch size 65"),
    (["--batches", "1,x"], "comma-separated integers"), (["--batches", "2,2"], "repeated"),
    (["--steps", "0"], "--steps must be at least 1"), (["--warmup", "-1"], "--warmup must be at least 0"),
    (["--backend", "reference,reference"], "distinct backend names"),
])
def test_bench_refuses_bad_arguments(trained, monkeypatch, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        main(bench, monkeypatch, "--model", trained, *args)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_bench_refuses_more_steps_than_the_kv_cache_holds_and_an_unknown_backend(trained, monkeypatch):
    for args, message in ((["--steps", "100"], "exceed the KV cache's 256"), (["--backend", "nope"], "nope")):
        with pytest.raises(SystemExit) as e:
            main(bench, monkeypatch, "--model", trained, "--backend", "reference", *args)
        assert str(e.value.code).startswith("bench.py: ") and message in str(e.value.code)


@pytest.mark.parametrize("name", ["train.py", "serve.py", "bench.py"])
def test_scripts_say_in_one_line_that_they_need_torch(name):
    block_torch = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = [sys.argv[1], '--help']; "
                   "runpy.run_path(sys.argv[0], run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", block_torch, str(LM_DIR / name)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "needs PyTorch" in r.stderr, r.stderr


# fused-fp8 in SPEC 5's rows scaling, within its fp8 tolerance 0.06 (at most 0.045 over the eight prompts on an
# H100). The blocks scaling misses it on the longest prompt (0.074: the error compounds over the prefill and the
# blocks), which issue 57 records; its per-layer agreement is the engine checks'.
@needs_hopper
@pytest.mark.parametrize("backend,kernels,tolerance", [("fused", "", 2e-2), ("fused-fp8", "scales=rows", 0.06)])
def test_gpu_first_tokens_of_eight_prompts_agree_with_the_pytorch_model(trained, backend, kernels, tolerance):
    server = serve.Server(trained, backend=backend, slots=8, record_logits=True, kernels=kernels)
    reqs = serve.run_requests(server, EIGHT_PROMPTS, max_new_tokens=6, arrive_every=1)
    assert server.stats.graph_captures >= 1 and all(len(r.tokens) == 6 for r in reqs)
    lm = lm_model.LM.load(trained, device=torch.device("cuda", 0)).eval()
    for req in reqs:  # the first token's logits: the prompt's prefill through engine.decode
        with torch.no_grad():
            want = lm(torch.tensor([req.prompt], device="cuda"))[0, -1].cpu()
        assert rel_l2(req.logits[0], want) <= tolerance, (backend, req.prompt)


@needs_hopper
def test_gpu_graph_steps_equal_eager_steps_and_a_requests_tokens_ignore_its_neighbours(trained):
    def run(prompts, graphs):
        server = serve.Server(trained, backend="fused", slots=8, cuda_graphs=graphs, record_logits=True)
        reqs = serve.run_requests(server, prompts, max_new_tokens=12, arrive_every=2)
        return reqs[0], server.stats.graph_captures

    eager, captures = run(EIGHT_PROMPTS[:1], graphs=False)
    assert captures == 0
    alone, captures = run(EIGHT_PROMPTS[:1], graphs=True)
    assert captures >= 1
    assert alone.tokens == eager.tokens
    assert rel_l2(torch.stack(alone.logits), torch.stack(eager.logits)) <= 1e-6
    # The same request among others that join and leave around it (buckets 1 to 8, padding rows); each
    # bucket's graph is captured once, its replays valid across the prefills between them.
    crowded, captures = run(EIGHT_PROMPTS, graphs=True)
    assert crowded.tokens == alone.tokens
    assert captures <= 4


@needs_hopper
def test_gpu_bench_times_the_served_graph_against_the_pytorch_model_in_a_graph(trained, tmp_path, monkeypatch):
    result = bench_json(trained, tmp_path, monkeypatch, "--no-compile", "--torch-dtype", "fp32", "--profile")
    assert result["performance_measurement"] is True and result["settings"]["compile"] is False
    check_bench_rows(result, "graph", ["pytorch-graph"])
    assert {r["backend"] for r in result["speedups"]} == {"fused"}
    assert [t["target"] for t in result["targets"]] == [3.0, 0.85, 0.85]  # B = 1's speed-up, each B's share

"""`python -m swapffn.bench_row`, the python[slots] row of `swapffn bench --python`: one JSON row per
batch size on stdout where torch sees a Hopper GPU, else one line saying why not (exit 0)."""
import json
import os
import subprocess
import sys

import pytest

import swapffn


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.safetensors"
    swapffn.init_model(path, config="tiny", seed=3)
    return str(path)


def run_row(model, *args, env=None):
    out = subprocess.run([sys.executable, "-m", "swapffn.bench_row", "--model", model, *args], capture_output=True,
                         text=True, check=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def gpu_ready() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and swapffn.gpu()["hopper"]


def test_without_a_gpu_it_says_why_in_one_row(model):
    # No CUDA device visible to the child, so that this runs on a GPU machine too.
    rows = run_row(model, "--batches", "1", env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert len(rows) == 1 and rows[0]["unavailable"], rows


@pytest.mark.skipif(not gpu_ready(), reason="needs CUDA: torch with a Hopper GPU")
@pytest.mark.parametrize("backend", ["fused", "unfused"])
def test_times_each_batch_size(model, backend):
    rows = run_row(model, "--backend", backend, "--batches", "1,3", "--tokens", "3", "--warmup", "1", "--repeats", "3")
    assert [r["batch"] for r in rows] == [1, 3]
    for r in rows:
        assert r["backend"] == "python[slots]"
        assert 0 < r["min_ms_per_step"] <= r["ms_per_step"] <= r["max_ms_per_step"], r

"""The examples run end to end (small settings)."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_decode_loop_serves_sequences_that_join_and_leave():
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "decode_loop.py"), "--backend", "reference",
                        "--steps", "12", "--slots", "4"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "reference: 12 steps" in r.stdout and "finished" in r.stdout


def test_train_tiny_says_in_one_line_that_it_needs_torch():
    # torch hidden from the example (a None in sys.modules fails its import), installed or not.
    hide_torch = ("import runpy, sys; sys.modules['torch'] = None; sys.argv[:] = sys.argv[1:]; "
                  "runpy.run_path(sys.argv[0], run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", hide_torch, str(ROOT / "examples" / "train_tiny.py"), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "needs PyTorch" in r.stderr, r.stderr


def test_train_tiny_trains_and_the_engine_decodes_what_it_saved(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "trained.safetensors"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "train_tiny.py"), "--steps", "2", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "step 1: loss" in r.stdout and out.is_file(), r.stdout
    rel = float(r.stdout.rsplit("rel L2", 1)[1])
    assert rel < 1e-4, r.stdout

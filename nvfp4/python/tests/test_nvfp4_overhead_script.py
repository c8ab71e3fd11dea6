"""nvfp4/scripts/nvfp4_overhead.py (the eager-vs-graph cost of every benchmark shape) on any machine: with
--check-only it builds every shape's competition inputs on the host, passes them through the extension's
checks and says it skipped the timing (the timing itself needs a Hopper GPU: docs/NVFP4.md)."""
import json
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", exc_type=ImportError)
if not hasattr(torch, "float4_e2m1fn_x2"):
    pytest.skip("this torch has no float4_e2m1fn_x2", allow_module_level=True)

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "nvfp4_overhead.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_the_script_checks_every_shape_and_skips_the_timing_when_told(tmp_path):
    out = tmp_path / "overhead.json"
    r = run("--check-only", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("arguments accepted up to the device check") == 14, r.stdout
    assert "skipped the GPU timing: --check-only" in r.stdout
    result = json.loads(out.read_text())
    assert result["skipped"] == "--check-only" and result["calls"] == 100 and result["target_us"] == 5.0


def test_the_script_refuses_an_unknown_op():
    r = run("--ops", "gemm,nope", "--check-only")
    assert r.returncode == 2 and "--ops 'gemm,nope'" in r.stderr, r.stderr

"""The examples run end to end (small settings)."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_decode_loop_serves_sequences_that_join_and_leave():
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "decode_loop.py"), "--backend", "reference",
                        "--steps", "12", "--slots", "4"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "reference: 12 steps" in r.stdout and "finished" in r.stdout

"""Fixtures shared by the Python tests of the engine (the rule on skipped tests is the tree's: ../../conftest.py)."""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli():
    """Runs the `swapffn` CLI ($SWAPFFN_CLI, default build/release/apps/swapffn) and returns its
    CompletedProcess; skips the test where the CLI is not built."""
    path = pathlib.Path(os.environ.get("SWAPFFN_CLI", REPO / "build/release/apps/swapffn"))
    if not path.is_absolute():
        path = REPO / path
    if not path.is_file():
        pytest.skip(f"swapffn CLI not built at {path} (set SWAPFFN_CLI)")

    def run(*args, check=True):
        return subprocess.run([str(path), *map(str, args)], capture_output=True, text=True, check=check)

    return run

"""The rule on skipped tests of every Python test folder (python/tests, nvfp4/python/tests): CI runs
every CPU test."""
import os

import pytest

# A test skips only where it cannot run: one that needs CUDA (a Hopper GPU, torch's CUDA, the CUDA
# build) gives a reason starting with CUDA_ONLY. Any other skip is of a test that can run on a CPU
# (torch or the CLI missing, say), which CI must not lose silently: the session fails on one, unless
# SWAPFFN_ALLOW_SKIPS=1 (a developer without torch).
CUDA_ONLY = "needs CUDA: "
_skips = []  # (node id, reason) of each skipped test or module


def _record(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skips.append((report.nodeid, reason.removeprefix("Skipped: ")))


def pytest_collectreport(report):
    _record(report)


def pytest_runtest_logreport(report):
    _record(report)


def _cpu_skips():
    return [(node, reason) for node, reason in _skips if not reason.startswith(CUDA_ONLY)]


def pytest_sessionfinish(session, exitstatus):
    if _cpu_skips() and exitstatus == pytest.ExitCode.OK and os.environ.get("SWAPFFN_ALLOW_SKIPS") != "1":
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    cpu = _cpu_skips()
    terminalreporter.write_line(f"{len(_skips) - len(cpu)} skipped that need CUDA (reason '{CUDA_ONLY}...'), "
                                f"{len(cpu)} skipped that can run on a CPU")
    for node, reason in cpu:
        terminalreporter.write_line(f"  {node}: {reason}", red=True)
    if cpu:
        allowed = os.environ.get("SWAPFFN_ALLOW_SKIPS") == "1"
        terminalreporter.write_line("allowed by SWAPFFN_ALLOW_SKIPS=1" if allowed else "FAILED: a test that can "
                                    "run on a CPU was skipped (SWAPFFN_ALLOW_SKIPS=1 allows it)",
                                    red=not allowed, yellow=allowed)

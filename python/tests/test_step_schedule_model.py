"""scripts/step_schedule_model.py on cases whose answer is known by hand."""
import argparse
import importlib.util
import pathlib

import pytest

_spec = importlib.util.spec_from_file_location(
    "step_schedule_model", pathlib.Path(__file__).resolve().parents[2] / "scripts" / "step_schedule_model.py")
model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(model)


def args(**kw):
    a = dict(sms=132, row_blocks=4, events=8, k_ffn=2, dual=12.5, dual_tiles=32, w2=6.5, w2_tiles=32, head=4.0,
             head_ctas=32, rms=2.0, rms_ctas=32, sync=1.0, collapse=14.4)
    a.update(kw)
    return argparse.Namespace(**a)


def test_one_row_block_with_enough_sms_is_its_chain():
    # head, dual, w2, rms, dual, w2: six phases, five dependencies between them, then the collapse.
    a = args(row_blocks=1, events=1, collapse=3.0)
    assert model.step_time(a) == pytest.approx(4.0 + 12.5 + 6.5 + 2.0 + 12.5 + 6.5 + 5 * 1.0 + 3.0)


def test_one_sm_runs_every_tile_one_after_another():
    a = args(sms=1, row_blocks=2, events=1, k_ffn=1, dual_tiles=3, w2_tiles=2, head_ctas=1, sync=0.0, collapse=0.0)
    assert model.step_time(a) == pytest.approx(2 * (4.0 + 3 * 12.5 + 2 * 6.5))


def test_row_blocks_that_fit_side_by_side_take_as_long_as_one():
    one = model.step_time(args(sms=32, row_blocks=1))  # 32 tiles per phase: one row block fills 32 SMs
    assert model.step_time(args(sms=64, row_blocks=2)) == pytest.approx(one)
    assert model.step_time(args(sms=32, row_blocks=2)) > one

"""measure/ops/targets.py section 1b (achievable floor) on the committed op tables: the floor is a
lower bound of what the composition prices, and the section is printed."""

from pathlib import Path

import pytest

from costmodel.hardware import get_hardware
from costmodel.models import get_model
from costmodel.precision import get_precision
from costmodel.roofline import Roofline, Segment
from measure.ops.table import OpTable
from measure.ops.targets import HW, SHAPES, main, pass_floor

ROOT = Path(__file__).resolve().parents[1] / "data" / "runs" / "ops"
TABLES = {g: OpTable.load(ROOT / g) for g in HW if (ROOT / g / "ops.csv").exists()}
pytestmark = pytest.mark.skipif(not TABLES, reason="no committed op tables under data/runs/ops")


@pytest.mark.parametrize("gpu", sorted(TABLES))
@pytest.mark.parametrize("prec", ["bf16", "fp8"])
def test_floor_is_below_the_composed_pass(gpu, prec):
    for kind, seg in SHAPES.items():
        f = pass_floor(TABLES[gpu], kind, seg, prec)
        assert 0 < f.ms < f.composed_ms, (kind, f.ms, f.composed_ms)
        # per op the floor is a model, not a bound: what ops already beat it by is far below the pass's excess
        assert f.under_floor()[0] < 0.1 * (f.composed_ms - f.ms)
        assert next(o for o, _, _ in f.largest_excess()) == max(f.by_op, key=lambda o: f.composed_by_op[o] - f.by_op[o])


@pytest.mark.parametrize("gpu", sorted(TABLES))
@pytest.mark.parametrize("prec", ["bf16", "fp8"])
def test_decode_floor_reads_at_least_the_weights(gpu, prec):
    """Batch-1 decode is a weight read: its floor is at least the weights it touches (the roofline's
    weight bytes) at the measured copy rate, and no more than the composed pass."""
    t = TABLES[gpu]
    seg = SHAPES["decode_step"]
    f = pass_floor(t, "decode_step", seg, prec)
    roof = Roofline(get_model("gemma4-26b-a4b"), get_hardware(HW[gpu]), get_precision(prec))
    weights_ms = roof.pass_cost(Segment("decode_step", seg.seqs, seg.tokens, seg.context)).weight_bytes / (t.meta["copy_bandwidth_tbps"] * 1e9)
    assert 0 < weights_ms <= f.ms <= f.composed_ms


def test_main_prints_the_floor_section(capsys):
    assert main([str(ROOT), "--runs", str(ROOT.parent)]) == 0
    out = capsys.readouterr().out
    sec = out[out.index("== 1b. achievable floor"):out.index("== 2.")]
    assert "GEMM peak" in sec and "TFLOP/s" in sec
    assert sec.count("largest excess") == 3 * 2 * len(TABLES)
    assert out.index("== 1. targets") < out.index("== 1b.")

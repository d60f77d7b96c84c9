"""`costmodel fit` on endpoint runs: per-load engine-step observations of denoise_step / decode_step
with provenance "endpoint", the GPU/endpoint mixing rule (--prefer), commit statistics and MTP
acceptance from the server's counters, and one-line errors for runs it cannot use."""

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from measure.fit.synthetic_runs import truth_ms, write_synthetic_run
from costmodel.hardware import get_hardware
from costmodel.models import get_model
from costmodel.precision import get_precision
from costmodel.schemas.profile import Profile
from costmodel.roofline import Roofline, Segment
from costmodel.schemas.rundir import RunManifest, RunWriter, new_run_id

DEN_TRUTH = {"const": 4.0, "roofline_ms": 2.5}
DEC_TRUTH = {"const": 6.0, "roofline_ms": 1.8}
PROMPT = 100
CANVASES = 4  # per request, 256 tokens each
BATCHES = (1, 2, 4, 8, 16, 32)  # one load each: a rate sweep


def cli(*args):
    from costmodel.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def roof(model):
    return Roofline(get_model(model), get_hardware("h200"), get_precision("bf16"))


def write_endpoint_run(path, mode, loads, *, canvas=256, canvases=CANVASES, regimes=None, counters=True, running=True, mtp_len=2.5):
    """An endpoint run with the tables `costmodel measure --endpoint` writes. loads: (batch, step_ms)."""
    model = "google/diffusiongemma-26b-a4b" if mode == "diffusion" else "google/gemma-4-26B-A4B-it"
    man = RunManifest(run_id=new_run_id("endpoint"), kind="endpoint", mode=mode, model=model, weights="served",
                      commit_source="model" if mode == "diffusion" and counters else "none",
                      engine={"name": "openai-compatible endpoint", "endpoint": "http://127.0.0.1:8000/v1"}, planned_units=[])
    spc = 6.0  # engine steps per canvas, commit included
    with RunWriter(path, man) as w:
        for li, (batch, step_ms) in enumerate(loads):
            unit = f"qps={li + 1}"
            reqs, chunks = [], []
            n_req = 8
            for i in range(n_req):
                rid = f"{unit}-r{i}"
                t0 = 0.1 * i
                if mode == "diffusion":
                    times = [t0 + 0.05 + j * spc * step_ms / 1e3 for j in range(canvases)]
                    toks = [canvas] * canvases
                else:
                    tps = 1.0 if mode == "ar" else mtp_len
                    n_ev = 40
                    times = [t0 + 0.05 + j * step_ms / 1e3 for j in range(n_ev)]
                    toks = [tps] * n_ev
                chunks += [{"request_id": rid, "chunk_index": j, "t_s": t, "tokens": n} for j, (t, n) in enumerate(zip(times, toks))]
                reqs.append({"request_id": rid, "arrival_s": t0, "start_s": t0, "first_token_s": times[0], "finish_s": times[-1],
                             "prompt_tokens": PROMPT, "output_tokens": int(sum(toks)), "status": "ok", "tokens_source": "usage",
                             "regime": regimes[li] if regimes else "R1"})
            summ = {"source": "endpoint", "duration_s": 2.0, "completed": n_req, "failed": 0, "qps_offered": float(li + 1),
                    "running_mean": float(batch) if running else float("nan")}
            if mode == "diffusion" and counters:
                canv = n_req * canvases
                summ.update(dg_denoising_steps=spc * canv, dg_canvas_positions=canv * canvas, dg_committed_tokens=canv * canvas,
                            dg_canvases=float(canv), dg_canvas_length=canvas, dg_steps_per_canvas=spc)
            if mode == "mtp":
                drafts = n_req * 40
                summ.update(sd_num_drafts=float(drafts), sd_mean_acceptance_length=mtp_len,
                            sd_per_position_rates=json.dumps([0.7, 0.5, 0.2, 0.1]))
            w.add("requests", reqs)
            w.add("chunks", chunks)
            w.add("load_summary", summ)
            w.finish_unit(unit)
    return path


def den_ms(batch):
    ctx = PROMPT + 256 * (CANVASES / 2)  # mean over canvases 1..3: 100 + 256 * 2
    return truth_ms(roof("diffusiongemma-26b-a4b"), "denoise_step", (batch, 256, int(ctx)), DEN_TRUTH), int(ctx)


def dec_ms(batch):
    ctx = PROMPT + 20  # 40 one-token events: prompt + output / 2
    return truth_ms(roof("gemma4-26b-a4b"), "decode_step", (batch, 1, ctx), DEC_TRUTH), ctx


@pytest.fixture(scope="module")
def ep_diff(tmp_path_factory):
    d = tmp_path_factory.mktemp("ep")
    return write_endpoint_run(d / "diff", "diffusion", [(b, den_ms(b)[0]) for b in BATCHES])


def test_diffusion_endpoint_run_fits_denoise_step(ep_diff, tmp_path):
    out = tmp_path / "p.json"
    code, stdout, err = cli("fit", ep_diff, "--hardware", "h200", "--modes", "diffusion", "--fill-roofline", "0.5", "-o", out)
    assert code == 0, err
    p = Profile.load(out)
    pm = p.modes["diffusion"].pass_models["denoise_step"]
    assert pm.provenance.kind == "endpoint" and "endpoint runs endpoint-" in pm.provenance.source
    assert pm.provenance.hardware == "h200" and "mean running requests" in pm.provenance.notes
    for b in BATCHES:
        truth, ctx = den_ms(b)
        assert p.pass_ms("diffusion", (Segment("denoise_step", b, 256, ctx),)) == pytest.approx(truth, rel=0.03)
    assert p.provenance.kind == "endpoint" and "endpoint" in p.profile_id
    assert p.modes["diffusion"].pass_models["encoder_prefill"].provenance.kind == "roofline"
    # commit statistics: every request is R1, so R1 from the counters (k = 6 - 1), the rest the prior
    c = p.commit_stats["R1"]
    assert c.provenance.kind == "endpoint" and c.steps_per_canvas.mean == pytest.approx(5.0)
    assert c.tokens_per_call == pytest.approx(256 / 5) and c.content_length.mean == pytest.approx(1024)
    assert p.commit_stats["R2"].provenance.kind == "published"
    assert "from the servers' vllm:diffusion_* counters" in stdout and "denoise_step observations" in stdout


def test_ar_endpoint_run_fits_decode_step_and_batch_without_metrics(tmp_path):
    run = write_endpoint_run(tmp_path / "ar", "ar", [(b, dec_ms(b)[0]) for b in BATCHES])
    out = tmp_path / "p.json"
    code, stdout, err = cli("fit", run, "--hardware", "h200", "--modes", "ar", "--fill-roofline", "0.5", "-o", out)
    assert code == 0, err
    p = Profile.load(out)
    pm = p.modes["ar"].pass_models["decode_step"]
    assert pm.provenance.kind == "endpoint"
    for b in BATCHES:
        truth, ctx = dec_ms(b)
        assert p.pass_ms("ar", (Segment("decode_step", b, 1, ctx),)) == pytest.approx(truth, rel=0.03)
    # no /metrics: the batch comes from the requests' spans (Little's law), said so
    run2 = write_endpoint_run(tmp_path / "ar2", "ar", [(1, 10.0)], running=False)
    code, stdout, err = cli("fit", run2, "--hardware", "h200", "--modes", "ar", "--fill-roofline", "0.5", "-o", tmp_path / "q.json")
    assert code == 0, err
    assert "Little's law" in stdout
    pm = Profile.load(tmp_path / "q.json").modes["ar"].pass_models["decode_step"]
    assert pm.support["seqs"][0] >= 1


def test_mixing_gpu_and_endpoint_needs_prefer(ep_diff, tmp_path):
    gpu = write_synthetic_run(tmp_path / "gpu", "diffusion", {"denoise_step": {"const": 1.0, "roofline_ms": 3.0},
                                                              "encoder_prefill": {"const": 2.0, "roofline_ms": 2.0},
                                                              "encoder_commit": {"const": 1.0, "roofline_ms": 2.0}}, seed=4)
    code, _, err = cli("fit", gpu, ep_diff, "-o", tmp_path / "x.json")
    assert code == 2 and "pass kind denoise_step is observed by GPU runs" in err and "--prefer" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x.json").exists()
    code, stdout, err = cli("fit", gpu, ep_diff, "--prefer", "endpoint", "-o", tmp_path / "e.json")
    assert code == 0, err
    pms = Profile.load(tmp_path / "e.json").modes["diffusion"].pass_models
    assert pms["denoise_step"].provenance.kind == "endpoint" and pms["encoder_prefill"].provenance.kind == "measured"
    assert "--prefer endpoint" in stdout
    code, stdout, err = cli("fit", gpu, ep_diff, "--prefer", "gpu", "-o", tmp_path / "g.json")
    assert code == 0, err
    p = Profile.load(tmp_path / "g.json")
    assert p.modes["diffusion"].pass_models["denoise_step"].provenance.kind == "measured"
    # the endpoint run still gives commit statistics (the GPU run's commits are not the model's)
    assert p.commit_stats["R1"].provenance.kind == "endpoint"


def test_mtp_endpoint_run_gives_acceptance_not_pass_costs(tmp_path):
    ep = write_endpoint_run(tmp_path / "mtp", "mtp", [(8, 12.0)])
    code, _, err = cli("fit", ep, "--hardware", "h200", "-o", tmp_path / "x.json")
    assert code == 2 and "MTP endpoint runs give no pass observations" in err and len(err.strip().splitlines()) == 1
    gpu = write_synthetic_run(tmp_path / "gpu", "mtp", {"prefill": {"const": 2.0, "roofline_ms": 2.0}, "draft_step": {"const": 0.8, "roofline_ms": 2.5},
                                                        "verify_step": {"const": 3.0, "roofline_ms": 2.0}}, seed=5)
    code, stdout, err = cli("fit", gpu, ep, "-o", tmp_path / "p.json")
    assert code == 0, err
    p = Profile.load(tmp_path / "p.json")
    assert p.mtp_acceptance.provenance.kind == "endpoint"
    assert p.mtp_acceptance.per_position[0] == pytest.approx(0.7) and p.mtp_acceptance.per_position[1] == pytest.approx(0.5 / 0.7)
    assert p.modes["mtp"].pass_models["verify_step"].provenance.kind == "measured"
    assert "k draft passes + 1 verify pass" in stdout


@pytest.mark.parametrize("case,message", [
    ("no-counters", "has no usable loads: no vllm:diffusion_* counters moved"),
    ("no-hardware", "the endpoint runs do not record the server's GPU"),
    ("one-canvas", "has no usable loads: load qps=1: no request streamed two canvases"),
    ("read-together", "has no usable loads: load qps=1: 8 of 8 requests streamed two or more canvases but none with a gap"),
])
def test_unusable_endpoint_runs_are_one_line_errors(tmp_path, case, message):
    if case == "no-counters":
        run = write_endpoint_run(tmp_path / "r", "diffusion", [(4, 5.0)], counters=False)
    elif case == "one-canvas":
        run = write_endpoint_run(tmp_path / "r", "diffusion", [(4, 5.0)], canvases=1)
    elif case == "read-together":  # each request's canvases reached the client in one read (microseconds apart)
        run = write_endpoint_run(tmp_path / "r", "diffusion", [(4, 1e-5)])
    else:
        run = write_endpoint_run(tmp_path / "r", "diffusion", [(4, 5.0)])
    extra = [] if case == "no-hardware" else ["--hardware", "h200"]
    code, out, err = cli("fit", run, *extra, "--modes", "diffusion", "--fill-roofline", "0.5", "-o", tmp_path / "p.json")
    assert code == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_mixed_regime_loads_leave_commit_stats_to_the_prior(tmp_path):
    run = write_endpoint_run(tmp_path / "r", "diffusion", [(4, 5.0)], regimes=["R1"])
    import pandas as pd

    # rewrite one request's regime: the load now mixes R1 and R6
    part = next((tmp_path / "r" / "requests").glob("part-*.parquet"))
    df = pd.read_parquet(part)
    df.loc[0, "regime"] = "R6"
    df.to_parquet(part)
    code, stdout, err = cli("fit", run, "--hardware", "h200", "--modes", "diffusion", "--fill-roofline", "0.5", "-o", tmp_path / "p.json")
    assert code == 0, err
    p = Profile.load(tmp_path / "p.json")
    assert all(c.provenance.kind == "published" for c in p.commit_stats.values())
    assert "cannot be split by regime" in stdout
    assert "faster than the h200 roofline" in stdout  # 5 ms steps at batch 4: below the 26B model's roofline


def test_loopback_server_endpoint_run_feeds_fit(tmp_path):
    from servers.helpers import ServerProcess, costmodel

    from measure.fit import endpoint_data as fitdata

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": f"question {i}", "regime": "R1"}) for i in range(4)) + "\n")
    with ServerProcess("--backend", "fast", "--step-ms", "25") as s:  # above the H200 roofline of the step
        code, _, err = costmodel("measure", "--endpoint", s.url, "-o", str(tmp_path / "run"), "--metrics-interval", "0.05",
                                 "--model", "fast-diffusion", "--canvas-length", "32", "--qps", "40", "--requests", "16",
                                 "--max-tokens", "128", "--prompts", str(prompts))
    assert code == 0, err
    st = fitdata.denoise_step_times(tmp_path / "run")
    assert len(st) == 1
    code, stdout, err = cli("fit", tmp_path / "run", "--hardware", "h200", "--model", "diffusion=diffusiongemma-26b-a4b",
                            "--modes", "diffusion", "--fill-roofline", "0.5", "-o", tmp_path / "p.json")
    assert code == 0, err
    p = Profile.load(tmp_path / "p.json")
    pm = p.modes["diffusion"].pass_models["denoise_step"]
    assert pm.provenance.kind == "endpoint"
    seqs = pm.support["seqs"][0]
    ctx = pm.support["context_tokens"][0]
    assert seqs == max(1, round(st[0].mean_running_requests))
    assert p.pass_ms("diffusion", (Segment("denoise_step", int(seqs), 32, int(ctx)),)) == pytest.approx(st[0].step_ms, rel=0.03)
    assert p.commit_stats["R1"].provenance.kind == "endpoint"


def test_endpoint_runs_as_commit_runs(ep_diff, tmp_path):
    gpu = write_synthetic_run(tmp_path / "gpu", "diffusion", {"denoise_step": {"const": 1.0, "roofline_ms": 3.0},
                                                              "encoder_prefill": {"const": 2.0, "roofline_ms": 2.0},
                                                              "encoder_commit": {"const": 1.0, "roofline_ms": 2.0}}, seed=6)
    code, stdout, err = cli("fit", gpu, "--commit-runs", ep_diff, "-o", tmp_path / "p.json")
    assert code == 0, err
    p = Profile.load(tmp_path / "p.json")
    assert p.commit_stats["R1"].provenance.kind == "endpoint" and p.commit_stats["R3"].provenance.kind == "published"
    assert p.modes["diffusion"].pass_models["denoise_step"].provenance.kind == "measured"
    ar = write_endpoint_run(tmp_path / "ar", "ar", [(4, 10.0)])
    code, _, err = cli("fit", gpu, "--commit-runs", ar, "-o", tmp_path / "q.json")
    assert code == 2 and "is a ar run, so it has no diffusion commits" in err and len(err.strip().splitlines()) == 1

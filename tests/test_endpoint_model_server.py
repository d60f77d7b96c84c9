"""`costmodel measure --endpoint` against a loopback server streaming REAL tokens from tiny
transformers models with random weights on CPU (tests/servers/openai_server.py --backend model):
DiffusionGemmaForBlockDiffusion emitting canvas bursts (steps counted from its generate()
streamer), Gemma4ForCausalLM token by token, and the same tokens as MTP verify steps. The
server's vLLM-named counters must agree with what the client saw."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from measure.fit import endpoint_data as fitdata  # noqa: E402
from costmodel.schemas.rundir import load_run  # noqa: E402
from servers.helpers import ServerProcess, costmodel  # noqa: E402

pytestmark = pytest.mark.torch
DENOISE_STEPS = 4


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--backend", "model", "--denoise-steps", str(DENOISE_STEPS), timeout_s=180) as s:
        yield s


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    p = tmp_path_factory.mktemp("prompts") / "p.txt"
    p.write_text("\n".join(f"prompt number {i} with some words" for i in range(6)) + "\n")
    return p


def measure(server, prompts, out, model, *extra):
    code, stdout, err = costmodel("measure", "--endpoint", server.url, "--model", model, "-o", str(out), "--prompts", str(prompts),
                                  "--metrics-interval", "0.05", "--ignore-eos", *extra)
    assert code == 0, err
    return load_run(out), stdout


def test_diffusion_bursts_and_counters_agree(server, prompts, tmp_path):
    run, stdout = measure(server, prompts, tmp_path / "dg", "tiny-diffusiongemma", "--qps", "inf", "--concurrency", "6",
                          "--requests", "6", "--max-tokens", "80")
    assert run.manifest.mode == "diffusion" and run.manifest.commit_source == "model"
    req, ch = run.table("requests"), run.table("chunks")
    assert (req["status"] == "ok").all() and (req["output_tokens"] == 80).all()
    # canvas length 32 (the catalog's tiny-diffusiongemma): bursts of 32, 32, 16
    assert ch.groupby("request_id")["tokens"].apply(list).map(tuple).unique().tolist() == [(32, 32, 16)]
    s = run.table("load_summary").iloc[0]
    assert s["dg_canvas_length"] == 32 and s["dg_canvases"] == len(ch)  # one counted canvas per burst
    assert s["dg_committed_tokens"] == req["output_tokens"].sum()
    assert 2 <= s["dg_steps_per_canvas"] <= DENOISE_STEPS + 1  # k denoising passes + the commit step
    assert s["dg_committed_tokens_per_step"] == pytest.approx(req["output_tokens"].sum() / s["dg_denoising_steps"])
    assert s["waiting_max"] >= 1  # one engine, six requests at once: a real queue
    assert s["server_generation_tokens"] == req["output_tokens"].sum()
    st = fitdata.denoise_step_times(run)
    # 12 canvas gaps; on a busy host two canvases may reach the client in one read (< 1 ms apart: one
    # burst, no gap between them), so fewer, as many fewer as such reads (measure.fit.endpoint_data.gap_census)
    merged = (ch.sort_values(["request_id", "chunk_index"]).groupby("request_id")["t_s"].diff() * 1e3 < 1.0).sum()
    assert st[0].n_gaps == 12 - merged and st[0].n_gaps >= 1 and st[0].step_ms > 0
    assert "engine steps per canvas" in stdout


def test_ar_one_token_per_event(server, prompts, tmp_path):
    run, _ = measure(server, prompts, tmp_path / "ar", "tiny-gemma4", "--mode", "ar", "--qps", "30", "--requests", "4", "--max-tokens", "24")
    req, ch = run.table("requests"), run.table("chunks")
    assert (req["status"] == "ok").all() and (req["output_tokens"] == 24).all()
    assert (ch["tokens"] == 1).all() and len(ch) == 96
    assert (req["ttft_ms"] > 0).all() and (req["e2e_ms"] >= req["ttft_ms"]).all()
    d = fitdata.decode_step_times(run)
    # events < 1 ms apart (one network read) merge into one burst spanning as many steps as tokens
    assert d[0].mode == "ar" and d[0].tokens_per_step == 1 and 1 <= d[0].n_gaps <= 92 and d[0].step_ms > 0


def test_mtp_counters_match_the_stream(server, prompts, tmp_path):
    run, stdout = measure(server, prompts, tmp_path / "mtp", "tiny-gemma4-mtp", "--qps", "30", "--requests", "5", "--max-tokens", "40")
    assert run.manifest.mode == "mtp"  # from the server's spec_decode counters
    s = run.table("load_summary").iloc[0]
    ch = run.table("chunks")
    assert len(ch) == s["sd_num_drafts"]  # one verify step per event
    # a step emits accepted + 1 tokens; only a request's last step may be cut short by max_tokens
    emitted, full = ch["tokens"].sum(), s["sd_num_drafts"] + s["sd_num_accepted_tokens"]
    assert emitted == 200 and full - 4 * 5 <= emitted <= full
    rates = json.loads(s["sd_per_position_rates"])
    assert all(a >= b for a, b in zip(rates, rates[1:]))
    assert s["sd_draft_tokens_per_step"] == 4
    assert s["sd_mean_acceptance_length"] == pytest.approx(1 + s["sd_num_accepted_tokens"] / s["sd_num_drafts"])
    assert (run.path / "mtp_counters.json").exists()
    a = fitdata.mtp_acceptance(run)
    assert a.num_speculative_tokens == 4 and a.mean_acceptance_length == pytest.approx(s["sd_mean_acceptance_length"])
    assert "MTP: acceptance rate" in stdout

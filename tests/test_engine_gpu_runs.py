"""Real vLLM 0.26 on an H200 at load (data/runs/engine, issue 37): the committed GPU runs read back,
fitted and re-scored on this CPU machine. What they show, as examples of use:

- the engine's steps priced by a profile fitted on them, with the CUDA-graph regime;
- the loads they served (closed loops, Poisson) with the figures vllm bench would print;
- the profile checked on loads that took no part in the fit (benchmarks/bench_engine.py prints the table);
- the memory model against what the engine admitted and logged at start-up."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel.hardware import get_hardware
from costmodel.memory import EngineSettings, replica_memory
from costmodel.models import get_model
from costmodel.modes import get_mode
from costmodel.precision import get_precision
from costmodel.roofline import Segment
from costmodel.schemas.profile import frontend_latency_ms
from costmodel.stepcost import pass_cost, predictor_names
from measure.vllm import run_precision
from measure.vllm.engine_log import startup_memory
from costmodel.schemas.engine_setup import WARMUP
from measure.vllm.gpu_design import design_for
from costmodel.schemas.engine_loads import figures, read_load_windows, recorded_loads, step_context_tokens
from measure.vllm.model_dirs import config_json
from measure.validate.engine_campaign import fit_campaign, recorded_setups
from simulate.validate.engine_loads import check_loads, frontend_loads, with_frontend_latency

ROOT = Path(__file__).resolve().parents[1] / "data" / "runs" / "engine"
FIRST_DESIGN = ("default", "k4-a0.8", "steps48", "steps16")  # the settings sets recorded before the settings matrix (issue 49)
AR_RUN = ROOT / "h200-fp8-ar" / "default"


@pytest.fixture(scope="module")
def campaign():
    """The H200 fp8 profile fitted on every mode's steps less the check loads', and the checks: the first design's
    settings sets (the settings matrix's are scored by leaving each out, tests/test_engine_loso.py)."""
    setups = [s for s in recorded_setups(ROOT, "h200", "fp8") if s.setup.label.removesuffix("-steady") in FIRST_DESIGN]
    prof, msgs = fit_campaign(setups)
    msgs += with_frontend_latency(prof, setups)
    return prof, msgs, check_loads(prof, setups)


def test_a_recorded_load_gives_vllm_bench_figures():
    loads = {ld.name: ld for ld in recorded_loads(AR_RUN)}
    c16 = loads["closed-c16"]
    assert c16.kind == "closed" and c16.concurrency == 16 and len(c16.prompt_tokens) == 32 and c16.refused == 0
    assert 1500 < c16.tok_s < 2500 and c16.tpot_p50_ms > 4  # H200 fp8, 16 in flight
    assert loads["poisson-r4"].kind == "poisson" and loads["poisson-r4"].send_s[0] == 0.0
    windows = {w.name: w for w in read_load_windows(AR_RUN)}
    assert windows["closed-c16"].start_s < windows["closed-c16"].end_s <= windows["closed-c32"].start_s


def test_figures_are_vllm_benchs():
    req = pd.DataFrame({"arrival_s": [0.0, 0.5], "first_token_s": [0.1, 0.7], "finish_s": [1.1, 2.7], "output_tokens": [11, 21],
                        "status": ["ok", "ok"]})
    f = figures(req)
    assert f["tok_s"] == pytest.approx(32 / 2.7) and f["ttft_p50_ms"] == pytest.approx(150.0)
    assert f["tpot_p50_ms"] == pytest.approx(np.median([100.0, 100.0]))


def test_step_context_comes_from_the_requests(tmp_path):
    """KV usage overstates a hybrid cache's tokens; the requests' records give prompt + emitted so far."""
    pd.DataFrame({"request_id": ["a", "b"], "arrival_s": [0.0, 1.0], "finish_s": [3.0, 4.0], "prompt_tokens": [100, 50]}).to_parquet(
        tmp_path / "requests.parquet")
    pd.DataFrame({"request_id": ["a", "a", "b"], "chunk_index": [0, 1, 0], "t_s": [0.5, 2.0, 1.5], "tokens": [1, 1, 1]}).to_parquet(
        tmp_path / "chunks.parquet")
    assert step_context_tokens(tmp_path, np.array([0.2, 1.2, 1.6, 2.5, 3.5])).tolist() == [100, 151, 152, 153, 51]


def test_the_design_names_its_checks():
    for mode in ("ar", "mtp", "diffusion"):
        for setup in design_for(get_mode(mode)):
            names = {ld.name for ld in setup.loads}
            assert set(setup.holdout) <= names and setup.role(WARMUP.name) == "warmup"
            steady = setup.label.endswith("-steady")  # checks only: the steady state of a fitted setup's engine
            assert {setup.role(n) for n in names} == ({"warmup", "check"} if steady else {"warmup", "fit", "check"})


def test_a_run_cut_short_still_fits_its_largest_loop_but_a_steady_setup_stays_checks():
    """A deadline that cut c128 fits c64 instead of extrapolating to saturation; the steady loops check only."""
    (default, steady) = design_for(get_mode("ar"))[:2]
    skipped = {"closed-c128", "closed-c64-short"}
    cut = default.as_recorded({ld.name for ld in default.loads} - skipped, skipped)
    assert default.role("closed-c64") == "check" and cut.role("closed-c64") == "fit"
    ran = {ld.name for ld in steady.loads} - {"closed-c128-steady"}
    assert {steady.as_recorded(ran, {"closed-c128-steady"}).role(n) for n in ran} == {"warmup", "check"}


def test_a_run_of_chosen_loads_keeps_the_designs_roles():
    """A repeat of some loads (gpu_run --loads, no deadline) leaves its largest loop a check: the others ran before."""
    diffusion = design_for(get_mode("diffusion"))[0]
    chosen = diffusion.as_recorded({"warmup", "closed-c4", "closed-c8", "closed-c12", "poisson-r2"})
    assert chosen.role("closed-c12") == "check" and chosen.role("closed-c8") == "fit"


def test_loads_a_deadline_cut_can_be_recorded_on_their_own():
    """--loads picks the setups that hold the named loads (the warm-up runs anyway); a name not in the design is one line."""
    from costmodel.errors import UserError
    from measure.vllm.gpu_run import chosen_setups

    mtp = get_mode("mtp")
    assert [s.label for s in chosen_setups(mtp, loads="closed-c64-short")] == ["k4-a0.8"]
    assert [s.label for s in chosen_setups(mtp, loads="closed-c128-steady")] == ["k4-a0.8-steady"]
    with pytest.raises(UserError, match="--loads closed-c3: not a load of k4-a0.8"):
        chosen_setups(mtp, setups="k4-a0.8", loads="closed-c3")


def test_configs_are_the_form_vllm_026_reads():
    ar = config_json(get_model("gemma4-26b-a4b"))
    assert (ar["head_dim"], ar["global_head_dim"], ar["num_global_key_value_heads"], ar["enable_moe_block"]) == (256, 512, 2, True)
    dg = config_json(get_model("diffusiongemma-26b-a4b"))
    assert dg["vision_config"]["rope_parameters"]["rope_type"] == "default" and "default_output_length" in dg["vision_config"]
    assert dg["text_config"]["layer_types"][5] == "full_attention" and dg["canvas_length"] == 256
    assert config_json(get_model("gemma4-26b-a4b-assistant"))["model_type"] == "gemma4_assistant"
    assert run_precision({"quantization": "fp8", "dtype": "torch.bfloat16"}) == "fp8"


def test_the_fit_prices_the_cuda_graph_regime(campaign):
    """DiffusionGemma past vLLM's largest CUDA graph (512 tokens: 3 canvases) runs without graphs."""
    prof, msgs, _ = campaign
    assert "engine-step" in predictor_names()
    assert prof.engine["cuda_graph_max_tokens"] == {"ar": 512, "mtp": 512, "diffusion": 512}
    cost = pass_cost(prof, "diffusion")
    two, three = (cost.pass_ms((Segment("denoise_step", n, 256, 1024),)) for n in (2, 3))
    assert three > 1.8 * two  # measured medians: 21 ms at 2 canvases, 53 ms at 3
    # eager steps sit on the host's launch floor: each canvas adds less than a graphed one (medians 14, 21 ms at
    # 1-2 canvases; 53, 69 ms at 3 and 8)
    one, eight = (cost.pass_ms((Segment("denoise_step", n, 256, 1024),)) for n in (1, 8))
    assert (eight - three) / 5 < (two - one) and prof.modes["diffusion"].pass_models["denoise_step"].coef["graph_off_tokens"] < 0
    assert any("steps of held-out loads left out of the fit" in m for m in msgs)
    # AR fitted on a Poisson load; MTP's and DiffusionGemma's slowest Poisson loads are cold (first-use stalls), so
    # on their fewest-client steady closed loops, where the simulated TTFT may already reach the measured one
    assert frontend_latency_ms(prof, "ar") > 0 and all(frontend_latency_ms(prof, m) >= 0 for m in ("mtp", "diffusion"))


def test_the_front_end_is_fitted_where_requests_do_not_queue():
    """MTP's 1 req/s loads met first-use stalls and its 10 req/s load queues, so the closed loops of at most four
    clients are used instead, in every engine start that served them: one closed loop is a handful of requests."""
    setups = [s for s in recorded_setups(ROOT, "h200", "fp8") if s.mode == "mtp"]
    picks = frontend_loads(setups)
    assert {ld.name for _, ld in picks} <= {"closed-c1", "closed-c2", "closed-c4"}
    assert len({sdir.parent.name for sdir, _ in picks}) >= 2  # several engine starts


def test_the_front_end_is_not_fitted_on_a_cold_loop():
    """On the H100, AR's closed loops of few clients met first-use compilations (a TTFT of seconds): the front end is
    fitted on the steady loop with the fewest clients instead."""
    from simulate.validate.engine_loads import COLD_SHARE

    setups = [s for s in recorded_setups(ROOT, "h100", "fp8") if s.mode == "ar"]
    stalls = {(s.path, name): v for s in setups for name, v in s.stalls.items()}
    picks = frontend_loads(setups)
    assert picks and any(stalls.get((s.path, "closed-c1"), (0, 0.0, 1.0))[1] > COLD_SHARE * stalls[(s.path, "closed-c1")][2] for s in setups)
    for sdir, ld in picks:
        _, stall_s, duration_s = stalls.get((sdir, ld.name), (0, 0.0, 1.0))
        assert stall_s <= COLD_SHARE * duration_s


def test_the_front_end_latency_is_the_median_over_its_loads(campaign):
    """The fitted front-end latency is the median of its loads' residuals, each simulated with its own start's settings."""
    import numpy as np

    from costmodel.schemas.profile import FRONTEND_LATENCY_KEY

    prof, _, _ = campaign
    for mode, rec in prof.engine[FRONTEND_LATENCY_KEY].items():
        assert len(rec["loads"]) == len(rec["residuals_ms"]) >= 1
        assert abs(rec["ms"] - max(0.0, float(np.median(rec["residuals_ms"])))) <= 0.01


def test_the_fit_finds_where_the_engines_kernels_change_regime(campaign):
    """vLLM 0.26's AR decode step on the H200 costs 5.6 ms at 16 sequences and 8.4 ms at 17 (flat to 32): the
    fit finds the knee in the recorded steps, fitted on sums of consecutive steps (a prefill's time reaches the
    front-end in its neighbour's gap), and prices both sides of it."""
    prof, msgs, _ = campaign
    assert prof.engine["step_knee_tokens"]["ar"] == 16
    cost = pass_cost(prof, "ar")
    at = {n: cost.pass_ms((Segment("decode_step", n, 1, 2048),)) for n in (8, 16, 17, 32)}
    assert at[17] > 1.3 * at[16] and at[17] - at[16] > at[32] - at[17] and at[16] < 1.2 * at[8]  # the jump, not the slope
    assert any("regime past 16 tokens" in m for m in msgs)


def test_async_gaps_are_fitted_on_sums_of_consecutive_steps(monkeypatch):
    """Under async scheduling the gap before a step that prefills a new request carries most of that prefill's
    time. Fitted on sums of consecutive steps (the "windows" objective async gaps get) the MTP runs' 8-sequence
    step (verify + 4 drafts) lands within 10% of the 10.8 ms its steady steps took, and nearer than a fit per step
    (which the padded verify steps' own feature, graph_padded, now brings within a few per cent too)."""
    from types import SimpleNamespace

    import measure.fit.steps as fit_steps

    # the k = 4 settings set, fitted less its check loads (the settings matrix's other sets: pipeline/engine_loso.py)
    mtp = [s for s in recorded_setups(ROOT, "h200", "fp8") if s.mode == "mtp" and s.setup.label.startswith("k4-a0.8")]
    steady = fit_steps.load_run(mtp[0].path).table("steps").query("prefill_tokens == 0 and verify_reqs == 8")["gap_ms"].median()
    step = (Segment("verify_step", 8, 5, 1024),)  # the loads' contexts: prompts of 128-4,096 tokens (median ~720) and their outputs
    windows = fit_campaign(mtp)[0]
    per_step = fit_steps.choose_and_fit
    monkeypatch.setattr(fit_steps, "choose_and_fit", lambda st, d, m, seed, objective="relative": per_step(
        st, d, m, seed, "mean" if objective == "windows" else objective))
    per_step_fit = fit_campaign(mtp)[0]
    price = {name: pass_cost(p, "mtp").step_ms(None, step, SimpleNamespace(side_passes=4)) for name, p in
             (("windows", windows), ("per step", per_step_fit))}
    assert steady == pytest.approx(10.8, abs=0.3)
    assert abs(price["windows"] / steady - 1) < min(0.10, abs(price["per step"] / steady - 1)), price


def test_checked_on_loads_outside_the_fit(campaign):
    """Throughput within 10% on the checks of every mode (the bench prints the rest)."""
    _, _, rows = campaign
    assert rows and all(not r.in_fit for r in rows)
    by_mode: dict[str, list[float]] = {}
    for r in rows:
        by_mode.setdefault(r.mode, []).append(abs(r.error_pct("tok_s")))
    assert set(by_mode) == {"ar", "mtp", "diffusion"}
    for mode, errs in by_mode.items():
        assert np.median(errs) < 10, (mode, errs)
    ar_c64 = next(r for r in rows if r.mode == "ar" and r.load.name == "closed-c64")
    assert abs(ar_c64.error_pct("tpot_p50_ms")) < 10
    # TTFT request by request as well as at the p50: AR's TTFTs at 4 req/s gather in two groups (prompts within and
    # past the CUDA graphs), so its p50 can fall between them; its requests agree one by one
    poisson = next(r for r in rows if r.mode == "ar" and r.load.name == "poisson-r4")
    assert len(poisson.load.ttft_ms) == len(poisson.comparison.ttft_ms) == len(poisson.load.prompt_tokens)
    assert abs(poisson.error_pct("ttft_p50_ms")) < 15 and abs(poisson.ttft_request_error_pct) < 10


# KV cache, model against engine: fp8 AR +2.0%, MTP -1.8%, diffusion +0.9%; bf16 AR +2.6%, MTP -2.6%, diffusion +1.0%
# (MTP and DiffusionGemma run on vLLM 0.26's V2 model runner, which reserves no CUDA-graph memory from the budget)
@pytest.mark.parametrize("precision", ["fp8", "bf16"])
def test_memory_model_against_the_engines_start_up(precision):
    """What vLLM 0.26 logged at start-up on the H200 (utilisation 0.9) beside the memory model."""
    for mode in ("ar", "mtp", "diffusion"):
        log = f"h200-{precision}-{mode}/h200-{precision}-{mode}.log"
        seen = startup_memory((ROOT / log).read_text())
        info = json.loads(next((ROOT / log).parent.glob("engine-*.json")).read_text())
        res = info["resolved"]
        mem = replica_memory(get_hardware("h200"), get_mode(mode), get_precision(precision),
                             EngineSettings(max_num_seqs=res["max_num_seqs"], gpu_memory_utilization=0.9, max_model_len=res["max_model_len"]),
                             device_bytes=int(seen["device_gib"] * 2**30))
        weights = mem.term("weights").bytes / 2**30
        kv = sum(t.bytes for t in mem.terms if t.kind == "kv") / 2**30
        assert weights == pytest.approx(seen["weights_gib"], rel=0.05)
        assert kv == pytest.approx(seen["kv_gib"], rel=0.03)
        assert not math.isnan(seen["activations_gib"])


def test_bf16_engine_profile_ships_beside_the_fp8_default():
    """The H200's bf16 engine, as recorded, ships as a profile to pass with --profile; fp8 stays the GPU's default."""
    from costmodel.schemas.profile import Profile
    from costmodel.shipped import resolve_profile, shipped_dir

    bf16 = Profile.load(shipped_dir() / "bf16" / "h200.json")
    assert (bf16.precision, bf16.hardware.id, bf16.provenance.kind) == ("bf16", "h200", "measured")
    assert bf16.engine["version"] == "0.26.0" and set(bf16.modes) == {"ar", "mtp", "diffusion"}
    runs = {json.loads((d / "manifest.json").read_text())["run_id"] for d in ROOT.glob("h200-bf16-*/*/") if (d / "manifest.json").exists()}
    assert runs and all(r in bf16.provenance.source for r in runs)
    assert resolve_profile(None, "h200").precision == "fp8"


def test_an_engine_that_refuses_to_start_says_why(tmp_path):
    """The engine core fails in its own process: the reason recorded is its log's, not 'initialization failed'."""
    from measure.vllm.gpu_run import refusal_cause

    log = tmp_path / "engine.log"
    log.write_text("(EngineCore pid=1) ERROR 11-27 [core.py:1330] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.15 GiB\n"
                   "RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert refusal_cause(RuntimeError("Engine core initialization failed"), log).startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert refusal_cause(ValueError("max_num_batched_tokens 1 < canvas 256"), None) == "ValueError: max_num_batched_tokens 1 < canvas 256"


def test_measure_engine_vllm_on_a_gpu_machine_refuses_bad_input(cli, monkeypatch, tmp_path):
    """On an NVIDIA machine `costmodel measure --engine vllm` records GPU vLLM; bad input is one line."""
    import measure.cli.measure_vllm as mv

    monkeypatch.setattr(mv, "gpu_present", lambda: True)
    code, out, err = cli("measure", "--engine", "vllm", "--mode", "ar", "--precision", "int4", "-o", str(tmp_path / "r"))
    assert code == 2 and "--precision int4" in err and "fp8 or bf16" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("measure", "--engine", "vllm", "--mode", "ar", "-o", str(tmp_path / "r2"))  # no vLLM in this environment
    assert code == 2 and "../shared/gpu-vllm" in err and "Traceback" not in err


def test_amending_a_folder_that_is_not_a_setup_is_one_line(tmp_path, capsys):
    """`gpu_run --amend` takes a recorded setup's folder; the run's folder above it is refused in one line."""
    from measure.vllm.gpu_run import main

    assert main(["--amend", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no manifest.json" in err and len(err.strip().splitlines()) == 1


def test_compare_bench_takes_a_recorded_run(cli):
    """`costmodel compare-bench` reads a recorded engine run as it reads a bench file: each load, its
    mode and engine settings from the run, predicted beside measured."""
    code, out, err = cli("compare-bench", str(ROOT / "h200-fp8-mtp" / "k4-a0.8"), "--profile",  # the H200's fp8 engine profile: the shipped default
                         str(Path(__file__).resolve().parents[1] / "costmodel" / "data" / "profiles" / "h200.json"))
    assert code == 0, err
    text = " ".join(out.split())  # rich wraps long lines between any two words
    assert "closed-c32: closed loop, 32 clients" in text and "poisson-r4" in text and "mode mtp (the run's manifest)" in text
    assert "num_speculative_tokens=4 [run" in text


def test_first_use_stalls_are_found_and_left_out_of_the_fit():
    """The H100's first 2,394-token prefill took 1.5 s where its like take ~10 ms: a kernel compiled for a
    new shape, paid once. The fit leaves such steps out and says so; a load that spent more than 2% of its
    time in them is reported as cold, not scored as a steady state."""
    from measure.fit.stalls import first_use_stalls, load_stalls

    run = ROOT / "h100-fp8-ar" / "default"
    steps = pd.read_parquet(run / "steps")
    steps = steps[(steps["prefill_tokens"] + steps["decode_tokens"] > 0) & steps["gap_ms"].notna()]
    stalls = first_use_stalls(steps)
    assert 3 <= stalls.count <= 10 and stalls.excess_ms.min() > 150
    assert stalls.count / len(steps) < 0.001
    per_load = load_stalls(run)
    n, stall_s, duration_s = per_load["closed-c1"]
    assert n == 2 and stall_s > 0.02 * duration_s
    assert per_load["closed-c16"][0] == 0


def test_a_run_cut_short_keeps_its_saturation_in_the_fit():
    """The H100 AR call's deadline stopped it after 64 clients: the design held 64 out to check a fit that
    reached 128; scored as recorded, the largest load that ran is fitted instead."""
    from measure.vllm.gpu_design import design_setup

    setup = design_setup(ROOT / "h100-fp8-ar" / "default")
    assert setup.role("closed-c64") == "fit" and setup.role("closed-c32") == "check"
    assert design_setup(AR_RUN).role("closed-c64") == "check"  # the H200 reached 128


def test_an_engine_that_failed_a_load_is_recorded_and_not_scored():
    """DiffusionGemma at 16 canvases ran out of memory on the H100 (steps16): the loads it failed stay in
    the run, marked, and the check reports them as refused instead of scoring them."""
    loads = {ld.name: ld for ld in recorded_loads(ROOT / "h100-fp8-diffusion" / "steps16")}
    assert loads["closed-c16"].refused == 32 and loads["closed-c8"].refused == 0
    log = (ROOT / "h100-fp8-diffusion" / "h100-fp8-diffusion-steps16.log").read_text()
    assert "torch.OutOfMemoryError" in log


def test_memory_model_refuses_what_ran_out_of_memory():
    """16 canvases: out of memory on the H100 (steps16), run on the H200; the memory model, given each
    device's memory as the engine logged it, says the same."""
    from costmodel.errors import UserError

    def canvases(gpu: str, log: str, n: int):
        seen = startup_memory((ROOT / log).read_text())
        return replica_memory(get_hardware(gpu), get_mode("diffusion"), get_precision("fp8"), EngineSettings(max_num_seqs=n, gpu_memory_utilization=0.9),
                              device_bytes=int(seen["device_gib"] * 2**30))

    assert canvases("h200", "h200-fp8-diffusion/h200-fp8-diffusion.log", 16).limits.max_num_seqs == 16
    with pytest.raises(UserError, match="does not fit"):
        canvases("h100-sxm", "h100-fp8-diffusion/h100-fp8-diffusion-steps16.log", 16)
    assert canvases("h100-sxm", "h100-fp8-diffusion/h100-fp8-diffusion-steps16.log", 12).limits.max_num_seqs == 12


def test_the_engine_against_itself():
    """Three starts of DiffusionGemma's engine on an H200 served the same Poisson 2 req/s load: the steps its CUDA graphs
    replay agree, the eager ones past them (three canvases or more) do not, and so neither does TPOT."""
    from measure.validate.engine_repeats import load_repeats

    reps = {(r.mode, r.load): r for r in load_repeats(recorded_setups(ROOT, "h200", "fp8"))}
    poisson = reps[("diffusion", "poisson-r2")]
    assert [s.run for s in poisson.starts] == ["h200-fp8-diffusion/steps48", "h200-fp8-diffusion-repeat/steps48",
                                               "h200-fp8-diffusion-full2/steps48"]
    assert poisson.spread_pct("graphed_step_ms") < 5 < 20 < poisson.spread_pct("eager_step_ms")
    assert poisson.spread_pct("tpot_p50_ms") > 20 and reps[("diffusion", "closed-c12")].spread_pct("tok_s") < 5
    assert ("mtp", "warmup") in reps  # the same 24 requests open every start of a setup


def test_a_run_names_its_host_cpu():
    """Eager steps are the host's launches: each engine start records the CPU beside the GPU."""
    from measure.vllm.gpu_run import host_cpu

    host = host_cpu()
    assert host["cpus"] >= 1 and set(host) == {"cpu_model", "cpus", "load_avg_1m"}


def test_every_fitted_setup_names_an_anchor_load_that_it_fits():
    """The anchor is served by every start, even one of chosen loads, so that starts can be told apart from loads."""
    for mode in ("ar", "mtp", "diffusion"):
        for setup in design_for(get_mode(mode)):
            if any(setup.role(ld.name) == "fit" for ld in setup.loads):
                assert setup.role(setup.anchor) == "fit"


def test_engine_starts_get_an_offset_only_where_a_shared_load_anchors_them():
    """DiffusionGemma's two H200 fp8 starts of steps48 both fitted closed loops of 4 and 8 canvases; its steps16 start
    shares no fitted load with them, and neither do AR's starts (the cut run's steady loop is a check)."""
    from costmodel.schemas.rundir import load_run
    from measure.fit.steps import anchored_starts

    def codes(folders):
        setups = [s for s in recorded_setups(ROOT, "h200", "fp8") if s.path.parent.name in folders]
        runs = [load_run(s.path) for s in setups]
        steps = pd.DataFrame({"run_id": [r.manifest.run_id for r in runs]})
        held = {str(s.path.resolve()): s.setup.holdout for s in setups}
        return dict(zip((f"{s.path.parent.name}/{s.path.name}" for s in setups), anchored_starts(steps, runs, held)))

    diff = codes({"h200-fp8-diffusion", "h200-fp8-diffusion-repeat"})
    assert diff["h200-fp8-diffusion/steps48"] >= 0 and diff["h200-fp8-diffusion-repeat/steps48"] >= 0
    assert diff["h200-fp8-diffusion/steps16"] == -1 and diff["h200-fp8-diffusion/steps48-steady"] == -1
    assert set(codes({"h200-fp8-ar", "h200-fp8-ar-cut"}).values()) == {-1}


def test_the_profile_prices_the_mean_engine_start(campaign):
    """The starts' offsets are fitted beside the prices, not priced: no pass model carries them."""
    prof, msgs, _ = campaign
    assert all(not any(k.startswith("start") for k in pm.coef) for m in prof.modes.values() for pm in m.pass_models.values())


def test_the_fits_wall_check_prices_each_step_at_its_requests_context():
    """`costmodel fit` sets the profile's price of every recorded step beside the wall time; a GPU run's decode
    context comes from its requests, as in the fit (KV usage overstates it for Gemma-4's sliding-window cache)."""
    import re

    from costmodel.schemas.profile import Profile
    from costmodel.schemas.rundir import load_run
    from measure.fit.calibrate import wall_check

    prof = Profile.load(Path(__file__).resolve().parents[1] / "costmodel" / "data" / "profiles" / "h200.json")
    msg = wall_check(prof, [load_run(ROOT / "h200-fp8-ar" / "default")])[0]
    assert abs(float(re.search(r"total ([+-][\d.]+)%", msg).group(1))) < 5, msg


def test_a_miss_is_told_apart_as_the_step_price_or_the_schedule(campaign):
    """The profile's price of a load's recorded steps (the engine's own schedule) beside their recorded time: AR's is
    within a few percent where its loads are predicted well, while MTP's steady loops are priced 5-15% above what the
    engine took (10-20% before the padded verify steps were priced apart: graph_padded), which is what their TPOT
    misses by (the bench prints both)."""
    from measure.validate.engine_campaign import recorded_steps_priced

    prof, _, _ = campaign
    picked = [s for s in recorded_setups(ROOT, "h200", "fp8") if s.path.parent.name in ("h200-fp8-ar-cut", "h200-fp8-mtp") and
              s.path.name.endswith("-steady")]
    priced = {(p.parent.name, load): v for (p, load), v in recorded_steps_priced(prof, picked).items()}
    assert abs(priced[("h200-fp8-ar-cut", "closed-c128-steady")]) < 0.05
    assert all(0.05 < priced[("h200-fp8-mtp", f"closed-c{n}-steady")] < 0.15 for n in (16, 32, 64))

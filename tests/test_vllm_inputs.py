"""Bad input around the vLLM step recorder, on the committed vllm-cpu step records
(data/runs/vllm-cpu/*-steps): vLLM missing -> one line naming the extra; a step record with a
missing field -> one line naming it, no profile written; an unknown vLLM version or an unfinished
(killed) recording -> fitted, and said so."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from costmodel.errors import UserError
from servers.helpers import costmodel
from servers.vllm_real import REPO, VLLM_PY

DATA = REPO / "data" / "runs" / "vllm-cpu"
HW = ["--hardware", "cpu-2core", "--hardware-file", str(DATA / "hardware.json")]
no_vllm_here = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this interpreter")


def copy_run(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(DATA / name, dst)
    return dst


@no_vllm_here
def test_vllm_missing_is_one_line_naming_the_extra():
    from measure.vllm import require_vllm

    with pytest.raises(UserError, match=r"vLLM is not installed.*`vllm` extra"):
        require_vllm()
    r = subprocess.run([sys.executable, "-m", "measure.vllm.campaign", "-o", "x"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "`vllm` extra" in r.stderr


@pytest.mark.parametrize("field", ["elapsed_ms", "commit_reqs"])
def test_step_record_missing_a_field_is_refused_naming_it(field, tmp_path):
    run = copy_run("diffusion-steps", tmp_path)
    for part in (run / "steps").glob("part-*.parquet"):
        pd.read_parquet(part).drop(columns=[field]).to_parquet(part, index=False)
    out = tmp_path / "p.json"
    code, stdout, err = costmodel("fit", str(run), *HW, "-o", str(out))
    assert code == 2 and field in err and err.count("\n") == 1 and not out.exists()


def test_step_record_without_engine_version_is_refused(tmp_path):
    run = copy_run("ar-steps", tmp_path)
    m = json.loads((run / "manifest.json").read_text())
    del m["engine"]["version"]
    (run / "manifest.json").write_text(json.dumps(m))
    code, _, err = costmodel("fit", str(run), *HW, "-o", str(tmp_path / "p.json"))
    assert code == 2 and "engine.version" in err and not (tmp_path / "p.json").exists()


def test_unknown_vllm_version_and_unfinished_recording_are_fitted_and_said(tmp_path):
    run = copy_run("ar-steps", tmp_path)
    m = json.loads((run / "manifest.json").read_text())
    m["engine"]["version"], m["status"] = "0.99.0", "incomplete"
    (run / "manifest.json").write_text(json.dumps(m))
    code, out, err = costmodel("fit", str(run), *HW, "-o", str(tmp_path / "p.json"))
    assert code == 0, err
    assert "vLLM 0.99.0 is not among the versions" in out and "fitting the flushed steps" in out


def test_steps_runs_are_not_mixed_with_other_runs(tmp_path):
    code, _, err = costmodel("fit", str(DATA / "ar-steps"), str(DATA / "ar-endpoint"), *HW, "-o", str(tmp_path / "p.json"))
    assert code == 2 and "fitted on their own" in err


def test_steps_need_a_hardware(tmp_path):
    code, _, err = costmodel("fit", str(DATA / "ar-steps"), "-o", str(tmp_path / "p.json"))
    assert code == 2 and "--hardware" in err


@pytest.mark.parametrize("mode", ["diffusion", "ar", "mtp"])
def test_committed_step_records_fit(mode, tmp_path):
    """The worked example's data: every mode's recorded steps give a profile with held-out MAPE per pass kind."""
    out = tmp_path / "p.json"
    code, stdout, err = costmodel("fit", str(DATA / f"{mode}-steps"), *HW, "-o", str(out))
    assert code == 0, err
    prof = json.loads(out.read_text())
    for kind, pm in prof["modes"][mode]["pass_models"].items():
        assert pm["diagnostics"]["heldout_mape_pct"] is not None, kind
        assert "vllm 0.32.0 on cpu" in pm["provenance"]["notes"]


@pytest.mark.parametrize("mode", ["diffusion", "mtp"])
def test_committed_bench_results_import(mode, tmp_path):
    code, out, err = costmodel("import-bench", str(DATA / f"{mode}-bench.json"), "-o", str(tmp_path / "b"))
    assert code == 0, err
    assert ("steps per canvas" in out) if mode == "diffusion" else ("MTP acceptance length" in out)


@pytest.mark.parametrize("mode", ["diffusion", "ar", "mtp"])
def test_recorder_refuses_a_vllm_without_a_stat_field(mode, tmp_path):
    if not VLLM_PY.exists():
        pytest.skip("no .venv-vllm (build it with `make vllm-env`)")
    code = ("import sys, pathlib; import measure.vllm.recorder as r; from benchmarks.bench_step_recorder import fake_config; "
            "r.REQUIRED_FIELDS['SchedulerStats'] += ('num_imaginary_reqs',); "
            f"rec = r.StepRecorder(fake_config({mode!r}, 32, 2), run_dir={str(tmp_path / 'run')!r}); print('enabled', rec.enabled)")
    p = subprocess.run([str(VLLM_PY), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "enabled False" in p.stdout and "SchedulerStats.num_imaginary_reqs" in p.stderr and not (tmp_path / "run").exists()



@pytest.mark.torch
def test_tiny_models_load_in_transformers(tmp_path):
    """The tiny model directories vLLM serves also load in transformers (this interpreter's), tokenizer included."""
    pytest.importorskip("transformers")
    import transformers

    from measure.vllm.tiny_models import EOS, _kv_sharing_fix, build_all

    dirs = build_all(tmp_path)
    tok = transformers.AutoTokenizer.from_pretrained(dirs["ar"])
    ids = tok("What is the capital city of Canada?")["input_ids"]
    assert tok.vocab_size == 512 and tok.decode(ids) == "What is the capital city of Canada?" and tok.eos_token_id == EOS
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat.endswith("<start_of_turn>model\n")
    for key, cls in (("diffusion-c32", transformers.DiffusionGemmaForBlockDiffusion), ("diffusion-c256", transformers.DiffusionGemmaForBlockDiffusion),
                     ("ar", transformers.Gemma4ForCausalLM), ("mtp-assistant", transformers.Gemma4AssistantForCausalLM)):
        with _kv_sharing_fix():  # transformers 5.23's assistant config needs the project's fix (measure/harness/build.py)
            model = cls.from_pretrained(dirs[key])
        assert model.config.get_text_config().hidden_size in (64, 32), key
    assert transformers.AutoConfig.from_pretrained(dirs["diffusion-c256"]).canvas_length == 256

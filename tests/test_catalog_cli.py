"""The CLI's foundation commands and their one-line errors (exit code 2)."""

import json

from costmodel.hardware import get_hardware, match_nvml_name
from costmodel.models import load_config_json


def test_roofline_command_reports_the_denoise_limit(cli):
    code, out, err = cli("roofline", "--model", "diffusiongemma-26b-a4b", "--hardware", "h200", "--precision", "bf16", "--batch", "1")
    assert code == 0, err
    line = next(l for l in out.splitlines() if "denoise_step" in l and "│" in l)
    cells = [c.strip() for c in line.split("│") if c.strip()]
    assert float(cells[5]) > 50 and 10.4 < float(cells[8]) < 11.1 and cells[9] == "memory"
    assert "denoise_step: turns compute-bound at" in out


def test_roofline_sweep_csv(cli, tmp_path):
    out_csv = tmp_path / "r.csv"
    code, out, err = cli("roofline", "--sweep", "--pass-kind", "denoise_step", "--csv", str(out_csv))
    assert code == 0, err
    import pandas as pd

    df = pd.read_csv(out_csv)
    assert list(df.seqs) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert df.bound.iloc[0] == "memory" and df.bound.iloc[-1] == "compute"


def test_bad_names_give_one_line_errors(cli, tmp_path):
    for args, needle in [
        (("roofline", "--model", "llama"), "unknown model"),
        (("roofline", "--hardware", "a100"), "unknown hardware"),
        (("roofline", "--precision", "fp3"), "unknown precision"),
        (("roofline", "--batch", "0"), "below 1"),
        (("roofline", "--batch", "x"), "not an integer"),
        (("roofline", "--pass-kind", "decode"), "unknown pass kind"),
    ]:
        code, out, err = cli(*args)
        assert code == 2, args
        assert needle in err and len(err.strip().splitlines()) == 1


def test_malformed_config_json(cli, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = cli("roofline", "--model", str(bad))
    assert code == 2 and "not valid JSON" in err
    bad.write_text(json.dumps({"model_type": "gemma4_text", "hidden_size": 8}))
    code, _, err = cli("roofline", "--model", str(bad))
    assert code == 2 and "missing or has a bad field" in err


def test_load_real_config_json_shape(tmp_path):
    cfg = {"model_type": "diffusion_gemma", "canvas_length": 256,
           "text_config": json.load(open(__file__.replace("tests/test_catalog_cli.py", "costmodel/data/diffusiongemma_26b_a4b_config.json")))["text_config"]}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    shape = load_config_json(tmp_path)
    assert shape.family == "diffusion_gemma" and shape.canvas_length == 256
    assert shape.total_params / 1e9 > 25


def test_user_hardware_file_and_nvml_mapping(tmp_path, cli):
    f = tmp_path / "gpu.json"
    f.write_text(json.dumps({"gpus": {"l40s": {"name": "NVIDIA L40S", "memory_gb": 48, "memory_bandwidth_tbps": 0.864,
                                                "tflops": {"bf16": 362}, "board_power_w": 350, "price_usd_per_gpu_hour": 1.0}}}))
    assert get_hardware("l40s", f).memory_gb == 48
    code, out, err = cli("roofline", "--hardware", "l40s", "--hardware-file", str(f))
    assert code == 0, err
    assert match_nvml_name("NVIDIA H200").id == "h200"
    assert match_nvml_name("NVIDIA H100 80GB HBM3").id == "h100-sxm"
    assert match_nvml_name("NVIDIA GeForce RTX 5090").id == "rtx-5090"
    assert match_nvml_name("NVIDIA A10") is None
    f.write_text(json.dumps({"gpus": {"x": {"name": "x"}}}))
    code, _, err = cli("roofline", "--hardware", "x", "--hardware-file", str(f))
    assert code == 2 and "lacks" in err


def test_every_catalog_number_has_a_source():
    from costmodel.hardware import catalog, source_text

    for spec in catalog().values():
        for key in ["memory_gb", "memory_bandwidth_tbps", "board_power_w", "price_usd_per_gpu_hour", *[f"tflops.{k}" for k in spec.tflops]]:
            assert key in spec.sources, (spec.id, key)
            assert source_text(spec.sources[key]) != spec.sources[key]


def test_help_and_version(cli):
    code, out, _ = cli("--version")
    assert code == 0 and "costmodel" in out
    code, out, _ = cli("--help")
    assert code == 0 and "simulate" in out and "roofline" in out

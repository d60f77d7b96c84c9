"""Recipe: a GPU of another architecture is one catalog entry, here in a user hardware file in the
catalog's own format (`--hardware-file`), standing for its entry in costmodel/data/hardware.json:
every command takes it from there (a roofline profile, simulate, plan, the memory model)."""

from __future__ import annotations

import json

import pandas as pd

from costmodel.hardware import architectures, catalog, load_user_hardware, template
from tests.toy import recipes

GPU = "toy-accel"


def toy_catalog_entry() -> dict:
    """`costmodel hardware --template`'s entry, made a GPU of an architecture the catalog lacks."""
    doc = template()
    entry = doc["gpus"].pop("my-gpu")
    entry.update(name="Toy Accelerator 192GB", nvml_names=["Toy Accelerator"], memory_gb=192, memory_bandwidth_tbps=5.3,
                 tflops={"bf16": 1307, "fp8": 2615}, board_power_w=750, price_usd_per_gpu_hour=3.1, purchase_usd=20000)
    entry["architecture"].update(name="toyarch", compute_capability="9.4", precisions=["bf16", "fp8"])
    doc["gpus"][GPU] = entry
    return doc


def test_the_gpu_recipe_touches_exactly_the_catalog():
    # the entry is in the catalog's format: it would go, as it is, under "gpus" in the catalog file
    catalog_doc = json.loads((recipes.ROOT / "costmodel" / "data" / "hardware.json").read_text())
    assert set(toy_catalog_entry()["gpus"][GPU]) <= set(next(iter(catalog_doc["gpus"].values()))) | {"architecture"}
    assert recipes.recipe_files("A GPU") == {"costmodel/data/hardware.json"}


def test_a_gpu_of_another_architecture_runs_through_profile_simulate_and_plan(cli, tmp_path):
    hw = tmp_path / "hardware.json"
    hw.write_text(json.dumps(toy_catalog_entry()))
    spec = load_user_hardware(hw)[GPU]
    assert spec.arch.name == "toyarch" and "toyarch" not in architectures() and GPU not in catalog()

    prof = tmp_path / "p.json"
    code, _, err = cli("profile", "roofline", "--hardware", GPU, "--hardware-file", str(hw), "-o", str(prof))
    assert code == 0, err
    sim = tmp_path / "sim"
    code, _, err = cli("simulate", "--profile", str(prof), "--mode", "ar", "--qps", "2", "--duration", "30", "--jobs", "1", "-o", str(sim))
    assert code == 0, err
    assert pd.read_csv(sim / "summary.csv")["stable"].all()
    plan = tmp_path / "plan"
    code, _, err = cli("plan", "--profile", str(prof), "--hardware", GPU, "--mode", "ar,diffusion", "--qps", "2", "--duration", "30",
                       "--jobs", "1", "-o", str(plan))
    assert code == 0, err
    rows = pd.read_csv(plan / "plan.csv")
    assert set(rows["hardware"]) == {GPU} and rows["replicas"].notna().all()
    code, out, err = cli("memory", "--hardware", GPU, "--hardware-file", str(hw), "--mode", "ar")
    assert code == 0, err

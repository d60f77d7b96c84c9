"""Recipe, followed by editing files: a GPU of another architecture is one entry in the catalog,
costmodel/data/hardware.json, carrying its architecture's object. On a copy of the tree so edited,
every command takes it from there: a synthetic run timed on it is fitted, its roofline profile
simulated and planned, its memory model read."""

from __future__ import annotations

import json

import pandas as pd

from costmodel.hardware import architectures, catalog, template
from tests.toy import recipes

GPU = "toy-accel"
ARCH = "toyarch"
ENTRY = (
    f'    "{GPU}": {{',
    '      "name": "Toy Accelerator 192GB",',
    f'      "architecture": {{"name": "{ARCH}", "compute_capability": "9.4", "precisions": ["bf16", "fp8"], "cudagraph_max_tokens": 512,',
    '                       "large_batch_defaults_min_gib": 70, "sources": {"precisions": "a toy: its datasheet"}},',
    '      "nvml_names": ["Toy Accelerator"],',
    '      "memory_gb": 192, "memory_bandwidth_tbps": 5.3,',
    '      "tflops": {"bf16": 1307, "fp8": 2615},',
    '      "board_power_w": 750, "l2_mb": 256, "sms": 304,',
    '      "price_usd_per_gpu_hour": 3.10, "purchase_usd": 20000,',
    '      "sources": {"memory_gb": "a toy", "memory_bandwidth_tbps": "a toy", "tflops.bf16": "a toy", "tflops.fp8": "a toy", "board_power_w": "a toy",'
    ' "price_usd_per_gpu_hour": "a toy", "purchase_usd": "a toy"}',
    '    },',
)
EDITS = (recipes.Edit("costmodel/data/hardware.json", ENTRY, after=r'^  "gpus": \{$'),)
TRUTH_MS = {"prefill": {"const": 4.0, "roofline_ms": 1.4}, "decode_step": {"const": 6.0, "roofline_ms": 1.3}}
WORKLOAD = {"prompt_tokens": {"dist": "constant", "value": 256}, "output_tokens": {"dist": "constant", "value": 128}}


def test_the_entry_is_the_catalogs_and_the_templates_fields():
    entry = json.loads("{" + "\n".join(ENTRY).rstrip(",") + "}")[GPU]
    assert set(entry) <= set(template()["gpus"]["my-gpu"]) | {"architecture"} and set(entry["architecture"]) - {"name"} <= set(
        template()["gpus"]["my-gpu"]["architecture"])
    assert GPU not in catalog() and ARCH not in architectures()


def test_a_gpu_of_another_architecture_is_one_catalog_entry_and_every_command_takes_it(tmp_path):
    tree = recipes.Tree(tmp_path / "tree")
    assert tree.edit(EDITS) == recipes.recipe_edits("A GPU")
    w = tree.work
    (w / "wl.json").write_text(json.dumps(WORKLOAD))
    run = "from measure.fit.synthetic_runs import write_synthetic_run; "
    run += f"write_synthetic_run('ar-run', 'ar', {TRUTH_MS!r}, hardware={GPU!r}, precision='fp8')"
    tree.session(
        ("fit", "ar-run", "-o", "fitted.json"),
        ("simulate", "--profile", "fitted.json", "--workload", "wl.json", "--qps", "2", "--duration", "20", "--jobs", "1", "-o", "sim"),
        # no profile ships for it: plan prices it from the roofline
        ("plan", "--hardware", GPU, "--mode", "diffusion,ar", "--qps", "2", "--duration", "20", "--jobs", "1", "--refine-crossover", "0", "-o", "plan"),
        ("memory", "--hardware", GPU, "--mode", "ar"),
        setup=run)
    fitted = json.loads((w / "fitted.json").read_text())
    assert fitted["hardware"]["id"] == GPU and fitted["hardware"]["architecture"]["name"] == ARCH and fitted["precision"] == "fp8"
    assert pd.read_csv(w / "sim" / "summary.csv")["stable"].all()
    rows = pd.read_csv(w / "plan" / "plan.csv")
    assert set(rows["hardware"]) == {GPU} and rows["replicas"].notna().all()

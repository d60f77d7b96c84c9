"""Recipe, followed by editing files: a GPU of a new architecture, as a real catalog member is written:
its sources in the catalog's "sources" table, its architecture's object in "architectures", and its
entry in "gpus" naming that architecture, all in costmodel/data/hardware.json. On a copy of the tree
so edited, the catalog's own tests pass (every GPU names a catalog architecture, every number has a
source) and every command takes it from there: a synthetic run timed on it is fitted, its roofline
profile simulated and planned, its memory model read."""

from __future__ import annotations

import json

import pandas as pd

from costmodel.hardware import architectures, catalog, template
from tests.toy import recipes

GPU = "toy-accel"
ARCH = "toyarch"
SOURCE = "toy_accel_datasheet"
SOURCES = (f'    "{SOURCE}": "Toy Accelerator 192GB datasheet, a toy (P)",',)
ARCHITECTURE = (
    f'    "{ARCH}": {{"compute_capability": "9.4", "precisions": ["bf16", "fp8"], "cudagraph_max_tokens": 512, "large_batch_defaults_min_gib": 70,',
    f'                "sources": {{"precisions": "{SOURCE}", "cudagraph_max_tokens": "vllm/config/vllm.py _set_cudagraph_sizes default", '
    '"large_batch_defaults_min_gib": "vllm/engine/arg_utils.py get_batch_defaults"}},',
)
ENTRY = (
    f'    "{GPU}": {{',
    '      "name": "Toy Accelerator 192GB",',
    f'      "architecture": "{ARCH}",',
    '      "nvml_names": ["Toy Accelerator"],',
    '      "memory_gb": 192, "memory_bandwidth_tbps": 5.3,',
    '      "tflops": {"bf16": 1307, "fp8": 2615},',
    '      "board_power_w": 750, "l2_mb": 256, "sms": 304,',
    '      "price_usd_per_gpu_hour": 3.10, "purchase_usd": 20000,',
    f'      "sources": {{"memory_gb": "{SOURCE}", "memory_bandwidth_tbps": "{SOURCE}", "tflops.bf16": "{SOURCE}", "tflops.fp8": "{SOURCE}", '
    f'"board_power_w": "{SOURCE}", "price_usd_per_gpu_hour": "{SOURCE}", "purchase_usd": "{SOURCE}"}}',
    '    },',
)
EDITS = (recipes.Edit("costmodel/data/hardware.json", SOURCES, after=r'^  "sources": \{$'),
         recipes.Edit("costmodel/data/hardware.json", ARCHITECTURE, after=r'^  "architectures": \{$'),
         recipes.Edit("costmodel/data/hardware.json", ENTRY, after=r'^  "gpus": \{$'))
# the catalog's own tests, run on the edited copy: what a real member must pass
CATALOG_TESTS = ("tests/test_hardware_architecture.py::test_every_catalog_gpu_names_a_catalog_architecture",
                 "tests/test_catalog_cli.py::test_every_catalog_number_has_a_source")
TRUTH_MS = {"prefill": {"const": 4.0, "roofline_ms": 1.4}, "decode_step": {"const": 6.0, "roofline_ms": 1.3}}
WORKLOAD = {"prompt_tokens": {"dist": "constant", "value": 256}, "output_tokens": {"dist": "constant", "value": 128}}


def test_the_entry_is_the_catalogs_and_the_templates_fields():
    entry = json.loads("{" + "\n".join(ENTRY).rstrip(",") + "}")[GPU]
    arch = json.loads("{" + "\n".join(ARCHITECTURE).rstrip(",") + "}")[ARCH]
    assert set(entry) <= set(template()["gpus"]["my-gpu"]) and set(arch) <= set(template()["gpus"]["my-gpu"]["architecture"]) | {"sources"}
    assert GPU not in catalog() and ARCH not in architectures()


def test_a_gpu_of_another_architecture_is_one_catalog_entry_and_every_command_takes_it(tmp_path):
    tree = recipes.Tree(tmp_path / "tree")
    assert tree.edit(EDITS) == recipes.recipe_edits("A GPU")
    tree.pytest(*CATALOG_TESTS)
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
    arch = fitted["hardware"]["architecture"]
    assert fitted["hardware"]["id"] == GPU and (arch if isinstance(arch, str) else arch["name"]) == ARCH and fitted["precision"] == "fp8"
    assert pd.read_csv(w / "sim" / "summary.csv")["stable"].all()
    rows = pd.read_csv(w / "plan" / "plan.csv")
    assert set(rows["hardware"]) == {GPU} and rows["replicas"].notna().all()

"""The GPU's architecture is data (hardware.json "architectures"): a GPU of another architecture is
one catalog entry, and the memory model's engine defaults and the precisions it runs follow it; no
GPU name decides anything in code."""

import json

import pytest

from costmodel.errors import UserError
from costmodel.hardware import architectures, catalog, get_hardware, resolve_local, template
from costmodel.memory import batch_defaults, replica_memory
from costmodel.modes import get_mode
from costmodel.precision import get_precision

# An A100-like GPU of another architecture, in one user catalog entry with its own architecture object.
AMPERE_80G = {"gpus": {"a100-sxm": {
    "name": "NVIDIA A100-SXM4-80GB", "nvml_names": ["NVIDIA A100-SXM4-80GB"], "memory_gb": 80, "memory_bandwidth_tbps": 2.04,
    "tflops": {"bf16": 312}, "board_power_w": 400, "price_usd_per_gpu_hour": 1.5,
    "architecture": {"name": "ampere-test", "compute_capability": "8.0", "precisions": ["bf16", "int4"], "cudagraph_max_tokens": 256,
                     "large_batch_defaults_min_gib": None}}}}


@pytest.fixture
def ampere(tmp_path):
    f = tmp_path / "a100.json"
    f.write_text(json.dumps(AMPERE_80G))
    return f


def test_every_catalog_gpu_names_a_catalog_architecture():
    archs = architectures()
    assert {g.arch.name for g in catalog().values()} <= set(archs) and not any(g.arch_assumed for g in catalog().values())
    assert catalog()["h100-sxm"].arch.name == "hopper" and catalog()["rtx-5090"].arch.name == "blackwell"


def test_memory_engine_defaults_and_precisions_follow_the_architecture(ampere):
    a100, h100 = get_hardware("a100-sxm", ampere), get_hardware("h100-sxm")
    assert a100.memory_gb == h100.memory_gb  # same memory: only the architecture differs
    assert batch_defaults(h100) == (8192, 1024) and batch_defaults(a100) == (2048, 256)  # vLLM keeps the small defaults
    mem = replica_memory(a100, get_mode("ar"), get_precision("bf16"))
    assert mem.limits.max_num_seqs == 256 and mem.limits.max_num_batched_tokens == 2048
    graphs_a100 = mem.term("graphs").bytes
    graphs_h100 = replica_memory(h100, get_mode("ar"), get_precision("bf16")).term("graphs").bytes
    assert graphs_a100 < graphs_h100  # 256-token capture (its architecture) vs 512
    with pytest.raises(UserError, match="cannot run precision 'fp8'"):
        a100.arch.check_precision("fp8", a100.id)


def test_a_user_gpu_keeps_its_architecture_through_a_profile_dict(ampere):
    a100 = get_hardware("a100-sxm", ampere)
    d = a100.to_dict()
    assert d["architecture"]["name"] == "ampere-test"
    assert get_hardware("h200").to_dict()["architecture"] == "hopper"  # a catalog architecture by name


def test_template_is_a_complete_entry(tmp_path, cli):
    code, out, err = cli("hardware", "--template")
    assert code == 0, err
    f = tmp_path / "mine.json"
    f.write_text(out)
    spec = get_hardware("my-gpu", f)
    assert spec.arch.name == "ada" and not spec.arch_assumed and set(spec.sources) >= {"memory_gb", "tflops.bf16"}
    assert json.loads(out) == template()


def test_an_unknown_local_gpu_names_the_template():
    with pytest.raises(UserError) as e:
        resolve_local("NVIDIA B300 SXM6")
    assert "costmodel hardware --template" in str(e.value) and "\n" not in str(e.value)
    assert resolve_local("NVIDIA H100 80GB HBM3").id == "h100-sxm"


def test_an_entry_without_architecture_is_assumed_and_says_so(tmp_path):
    f = tmp_path / "old.json"
    f.write_text(json.dumps({"gpus": {"l40s": {"name": "NVIDIA L40S", "memory_gb": 48, "memory_bandwidth_tbps": 0.864,
                                                "tflops": {"bf16": 362}, "board_power_w": 350, "price_usd_per_gpu_hour": 1.0}}}))
    l40s = get_hardware("l40s", f)
    assert l40s.arch_assumed
    mem = replica_memory(l40s, get_mode("ar"), get_precision("int4"))
    assert "architecture hopper assumed" in mem.limits.source["max_num_seqs"]


def test_no_gpu_name_decides_anything_in_the_code():
    """GPU names live in the catalog: the memory model and the op-table code carry none (docstrings may)."""
    import ast
    import pathlib
    import re

    root = pathlib.Path(__file__).parent.parent
    files = [root / "costmodel" / "memory.py", *sorted((root / "measure" / "ops").glob("*.py")), root / "measure" / "fit" / "ops_runs.py"]
    for p in files:
        tree = ast.parse(p.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        names = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
                 and re.search(r"a100|h100|h200|5090|b200", n.value, re.I)]
        assert not names, (p.name, names)

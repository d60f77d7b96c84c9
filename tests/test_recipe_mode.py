"""Recipe, followed by editing files: a fourth serving mode with its own pass kind, profile part and
per-request state ("burst", tests/toy/burst/) is the files and lines docs/architecture.md names: the
mode's module and its registration, its engine's module and its registration, its pass kind's
entry, and docs/metrics.md regenerated (its description enters the data dictionary; the tree's own
test of that file passes on the copy). On a copy of the tree so edited, `fit`, `simulate` and `plan`
run it, and a profile without it (the shipped ones) still runs as before: the default modes are the
ones a profile carries."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from tests.toy import recipes
from tests.toy.burst import engine as burst_engine
from tests.toy.burst.mode import BurstMode

MODE = BurstMode.name
KIND = BurstMode.group_kinds[0]
EDITS = (
    recipes.new_file(f"costmodel/modes/{MODE}.py", recipes.TOY / "burst" / "mode.py"),
    recipes.Edit("costmodel/modes/__init__.py", (f"from costmodel.modes.{MODE} import BurstMode  # noqa: E402",),
                 after=r"^from costmodel\.modes\.\w+ import \w+  # noqa"),
    recipes.Edit("costmodel/modes/__init__.py", ("register(BurstMode())",), after=r"^register\("),
    recipes.new_file(f"simulate/engines/{MODE}.py", recipes.TOY / "burst" / "engine.py"),
    recipes.Edit("simulate/engines/__init__.py", (f"from costmodel.modes.{MODE} import BurstMode  # noqa: E402",
                                                  f"from simulate.engines.{MODE} import BurstReplica  # noqa: E402"),
                 after=r"^from simulate\.engines\.\w+ import"),
    recipes.Edit("simulate/engines/__init__.py", ("register(BurstMode.name, BurstReplica)",), after=r"^register\("),
    recipes.Edit("costmodel/roofline.py", (f'    PassKind("{KIND}", "target", True, "all", "causal", doc="two query tokens per sequence; the second kept while bursting",',
                                           '             sampler="token", query_tokens="one"),'), before=r"^\]\)$"),
)
# a workload with its own output lengths: a profile without DiffusionGemma's commit statistics has no regimes to draw them from
WORKLOAD = {"prompt_tokens": {"dist": "constant", "value": 256}, "output_tokens": {"dist": "constant", "value": 128}}
TRUTH_MS = {"prefill": {"const": 5.0, "roofline_ms": 1.5}, KIND: {"const": 8.0, "roofline_ms": 1.5}}  # the synthetic run's pass costs


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    t = recipes.Tree(tmp_path_factory.mktemp("recipe-mode") / "tree")
    t.changed = t.edit(EDITS)
    t.changed["docs/metrics.md"] = t.regenerate("docs/metrics.md")  # the recipe's last step
    return t


def test_the_mode_recipe_is_the_files_and_lines_the_doc_names(tree):
    assert tree.changed == recipes.recipe_edits("A serving mode", mode=MODE)
    tree.pytest("tests/test_schemas.py::test_docs_metrics_md_is_generated_from_the_schemas")  # as a real member must
    # the mode module is vocabulary: it imports no stage (its engine is the simulator's)
    assert not recipes.imported_packages(recipes.TOY / "burst" / "mode.py") & {"measure", "simulate", "reports"}


def test_fit_simulate_and_plan_run_it_and_the_shipped_profiles_keep_their_modes(tree):
    w = tree.work
    (w / "wl.json").write_text(json.dumps(WORKLOAD))
    out = tree.session(
        ("fit", "burst-run", "-o", "burst.json"),  # a synthetic run of the new mode's passes
        ("simulate", "--profile", "burst.json", "--workload", "wl.json", "--qps", "1", "--duration", "20", "--jobs", "1", "-o", "sim"),
        ("profile", "roofline", "--hardware", "h200", "-o", "roof.json"),  # every mode; the new part at its prior
        ("plan", "--profile", "roof.json", "--hardware", "h200", "--qps", "1", "--duration", "20", "--jobs", "1", "--refine-crossover", "0",
         "-o", "plan"),
        ("simulate", "--hardware", "h200", "--qps", "1", "--duration", "10", "--jobs", "1", "-o", "shipped"),
        setup=f"from measure.fit.synthetic_runs import write_synthetic_run; write_synthetic_run('burst-run', {MODE!r}, {TRUTH_MS!r})")
    assert "burst: the published prior" in out  # fit: its part where no run measures it
    prof = json.loads((w / "burst.json").read_text())
    assert list(prof["modes"]) == [MODE] and prof["burst_steps"]["dist"]["values"] == [0.0, 100.0]
    assert prof["modes"][MODE]["pass_models"][KIND]["coef"]["const"] == pytest.approx(8.0, rel=0.1)
    # simulate without --mode runs the modes the profile carries: the new mode alone
    s = pd.read_csv(w / "sim" / "summary.csv")
    assert list(s["mode"]) == [MODE] and s["stable"].all() and f"batch_{KIND}_seqs" in s.columns
    rows = pd.read_csv(w / "plan" / "plan.csv")
    assert MODE in set(rows["mode"]) and rows["replicas"].notna().all()
    # a profile written before the mode existed (the shipped H200's) runs its own modes
    assert MODE not in set(pd.read_csv(w / "shipped" / "summary.csv")["mode"])


def test_its_engine_keeps_each_requests_burst_in_request_state():
    from simulate.request import Request

    rep = burst_engine.BurstReplica.__new__(burst_engine.BurstReplica)
    rep.plan = SimpleNamespace(burst=[3])
    r = Request(0, 0.0, 10, 20)
    assert rep._steps_for(r, 20) == 3 + 14  # 3 steps of two tokens, then one a step
    rep._advance(r, 2)
    assert r.state == 2 and rep._tokens_after(r, 3) == 2 + 2  # one burst step left

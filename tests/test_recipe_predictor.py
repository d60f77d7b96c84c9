"""Recipe, followed by editing files: a step-cost predictor with its fitter. The toy "flat" model
prices a pass at one constant (tests/toy/flat_predictor.py, what costmodel/stepcost/flat.py would
be), and its fitter writes that constant from timed passes (tests/toy/flat_fitter.py, what
measure/fit/flat.py would be); each has one registration line. On a copy of the tree so edited,
`costmodel fit --pass-model flat` fits a profile of flat models that `simulate` and `plan` price."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.toy import recipes
from tests.toy.flat_fitter import FlatFitter
from tests.toy.flat_predictor import FlatPredictor

NAME = FlatPredictor.name
EDITS = (
    recipes.new_file(f"costmodel/stepcost/{NAME}.py", recipes.TOY / "flat_predictor.py"),
    recipes.Edit("costmodel/stepcost/__init__.py", (f"from costmodel.stepcost.{NAME} import FlatPredictor",),
                 after=r"^from costmodel\.stepcost\.\w+ import \w+$"),
    recipes.Edit("costmodel/stepcost/__init__.py", ("register(FlatPredictor())",), after=r"^register\("),
    recipes.new_file(f"measure/fit/{NAME}.py", recipes.TOY / "flat_fitter.py"),
    recipes.Edit("measure/fit/fitters.py", (f"from measure.fit.{NAME} import FlatFitter",), after=r"^from measure\.fit\.\w+ import"),
    recipes.Edit("measure/fit/fitters.py", ("register(FlatFitter())",), after=r"^register\("),
)
# synthetic runs of two modes, each pass kind timed at a constant (ms; never below its roofline): flat, as the toy models it
TRUTH_MS = {"diffusion": {k: {"const": 40.0} for k in ("encoder_prefill", "denoise_step", "encoder_commit")},
            "ar": {"prefill": {"const": 40.0}, "decode_step": {"const": 4.0}}}
# AR decode timed at batches whose roofline stays below its 4 ms (seqs, tokens per sequence, context)
GRID = {"ar": {"prefill": [(s, 256, 0) for s in (1, 2, 4)], "decode_step": [(s, 1, c) for s in (1, 2, 4, 8) for c in (512, 2048)]}}
SETUP = "from measure.fit.synthetic_runs import write_synthetic_run\n" + "\n".join(
    f"write_synthetic_run('{mode}-run', {mode!r}, {coef!r}, grid={GRID.get(mode)!r})" for mode, coef in TRUTH_MS.items())


def test_the_toys_are_a_predictor_and_a_fitter_of_one_model_type():
    assert FlatFitter.name == FlatPredictor.name


def test_a_predictor_and_its_fitter_are_the_files_the_doc_names_and_fit_simulate_plan_use_them(tmp_path):
    tree = recipes.Tree(tmp_path / "tree")
    assert tree.edit(EDITS) == recipes.recipe_edits("A step-cost predictor with its fitter", predictor=NAME)
    tree.session(
        ("fit", "diffusion-run", "ar-run", "--pass-model", NAME, "-o", "flat.json"),
        ("simulate", "--profile", "flat.json", "--qps", "1", "--duration", "20", "--jobs", "1", "-o", "sim"),
        ("plan", "--profile", "flat.json", "--hardware", "h200", "--qps", "1", "--duration", "20", "--jobs", "1", "--refine-crossover", "0",
         "-o", "plan"),
        setup=SETUP)
    prof = json.loads((tree.work / "flat.json").read_text())
    models = [pm for m in prof["modes"].values() for pm in m["pass_models"].values()]
    assert {pm["model_type"] for pm in models} == {NAME} and all(set(pm["coef"]) == {"const"} for pm in models)
    assert prof["modes"]["ar"]["pass_models"]["decode_step"]["coef"]["const"] == pytest.approx(4.0, rel=0.05)
    s = pd.read_csv(tree.work / "sim" / "summary.csv")
    assert list(s["mode"]) == list(prof["modes"]) and s["stable"].all()
    assert pd.read_csv(tree.work / "plan" / "plan.csv")["replicas"].notna().all()

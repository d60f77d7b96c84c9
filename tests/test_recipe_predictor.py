"""Recipe, followed by editing files: a step-cost predictor with its fitter, as hard as a real member: the
toy "power" model has a non-linear term and coefficients of its own, not the linear models' features
(const + scale * tokens ** exponent: tests/toy/power_predictor.py, what costmodel/stepcost/power.py would
be), and its fitter fits them by non-linear least squares (tests/toy/power_fitter.py, what
measure/fit/power.py would be); each has one registration line, and nothing else is edited (the profile
schema takes a predictor's coefficient names from it). On a copy of the tree so edited, `costmodel fit
--pass-model power` fits a profile of power models that `simulate` and `plan` price."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.toy import recipes
from tests.toy.power_fitter import PowerFitter
from tests.toy.power_predictor import COEFFICIENTS, PowerPredictor

NAME = PowerPredictor.name
EDITS = (
    recipes.new_file(f"costmodel/stepcost/{NAME}.py", recipes.TOY / "power_predictor.py"),
    recipes.Edit("costmodel/stepcost/__init__.py", (f"from costmodel.stepcost.{NAME} import PowerPredictor",),
                 after=r"^from costmodel\.stepcost\.\w+ import \w+$"),
    recipes.Edit("costmodel/stepcost/__init__.py", ("register(PowerPredictor())",), after=r"^register\("),
    recipes.new_file(f"measure/fit/{NAME}.py", recipes.TOY / "power_fitter.py"),
    recipes.Edit("measure/fit/fitters.py", (f"from measure.fit.{NAME} import PowerFitter",), after=r"^from measure\.fit\.\w+ import"),
    recipes.Edit("measure/fit/fitters.py", ("register(PowerFitter())",), after=r"^register\("),
)
# synthetic runs of two modes (ms; never below the roofline): AR's prefill grows with its tokens (40 ms + 0.02 ms a token),
# the rest is flat; a power law of tokens fits both (exponent ~1 for the prefill)
TRUTH_MS = {"diffusion": {k: {"const": 40.0} for k in ("encoder_prefill", "denoise_step", "encoder_commit")},
            "ar": {"prefill": {"const": 40.0, "tokens": 0.02}, "decode_step": {"const": 4.0}}}
# AR timed at batches whose roofline stays below the truth (seqs, tokens per sequence, context)
GRID = {"ar": {"prefill": [(s, 256, 0) for s in (1, 2, 3, 4, 6, 8)], "decode_step": [(s, 1, c) for s in (1, 2, 4, 8) for c in (512, 2048)]}}
SETUP = "from measure.fit.synthetic_runs import write_synthetic_run\n" + "\n".join(
    f"write_synthetic_run('{mode}-run', {mode!r}, {coef!r}, grid={GRID.get(mode)!r})" for mode, coef in TRUTH_MS.items())


def test_the_toys_are_a_predictor_and_a_fitter_of_one_model_type():
    assert PowerFitter.name == PowerPredictor.name


def test_a_predictor_and_its_fitter_are_the_files_the_doc_names_and_fit_simulate_plan_use_them(tmp_path):
    tree = recipes.Tree(tmp_path / "tree")
    assert tree.edit(EDITS) == recipes.recipe_edits("A step-cost predictor with its fitter", predictor=NAME)
    tree.session(
        ("fit", "diffusion-run", "ar-run", "--pass-model", NAME, "-o", "power.json"),
        ("simulate", "--profile", "power.json", "--qps", "1", "--duration", "20", "--jobs", "1", "-o", "sim"),
        ("plan", "--profile", "power.json", "--hardware", "h200", "--qps", "1", "--duration", "20", "--jobs", "1", "--refine-crossover", "0",
         "-o", "plan"),
        setup=SETUP)
    prof = json.loads((tree.work / "power.json").read_text())
    models = [pm for m in prof["modes"].values() for pm in m["pass_models"].values()]
    assert {pm["model_type"] for pm in models} == {NAME} and all(set(pm["coef"]) == set(COEFFICIENTS) for pm in models)
    prefill = prof["modes"]["ar"]["pass_models"]["prefill"]["coef"]
    at = {t: prefill["const"] + prefill["scale"] * t ** prefill["exponent"] for t in (256, 2048)}
    assert at[256] == pytest.approx(40 + 0.02 * 256, rel=0.05) and at[2048] == pytest.approx(40 + 0.02 * 2048, rel=0.05)
    s = pd.read_csv(tree.work / "sim" / "summary.csv")
    assert list(s["mode"]) == list(prof["modes"]) and s["stable"].all()
    assert pd.read_csv(tree.work / "plan" / "plan.csv")["replicas"].notna().all()

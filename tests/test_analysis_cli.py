"""`costmodel analyze` end to end on synthetic run directories, and one-line errors on bad input."""

import re

import pandas as pd
import pytest

from measure.analyze.report import TABLES
from measure.analyze.synthetic_commits import RegimeSpec, make_tables, write_run
from costmodel.schemas.rundir import RunManifest, RunWriter

SPECS = [RegimeSpec("R1", "noisy", (60, 120), tokens_per_call=10, renoise_per_canvas=1, pad_calls=4, accuracy=0.6, label_noise=0.2),
         RegimeSpec("R4", "noisy", (15, 40), tokens_per_call=4, jitter_positions=6, accuracy=0.8, label_noise=0.2)]


@pytest.fixture(scope="module")
def tables():
    return make_tables(SPECS, prompts=6, seeds=2, seed=0)


def synthetic_run(path, tables, **kw):
    commits, gens = tables
    return write_run(path, commits, gens, **kw)


def test_end_to_end_on_a_random_weights_run(tmp_path, tables, cli):
    run = synthetic_run(tmp_path / "run", tables, commit_source="random-weights", weights="random")
    out = tmp_path / "out"
    code, stdout, stderr = cli("analyze", str(run), "-o", str(out), "--bootstrap", "100", "--seed", "3")
    assert code == 0, stderr
    assert "random weights" in stdout and "R1: tau_b content" in stdout
    for name in TABLES:
        csv, parquet = pd.read_csv(out / f"{name}.csv"), pd.read_parquet(out / f"{name}.parquet")
        assert csv.shape == parquet.shape and list(csv.columns) == list(parquet.columns)
    regimes = pd.read_parquet(out / "regimes.parquet")
    assert sorted(regimes.regime) == ["R1", "R4"] and (regimes.generations == 12).all()
    assert sorted(pd.read_parquet(out / "bin_sweep.parquet").bin_positions.unique()) == [1, 4, 8, 16, 32, 64]
    md = (out / "summary.md").read_text()
    head = md.split("## ")[0]  # everything before the first section: the plain statement is at the top
    assert "WARNING" in head and "random weights" in head and "cannot describe DiffusionGemma's commit behaviour" in head
    assert "What they can show" in head and "hook" in head
    assert "bootstrap: 100 resamples, seed 3" in md and "Split analysed: all" in md
    html = (out / "summary.html").read_text()
    assert html.count("<svg") == 1 and "WARNING" in html.split("<h2>")[0]
    # self-contained: every reference points inside the document, nothing is fetched
    refs = re.findall(r'(?:href|src)\s*=\s*"([^"]*)"', html)
    assert refs and all(r.startswith("#") for r in refs)
    assert "<img" not in html and "<link" not in html and "<script" not in html and "@import" not in html
    assert (out / "bin_sweep.svg").read_text().startswith("<svg")


def test_real_weights_run_has_no_warning_and_split_is_applied(tmp_path, tables, cli):
    run = synthetic_run(tmp_path / "run", tables, commit_source="model", weights="checkpoint")
    code, _, stderr = cli("analyze", str(run), "-o", str(tmp_path / "out"), "--bootstrap", "50", "--split", "confirmatory")
    assert code == 0, stderr
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "WARNING." not in md.split("## ")[0] and "Split analysed: confirmatory" in md
    assert set(pd.read_parquet(tmp_path / "out" / "canvases.parquet").split) == {"confirmatory"}


def test_tables_given_as_files(tmp_path, tables, cli):
    commits, gens = tables
    commits.to_parquet(tmp_path / "c.parquet")
    gens.to_parquet(tmp_path / "g.parquet")
    code, stdout, stderr = cli("analyze", "--commits", str(tmp_path / "c.parquet"), "--generations", str(tmp_path / "g.parquet"),
                               "-o", str(tmp_path / "out"), "--bootstrap", "50")
    assert code == 0, stderr
    assert "Provenance unknown" in (tmp_path / "out" / "summary.md").read_text().split("## ")[0]


def test_bad_inputs_exit_2_with_one_line(tmp_path, tables, cli):
    run = synthetic_run(tmp_path / "run", tables)
    with RunWriter(tmp_path / "nocommits", RunManifest(run_id="x", kind="gpu", mode="ar", model="m", weights="random", commit_source="none")) as w:
        w.add("passes", {"pass_kind": "decode_step", "seqs": 1, "tokens_per_seq": 1, "context_tokens": 8, "gpu_ms": 1.0, "wall_ms": 1.0})
        w.finish_unit("u")
    (tmp_path / "plain").mkdir()
    (tmp_path / "notparquet.parquet").write_text("a,b\n1,2\n")
    out = str(tmp_path / "out")
    cases = [
        (["analyze", str(tmp_path / "missing"), "-o", out], "does not exist"),
        (["analyze", str(tmp_path / "plain"), "-o", out], "not a run directory"),
        (["analyze", str(tmp_path / "nocommits"), "-o", out], "no commits table"),
        (["analyze", str(run), "-o", out, "--split", "train"], "--split 'train'"),
        (["analyze", str(run), "-o", out, "--bootstrap", "0"], "below 1"),
        (["analyze", str(run), "-o", out, "--commits", str(tmp_path / "notparquet.parquet")], "not both"),
        (["analyze", "-o", out], "no input"),
        (["analyze", "-o", out, "--commits", str(tmp_path / "notparquet.parquet"), "--generations", str(tmp_path / "notparquet.parquet")], "not a readable parquet"),
        (["analyze", "-o", out, "--commits", str(tmp_path / "nope.parquet"), "--generations", str(tmp_path / "nope.parquet")], "is not a file"),
    ]
    for args, needle in cases:
        code, stdout, stderr = cli(*args)
        assert code == 2, (args, stderr)
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], (args, stderr)
    assert not (tmp_path / "out").exists()

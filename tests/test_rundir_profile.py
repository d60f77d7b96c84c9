"""Run directories survive interruption and resume; profiles validate and round-trip."""

import json

import pytest

from costmodel.baseline_profile import roofline_profile
from costmodel.errors import UserError
from costmodel.schemas.profile import Profile
from costmodel.roofline import Segment
from costmodel.schemas.rundir import RunManifest, RunWriter, load_run


def manifest(**kw):
    base = dict(run_id="t", kind="gpu", mode="diffusion", model="tiny-diffusiongemma", weights="random", commit_source="random-weights",
                planned_units=["a", "b", "c"])
    base.update(kw)
    return RunManifest(**base)


def pass_row(ms):
    return {"pass_kind": "denoise_step", "seqs": 1, "tokens_per_seq": 32, "context_tokens": 8, "gpu_ms": ms, "wall_ms": ms}


def test_interrupted_run_is_readable_and_resumes(tmp_path):
    d = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        with RunWriter(d, manifest()) as w:
            w.add("passes", pass_row(1.0))
            w.finish_unit("a")
            w.add("passes", pass_row(2.0))  # unit b never finishes
            raise KeyboardInterrupt
    run = load_run(d)
    assert run.manifest.status == "incomplete" and run.manifest.done_units == ["a"]
    assert list(run.table("passes").gpu_ms) == [1.0]
    with pytest.raises(UserError):
        RunWriter(d, manifest())  # refuses to overwrite without resume
    with RunWriter(d, manifest(), resume=True) as w:
        for u in ["a", "b", "c"]:
            if w.is_done(u):
                continue
            w.add("passes", pass_row({"b": 2.0, "c": 3.0}[u]))
            w.finish_unit(u)
    run = load_run(d)
    assert run.manifest.status == "complete"
    assert sorted(run.table("passes").gpu_ms) == [1.0, 2.0, 3.0]


def test_missing_columns_and_bad_manifest(tmp_path):
    with pytest.raises(ValueError):
        with RunWriter(tmp_path / "r", manifest()) as w:
            w.add("passes", {"pass_kind": "x"})
            w.finish_unit("a")
    with pytest.raises(UserError, match="does not exist"):
        load_run(tmp_path / "nope")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("{}")
    with pytest.raises(UserError, match="schema_version"):
        load_run(tmp_path / "bad")


def test_profile_round_trip_and_prediction(tmp_path):
    p = roofline_profile("h200", "bf16", 0.5)
    path = p.save(tmp_path / "p.json")
    q = Profile.load(path)
    seg = (Segment("denoise_step", 1, 256, 1024),)
    assert q.pass_ms("diffusion", seg) == pytest.approx(2 * q.roofline("diffusion").pass_cost(seg).roofline_ms)
    assert q.mtp_acceptance.mean_acceptance_length == pytest.approx(1 + 0.8 + 0.8**2 + 0.8**3 + 0.8**4)


def test_malformed_profiles_are_one_line_errors(tmp_path):
    d = roofline_profile().to_dict()
    for mutate, needle in [
        (lambda x: x.pop("modes"), "not a valid costmodel profile"),
        (lambda x: x.__setitem__("schema_version", 99), "schema_version"),
        (lambda x: x["modes"]["ar"]["pass_models"].pop("decode_step"), "lacks a cost model"),
        (lambda x: x["hardware"].__setitem__("memory_gb", -1), "memory_gb -1 GB is below its bound"),
        (lambda x: x["commit_stats"]["R1"]["steps_per_canvas"].__setitem__("probs", [0.5]), "distribution"),
        (lambda x: x["modes"]["diffusion"]["pass_models"]["denoise_step"]["coef"].__setitem__("bogus", 1.0), "unknown features"),
    ]:
        bad = json.loads(json.dumps(d))
        mutate(bad)
        f = tmp_path / "bad.json"
        f.write_text(json.dumps(bad))
        with pytest.raises(UserError, match=needle):
            Profile.load(f)


def test_measure_refuses_endpoint_options_without_endpoint(cli, tmp_path):
    code, _, err = cli("measure", "--model", "tiny-gemma4", "--random-weights", "--qps", "2", "-o", str(tmp_path / "r"))
    assert code == 2 and "--qps" in err and "--endpoint" in err
    assert not (tmp_path / "r").exists()


def test_git_commit_is_a_hash_or_none(tmp_path):
    from costmodel.schemas.rundir import git_commit

    assert git_commit(tmp_path) is None  # not a repository
    sha = git_commit()
    assert sha is None or len(sha) == 40

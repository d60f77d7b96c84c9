"""Output directories are transactions (costmodel/outputset.py): a reader sees the old complete set
or the new one, a second writer is refused, a full disk keeps the old set and says where it is full."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from costmodel import atomic, outputset
from costmodel.errors import DiskFull, UserError
from costmodel.schemas.results import read_simulation

SIM = ["simulate", "--mode", "ar", "--requests", "20", "--jobs", "1"]


def _write_set(out: Path, files: dict[str, str], command: str = "simulate") -> list[Path]:
    with outputset.publishing(out, command) as stage:
        paths = [atomic.write_text(stage / name, text) for name, text in files.items()]
    return outputset.published(paths, stage, out)


def _siblings(d: Path) -> list[str]:
    return sorted(p.name for p in d.parent.iterdir() if p.name.startswith("."))


def test_a_new_set_replaces_the_old_one_whole_and_keeps_foreign_files(tmp_path):
    out = tmp_path / "sim"
    _write_set(out, {"summary.csv": "a\n1\n", "requests_ar_qps1_r1.parquet": "x", "summary.json": "{}"})
    (out / "notes.txt").write_text("mine")
    paths = _write_set(out, {"summary.csv": "a\n2\n", "summary.json": "{}"})
    assert paths == [out / "summary.csv", out / "summary.json"]
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", outputset.MANIFEST, "summary.csv", "summary.json"]  # no stale frame
    assert outputset.verify(out) is True
    assert _siblings(out) == []  # no lock, staging or old folder left behind


def test_outputs_without_their_manifest_are_neither_read_nor_replaced(tmp_path):
    out = tmp_path / "plan"
    out.mkdir()
    for name in ("plan.csv", "plan.json", "README"):
        (out / name).write_text(name)
    with pytest.raises(UserError, match="holds plan outputs .* but no outputs.manifest.json: they cannot be checked"):
        outputset.verify(out)  # an edited plan.json would otherwise be read as written
    with pytest.raises(UserError, match="a set that cannot be checked is not replaced"):
        _write_set(out, {"plan.json": "{}"}, "plan")
    (out / "plan.csv").unlink(), (out / "plan.json").unlink()
    assert outputset.verify(out) is False  # no outputs, no manifest: nothing to check
    _write_set(out, {"plan.json": "{}"}, "plan")
    assert sorted(p.name for p in out.iterdir()) == ["README", outputset.MANIFEST, "plan.json"]


def test_a_set_of_another_command_is_not_written_over(tmp_path):
    out = tmp_path / "sweep"
    _write_set(out, {"results.csv": "a\n1\n"}, "sweep")
    with pytest.raises(UserError, match="holds a sweep output set; a plan set written there would leave its files beside its own"):
        _write_set(out, {"plan.json": "{}"}, "plan")


def test_a_reader_refuses_a_set_that_does_not_match_its_manifest(tmp_path):
    out = tmp_path / "sim"
    _write_set(out, {"summary.csv": "a\n1\n"})
    (out / "summary.csv").write_text("a\n3\n")  # same size, other bytes
    with pytest.raises(UserError, match="changed since it was written"):
        outputset.verify(out)
    (out / "summary.csv").unlink()
    with pytest.raises(UserError, match="summary.csv is missing"):
        outputset.verify(out)
    _write_set(out, {"summary.csv": "a\n1\n"})
    (out / "requests_ar_qps9_r1.parquet").write_text("stale")  # a file of the set's kind the manifest does not list
    with pytest.raises(UserError, match="beside its output set"):
        read_simulation(out)


def test_a_failed_write_publishes_nothing_and_keeps_the_old_set(tmp_path):
    out = tmp_path / "sim"
    _write_set(out, {"summary.csv": "old\n"})
    with pytest.raises(RuntimeError):
        with outputset.publishing(out, "simulate") as stage:
            atomic.write_text(stage / "summary.csv", "new\n")
            raise RuntimeError("simulated crash after one file")
    assert (out / "summary.csv").read_text() == "old\n" and outputset.verify(out)
    assert _siblings(out) == []


def test_disk_full_names_the_filesystem_and_keeps_the_old_set(tmp_path, monkeypatch):
    out = tmp_path / "sim"
    _write_set(out, {"summary.csv": "old\n", "summary.json": "{}"})
    real_fsync = os.fsync
    calls = [0]

    def fsync_fills_the_disk(fd):
        calls[0] += 1
        if calls[0] == 2:  # the second file of the new set
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_fills_the_disk)
    with pytest.raises(DiskFull) as e:
        _write_set(out, {"summary.csv": "new\n", "summary.json": "{\"new\": 1}"})
    monkeypatch.undo()
    msg = str(e.value)
    assert "no space left on the filesystem mounted at" in msg and "free of" in msg and "keeps its previous outputs" in msg
    assert ".costmodel-staging-" not in msg  # names the output directory, not the staging folder
    assert (out / "summary.csv").read_text() == "old\n" and outputset.verify(out)
    assert _siblings(out) == []


def test_quota_exceeded_as_pyarrow_words_it_is_a_full_disk_too(tmp_path):
    err = OSError("Disk quota exceeded")  # no errno, as pyarrow raises it
    assert atomic.disk_full_errno(err) == errno.EDQUOT
    assert "disk quota exceeded on the filesystem" in str(atomic.os_failure(tmp_path / "x", err))


def _hold_lock(path, ready, release):
    outputset.claim(path, "simulate")
    ready.set()
    release.wait(10)
    outputset.release_all()


def test_a_second_writer_of_one_directory_is_refused_in_one_line(tmp_path, cli):
    out = tmp_path / "sim"
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(out), ready, release))
    holder.start()
    try:
        assert ready.wait(10)
        code, _, err = cli(*SIM, "--qps", "1", "-o", str(out))
        assert code == 2 and err.count("\n") == 1
        assert f"is being written by another costmodel process (pid {holder.pid}, `costmodel simulate`" in err
    finally:
        release.set()
        holder.join(10)
    code, _, err = cli(*SIM, "--qps", "1", "-o", str(out))  # the lock went with its holder
    assert code == 0, err
    assert outputset.verify(out) and _siblings(out) == []


def test_a_killed_writer_leaves_nothing_that_blocks_the_next(tmp_path):
    out = tmp_path / "sim"
    stale = tmp_path / f".sim{outputset.STAGING_MARK}99999-abcdef"
    stale.mkdir()
    (stale / "summary.csv").write_text("half")
    (tmp_path / f".sim{outputset.LOCK_SUFFIX}").write_text('{"pid": 99999}')  # a lock file with no flock behind it
    _write_set(out, {"summary.csv": "a\n"})
    assert not stale.exists() and _siblings(out) == []


def test_the_working_directory_is_never_replaced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="is the working directory"):
        outputset.claim(".", "simulate")
    with pytest.raises(UserError, match="is the working directory"):
        outputset.claim(str(tmp_path.parent), "plan")


def test_a_report_lands_with_its_dictionaries(tmp_path, cli):
    sim = tmp_path / "sim"
    assert cli(*SIM, "--qps", "1", "-o", str(sim))[0] == 0
    code, out, err = cli("report", str(sim), "-o", str(tmp_path / "r.csv"))
    assert code == 0, err
    assert {"r.csv", "r.full.csv", "r.assumptions.csv", "r.dictionary.csv", "r.dictionary.md"} <= {p.name for p in tmp_path.iterdir()}
    assert _siblings(sim) == []


def _small_tmpfs(where: Path, size_kib: int) -> bool:
    """Mount a tmpfs of `size_kib` at `where` when this process may (root in a container); else False."""
    where.mkdir()
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)], capture_output=True).returncode == 0


def test_a_full_filesystem_keeps_the_old_simulation_and_every_reader_sees_one_set(tmp_path, cli, monkeypatch):
    """simulate over an earlier run on a filesystem too small for both: exit 2, the old set intact
    (a real tmpfs where the test may mount one, else ENOSPC injected into every write)."""
    fs = tmp_path / "small"
    probe = tmp_path / "probe"  # a set's size as the shipped default profile writes it (summary.json embeds the profile)
    assert cli(*SIM, "--qps", "1", "-o", str(probe))[0] == 0
    one_set = sum(p.stat().st_size + 4096 for p in probe.iterdir())  # a page of slack per file
    mounted = _small_tmpfs(fs, one_set * 3 // 2 // 1024)  # the first set fits, a second beside it does not
    try:
        out = fs / "sim"
        assert cli(*SIM, "--qps", "1", "-o", str(out))[0] == 0
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        if not mounted:
            def full(*a, **k):
                raise OSError(errno.ENOSPC, "No space left on device")
            monkeypatch.setattr(pd.DataFrame, "to_csv", full)
        code, _, err = cli(*SIM, "--qps", "1,2", "-o", str(out))
        monkeypatch.undo()
        assert code == 2 and "no space left on the filesystem mounted at" in err and err.count("\n") == 1, err
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        assert read_simulation(out).points["qps"].tolist() == [1.0]
        assert cli("report", str(out), "-o", str(tmp_path / "r.csv"))[0] == 0
        assert _siblings(out) == []
    finally:
        if mounted:
            subprocess.run(["umount", str(fs)], check=False)


def test_sweep_resume_keeps_points_and_refuses_a_damaged_table(tmp_path, cli):
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"kind": "simulate", "base": {"mode": "ar", "n_requests": 20}, "grid": {"qps": [1, 2]}}))
    out = tmp_path / "sw"
    assert cli("sweep", str(spec), "--jobs", "1", "-o", str(out))[0] == 0
    assert len(list((out / "points").iterdir())) == 2 and outputset.verify(out)
    code, stdout, err = cli("sweep", str(spec), "--jobs", "1", "-o", str(out))
    assert code == 0 and "0 run, 2 already done" in stdout, err
    assert len(list((out / "points").iterdir())) == 2  # carried into the new set
    (out / "results.csv").write_text("tampered\n")
    code, _, err = cli("sweep", str(spec), "--jobs", "1", "-o", str(out))
    assert code == 2 and "does not match its manifest" in err


def _resume_in_child(path, q):
    from costmodel.schemas.rundir import RunManifest, RunWriter

    try:
        RunWriter(path, RunManifest(run_id="x", kind="gpu", mode="ar", model="m", weights="random", commit_source="none"), resume=True)
        q.put("opened")
    except UserError as e:
        q.put(str(e))


def test_a_run_directory_has_one_writer_at_a_time(tmp_path):
    """measure writes a run unit by unit (no swap); its lock still refuses a second `--resume` at once."""
    from costmodel.schemas.rundir import RunManifest, RunWriter

    man = RunManifest(run_id="x", kind="gpu", mode="ar", model="m", weights="random", commit_source="none")
    ctx = multiprocessing.get_context("fork")
    with RunWriter(tmp_path / "run", man) as w:
        w.add("passes", {"pass_kind": "decode_step", "seqs": 1, "tokens_per_seq": 1, "context_tokens": 8, "gpu_ms": 1.0, "wall_ms": 1.0})
        w.finish_unit("u1")
        q = ctx.Queue()
        p = ctx.Process(target=_resume_in_child, args=(str(tmp_path / "run"), q))
        p.start()
        assert "is being written by another costmodel process" in q.get(timeout=30)
        p.join(10)
    assert _siblings(tmp_path / "run") == []  # released with the block


def test_an_old_set_stranded_between_two_renames_comes_back(tmp_path):
    """On a filesystem without RENAME_EXCHANGE a writer killed between its two renames leaves the
    old set under a hidden name and no directory: the next writer puts it back before publishing."""
    out = tmp_path / "sim"
    _write_set(out, {"summary.csv": "old\n"})
    (out / "notes.txt").write_text("mine")
    out.rename(tmp_path / f".sim{outputset.OLD_MARK}99999-abcdef")
    _write_set(out, {"summary.csv": "new\n"})
    assert (out / "summary.csv").read_text() == "new\n" and (out / "notes.txt").read_text() == "mine"  # its other files carried over
    assert _siblings(out) == []

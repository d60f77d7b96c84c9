"""The plan's replications on an AffinityPool: each kind of job stays on its home worker (its caches
stay warm there), an idle worker takes another's queued job, a spare job runs only where a worker would
idle, a job's error reaches its waiter, and a plan run this way gives the same plan as one run serially."""

import json
import os
import time

import pytest

from costmodel.cli import main
from simulate.parallel import AffinityPool


def _pid_after(delay_s: float) -> int:
    time.sleep(delay_s)
    return os.getpid()


def _fails(text: str):
    raise ValueError(text)


def test_a_kinds_jobs_stay_on_its_worker_while_the_other_is_busy_and_an_idle_worker_helps():
    with AffinityPool(2) as pool:
        busy = pool.submit("b", _pid_after, 0.5)  # b's home worker is busy with its own job: it takes none of a's
        a = [pool.submit("a", _pid_after, 0.0) for _ in range(4)]
        assert len({f.result() for f in a}) == 1 and busy.result() not in {f.result() for f in a} and pool.stolen == 0
        slow = [pool.submit("a", _pid_after, 0.2) for _ in range(6)]  # b's worker is idle now: it takes queued jobs of a
        assert len({f.result() for f in slow}) == 2 and pool.stolen >= 1


def _now_after(delay_s: float) -> float:
    time.sleep(delay_s)
    return time.monotonic()


def test_a_spare_job_waits_for_every_ordinary_one_and_a_cancelled_spare_never_runs():
    with AffinityPool(1) as pool:
        first = pool.submit("a", _now_after, 0.3)
        spare = pool.submit("a", _now_after, 0.0, spare=True)
        dropped = pool.submit("a", _pid_after, 0.0, spare=True)
        ordinary = pool.submit("a", _now_after, 0.0)  # submitted after the spares, run before them
        assert dropped.cancel()
        assert first.result() <= ordinary.result() <= spare.result()
        assert dropped.cancelled()


def test_a_promoted_spare_runs_as_an_ordinary_job():
    with AffinityPool(1) as pool:
        first = pool.submit("a", _now_after, 0.3)
        needed = pool.submit("a", _now_after, 0.0, spare=True)
        other = pool.submit("a", _now_after, 0.0)
        pool.promote(needed)  # asked for now: it waits in line with `other`, behind it
        later = pool.submit("a", _now_after, 0.0)
        assert first.result() <= other.result() <= needed.result() <= later.result()


def test_a_points_verdict_reads_the_same_replications_with_spares_told():
    """settle tells `maybe` of the replication after the next one while the verdict is open; the pool may run it
    early, but the verdict reads only those `run` returns, in order: the row is the row without spares."""
    from costmodel.slo import parse_slo
    from simulate.plan.settle import settled_point

    slo = parse_slo("p95_ttft_ms<=1000")
    ttft = {0: 950.0, 1: 990.0, 2: 1010.0, 3: 960.0, 4: 1040.0, 5: 1000.0}  # straddling the bound: borderline after 6

    def run(q, r, seed, w):
        i = seed % 1000
        return {"qps": q, "replicas": r, "seed": seed, "duration_s": w, "stable": True, "stability_reason": "stable",
                "ttft_ms_p95": ttft[i]}

    told = []
    plain = settled_point(run, 2.0, 1, slo, seed=0)
    spared = settled_point(run, 2.0, 1, slo, seed=0, maybe=lambda q, r, seed, w: told.append(seed))
    assert spared == plain and plain["slo_verdict"] == "borderline" and plain["replications"] == 6
    assert told == [2, 3, 4, 5]  # after each open look from the first: the replication after the next, up to the cap


def test_each_chains_first_replications_are_asked_for_before_its_thread_starts():
    """run_chains submits what every chain's search asks for first (its first count, the replications its verdict needs for
    certain) before the chains' threads start, then runs `meanwhile` here while the workers simulate them; the threads find
    those futures and simulate nothing twice."""
    from costmodel.modes import get_mode
    from simulate.plan import planner
    from simulate.plan.settle import certain_replications

    settings = planner.PlanSettings([4.0], "p95_ttft_ms<=1000", ["h200"], ["ar", "diffusion"], {"h200": None}, None, jobs=2, max_replications=6)
    chains = [planner.Chain("h200", get_mode(m), (4.0,)) for m in ("ar", "diffusion")]
    with planner.PooledReplications(settings, 2) as reps:
        reps.first_replications(chains)
        asked = set(reps.futures)
        cells = planner.run_chains(settings, chains, pool=reps, meanwhile=lambda: None)
    first = {("h200", c.mode.name, 4.0, planner.first_point(c, settings.max_replicas), seed, w) for c in chains
             for seed, w in certain_replications(4.0, 0, None, 6)}
    assert asked == first
    assert {(c.mode, c.probes[0][0]) for c in cells} == {(k[1], k[3]) for k in first}


def _frozen_objects() -> int:
    import gc

    return gc.get_freeze_count()


def test_the_workers_inherit_this_processs_objects_frozen_and_this_process_keeps_collecting_them():
    import gc

    with AffinityPool(1) as pool:
        assert pool.submit("a", _frozen_objects).result() > 1000  # their collections skip what they inherited
        assert gc.get_freeze_count() == 0


def test_a_jobs_error_reaches_whoever_waits_on_it():
    with AffinityPool(2) as pool:
        with pytest.raises(ValueError, match="no such GPU"):
            pool.submit("a", _fails, "no such GPU").result()
        assert pool.submit("a", _pid_after, 0.0).result() > 0  # the worker is still there


def test_a_plan_on_two_workers_is_the_serial_plan(tmp_path, capsys):
    from simulate.plan import planner

    planner.process_profile.cache_clear()  # the serial search reuses replications kept on these profiles (other tests' toy rows too)
    docs = []
    for jobs in ("1", "2"):
        out = tmp_path / jobs
        assert main(["plan", "--hardware", "rtx-5090", "--qps", "5,20", "--refine-crossover", "2", "--jobs", jobs, "-o", str(out)]) == 0
        docs.append(json.loads((out / "plan.json").read_text()))
    serial, pooled = docs
    for key in ("searches", "points", "results", "simulations"):
        assert serial[key] == pooled[key], key


def test_a_simulations_error_on_a_worker_is_the_plans_one_line(tmp_path, toy_simulator, capsys):
    from costmodel.errors import UserError

    def refusing(*args, **kw):
        raise UserError("a request of 9,000 tokens does not fit h200's KV cache", "give shorter requests")

    toy_simulator(refusing)  # the forked workers inherit it
    code = main(["plan", "--hardware", "h200", "--qps", "5", "--jobs", "2", "-o", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert code == 2 and "does not fit h200's KV cache" in err and "Traceback" not in err

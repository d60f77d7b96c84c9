"""Independent jobs (simulated points, replica-search chains) in parallel: on a Dask cluster - a
LocalCluster of one worker process per core by default, or a running scheduler
(`tcp://HOST:8786`, or DASK_SCHEDULER_ADDRESS) - or serially in this process for one job or one
worker. Each job is a pure function of its arguments (the seed fixes every draw), so where it runs
changes nothing but the wall time; results come back in input order.

Dask reschedules the jobs of a worker that dies (its nanny starts a new one), and results already
returned stay with the caller, whose `on_done(i, result)` sees each as it finishes (`costmodel
sweep` writes every finished point there). Ctrl-C closes the client and the local cluster (its
worker processes stop) and re-raises.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from costmodel.errors import UserError
from costmodel.options import parse_scheduler
from simulate.point import PointResult, check_mode, run_point

SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"
CONNECT_TIMEOUT_S = 5
CLOSE_TIMEOUT_S = 1
# (i, result) as each job finishes
OnDone = Callable[[int, object], None]


@dataclass(frozen=True)
class Workers:
    """Where jobs run. address: a Dask scheduler (None: DASK_SCHEDULER_ADDRESS, else a local
    cluster); workers: local worker processes (None: one per core, at most one per job; 1 with no
    address runs serially in this process, with no Dask)."""

    address: str | None = None
    workers: int | None = None
    # with no address: "dask" (a LocalCluster) or "processes" (forked worker processes, no Dask:
    # ~2 s less start-up, for short interactive runs such as `costmodel plan`; a killed worker
    # fails the run instead of being replaced)
    local: str = "dask"

    def check(self) -> "Workers":
        if self.workers is not None and (isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1):
            raise UserError(f"workers {self.workers!r} must be an integer >= 1", "e.g. --jobs 2")
        if self.local not in ("dask", "processes"):
            raise UserError(f"local backend {self.local!r} is neither dask nor processes", "use one of them")
        self.resolved_address()
        return self

    def resolved_address(self) -> str | None:
        """--scheduler, else DASK_SCHEDULER_ADDRESS, checked (costmodel.options.parse_scheduler); None: local."""
        if self.address is not None:
            return parse_scheduler(self.address)
        env = os.environ.get(SCHEDULER_ENV, "").strip()
        return parse_scheduler(env, SCHEDULER_ENV) if env else None


def dask_installed() -> bool:
    """Whether the optional `sweep` extra (dask, distributed) is importable: without it, runs that
    did not ask for workers or a scheduler run serially (the same results, one core)."""
    return importlib.util.find_spec("distributed") is not None


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_processes(n_points: int) -> int:
    return max(1, min(n_points, cores()))


class ProcessPool:
    """Forked worker processes kept across several run_tasks calls (a plan's chains on one worker, or
    handed to Dask; on this machine's cores a plan uses an AffinityPool, one replication per job): one
    fork per worker for the whole command instead of one per call.

        with ProcessPool(2) as pool:
            run_tasks(fn, jobs, cluster=Workers(None, 2, local="processes"), pool=pool)
    """

    def __init__(self, workers: int):
        self.workers = max(1, int(workers))
        self._executor = None

    def executor(self):
        if self._executor is None:
            import multiprocessing as mp  # here, where a worker starts: a serial run never loads it (start-up, issue 51)
            from concurrent.futures import ProcessPoolExecutor

            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
            self._executor = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context(method))
        return self._executor

    def __enter__(self) -> "ProcessPool":
        return self

    def __exit__(self, *exc) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=exc[0] is None, cancel_futures=exc[0] is not None)
            self._executor = None


class AffinityPool:
    """Forked worker processes for many small jobs (a plan's replications), each job sent to its
    kind's home worker, so that the caches a kind warms (a profile's step prices for one GPU and
    mode) stay in one process; a worker with nothing of its own to do takes another kind's oldest
    job instead of idling. Jobs are queued here, at most `depth` in flight per worker, so that a
    queued job can still go to whichever worker frees first. A spare job (`submit(..., spare=True)`:
    one a caller may need, such as a point's next replications while its verdict is open) runs only
    on a worker with nothing else to do, and only while no other job waits; `promote` makes it an
    ordinary job once it is needed, and a spare future cancelled before it starts never runs, so
    spares use the time workers would idle. submit() is thread-safe (the plan's chains submit from
    their own threads); results are the jobs' own (a pure function of their arguments), wherever
    they ran.

        with AffinityPool(2) as pool:
            fut = pool.submit(("h200", "ar"), fn, *args)
            fut.result()
    """

    def __init__(self, workers: int, depth: int = 2):
        import threading
        from collections import deque

        self.workers = max(1, int(workers))
        self.depth = max(1, int(depth))
        self._lock = threading.Lock()
        self._pending: deque = deque()  # (home worker, fn, args, future, kind), oldest first
        self._spare: deque = deque()  # the same, of spare jobs: run where a worker would idle
        self._home: dict = {}  # job kind -> worker index
        self._ran: list[set] = [set() for _ in range(self.workers)]  # the kinds each worker has run (its caches warm for them)
        self._busy = [0] * self.workers  # jobs in flight per worker
        self._executors: list = []
        self._closed = False
        self.stolen = 0  # jobs run away from their home worker

    def start(self) -> "AffinityPool":
        """Fork the workers now (call before starting threads: a fork copies only the calling thread)."""
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        if not self._executors:
            import gc

            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
            self._executors = [ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context(method)) for _ in range(self.workers)]
            gc.freeze()  # the workers inherit this process's objects as permanent: their collections never walk them (nor copy their pages)
            try:
                for ex in self._executors:
                    ex.submit(int).result()  # the process exists from here on
            finally:
                gc.unfreeze()  # (here they are collectable again)
        return self

    def __enter__(self) -> "AffinityPool":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close(cancel=exc[0] is not None)

    def submit(self, kind, fn: Callable, *args, spare: bool = False):
        """A Future of fn(*args), run on `kind`'s home worker (the least loaded one when `kind` is new); a
        `spare` job only where a worker would otherwise idle (until `promote`d)."""
        from concurrent.futures import Future

        fut: Future = Future()
        if not self._executors:
            self.start()
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            home = self._home.get(kind)
            if home is None:
                load = [0] * self.workers
                for w, *_ in self._pending:
                    load[w] += 1
                home = self._home[kind] = min(range(self.workers), key=lambda w: (load[w] + self._busy[w], list(self._home.values()).count(w)))
            (self._spare if spare else self._pending).append((home, fn, args, fut, kind))
            picked = self._pick()
        self._send(picked)
        return fut

    def promote(self, fut) -> None:
        """The spare job of `fut` is needed: it waits with the other jobs from now on (nothing if it started)."""
        with self._lock:
            job = next((j for j in self._spare if j[3] is fut), None)
            if job is None:
                return
            self._spare.remove(job)
            self._pending.append(job)
            picked = self._pick()
        self._send(picked)

    def _pick(self) -> list:
        """(Under the lock.) The jobs to send now, each counted in flight on its worker: each worker's
        own oldest jobs up to `depth`; an idle worker with none of its own takes the oldest job of a kind
        it has run before (its caches warm), else the oldest; a worker with nothing in flight while no
        ordinary job waits, a spare job (its own kinds' first)."""
        picked = []
        for w in range(self.workers):
            while self._busy[w] < self.depth and self._pending:
                job = next((j for j in self._pending if j[0] == w), None)
                if job is None:
                    if self._busy[w] or any(j[0] == w for j in self._pending):
                        break
                    job = next((j for j in self._pending if j[4] in self._ran[w]), self._pending[0])
                    self.stolen += 1
                self._pending.remove(job)
                self._start(w, job, picked)
        for w in range(self.workers):
            while not self._busy[w] and not self._pending and self._spare:
                job = next((j for j in self._spare if j[0] == w), self._spare[0])
                self._spare.remove(job)
                self._start(w, job, picked)
        return picked

    def _start(self, w: int, job: tuple, picked: list) -> None:
        """(Under the lock.) `job` to worker `w`, counted in flight there, unless its future was cancelled (then dropped)."""
        if job[3].set_running_or_notify_cancel():
            self._busy[w] += 1
            self._ran[w].add(job[4])
            picked.append((w, job))

    def _send(self, picked: list) -> None:
        """(Outside the lock: a job that finishes at once runs its callback in this thread.)"""
        for w, (_, fn, args, fut, _kind) in picked:
            try:
                inner = self._executors[w].submit(fn, *args)
            except Exception as e:  # noqa: BLE001 - a closed or broken executor: the waiter gets the error
                self._finished(w, fut, None, e)
                continue
            inner.add_done_callback(lambda f, w=w, fut=fut: self._finished(w, fut, f))

    def _finished(self, w: int, fut, inner, error: BaseException | None = None) -> None:
        with self._lock:
            self._busy[w] -= 1
            picked = [] if self._closed else self._pick()
        self._send(picked)
        if error is None and inner.cancelled():
            error = RuntimeError("the pool closed before this job ran")
        elif error is None:
            error = inner.exception()
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(inner.result())

    def close(self, cancel: bool = False) -> None:
        """Stop the workers; with `cancel`, queued jobs fail (their waiters wake) instead of running."""
        with self._lock:
            self._closed = True
            pending, self._pending = list(self._pending) + list(self._spare), type(self._pending)()
            self._spare = type(self._spare)()
        for _, _, _, fut, _ in pending:
            if not fut.done() and fut.set_running_or_notify_cancel():
                fut.set_exception(RuntimeError("the pool closed before this job ran"))
        for ex in self._executors:
            ex.shutdown(wait=not cancel, cancel_futures=cancel)
        self._executors = []


class Beside:
    """fn(*args) run in a forked child while this process goes on (a command's files written while it prints its
    tables: the two cores, not one); `result()` waits and returns its value or raises its exception, as a call
    here would. It runs here, at once, where a fork is not safe or not available: another thread running
    (a fork copies only the calling thread) or no fork on this system. The child shares nothing it changes
    with this process: `fn` must leave its effects in files.

        job = Beside(write_files, outcome, stage)
        print_tables()
        written = job.result()
    """

    def __init__(self, fn: Callable, *args):
        import multiprocessing as mp
        import threading

        self._value = self._error = None
        self._proc = self._conn = None
        if threading.active_count() > 1 or "fork" not in mp.get_all_start_methods():
            try:
                self._value = fn(*args)
            except BaseException as e:  # noqa: BLE001 - raised by result(), where the caller asks for it
                self._error = e
            return
        sys.stdout.flush()  # the child exits flushing what it inherited: nothing may be left to print twice
        sys.stderr.flush()
        ctx = mp.get_context("fork")
        self._conn, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_beside_child, args=(child, fn, args), daemon=True)
        self._proc.start()
        child.close()

    def result(self):
        if self._proc is not None:
            try:
                ok, got = self._conn.recv()
            except EOFError:  # the child died before answering (killed)
                self._proc.join()
                ok, got = False, RuntimeError(f"the process writing beside this one ended with code {self._proc.exitcode}")
            finally:
                self._proc.join()
                self._conn.close()
                self._proc = None
            if ok:
                self._value = got
            else:
                self._error = got
        if self._error is not None:
            raise self._error
        return self._value


def _beside_child(conn, fn: Callable, args: tuple) -> None:
    try:
        answer = (True, fn(*args))
    except BaseException as e:  # noqa: BLE001 - handed to the parent, which raises it
        answer = (False, e)
    try:
        conn.send(answer)
    except Exception as e:  # noqa: BLE001 - an exception that does not pickle: its text
        conn.send((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]}")))
    conn.close()


def run_tasks(fn: Callable, args_list: list[tuple], *, cluster: Workers = Workers(), on_done: OnDone | None = None,
              shared: dict | None = None, pool: ProcessPool | None = None) -> list:
    """[fn(*args, **shared) for args in args_list], in input order. `shared` holds large arguments
    every job takes (a profile): sent to each Dask worker once, not with every job. `pool`: forked
    processes kept by the caller, used for a local run of several jobs."""
    cluster.check()
    n, shared = len(args_list), shared or {}
    address = cluster.resolved_address()
    workers = cluster.workers or default_processes(n)
    if address is None and (n <= 1 or workers == 1 or (cluster.workers is None and cluster.local == "dask" and not dask_installed())):
        return _serial(fn, args_list, shared, on_done)  # the default with no `sweep` extra: one process, same results
    if address is None and pool is not None and pool.workers > 1:
        return _on_processes(fn, args_list, shared, on_done, pool.workers, pool.executor())
    if address is None and cluster.local == "processes":
        return _on_processes(fn, args_list, shared, on_done, min(workers, n))
    with dask_client(address, min(workers, max(n, 1))) as client:
        return _on_dask(client, fn, args_list, shared, on_done)


def _serial(fn, args_list, shared, on_done) -> list:
    out = []
    for i, args in enumerate(args_list):
        out.append(fn(*args, **shared))
        if on_done:
            on_done(i, out[-1])
    return out


def _on_processes(fn, args_list, shared, on_done, workers: int, kept=None) -> list:
    """The jobs on `workers` forked processes (they inherit this process's modules, profiles and
    step-price caches, so a worker starts in milliseconds); results in input order. `kept`: an
    executor the caller keeps (ProcessPool), left running afterwards."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    pool = kept or ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(method))
    results: list = [None] * len(args_list)
    try:
        index = {pool.submit(fn, *args, **shared): i for i, args in enumerate(args_list)}
        pending = set(index)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=index.get):
                i = index[fut]
                results[i] = fut.result()  # a job's UserError re-raises here with its message
                if on_done:
                    on_done(i, results[i])
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    if kept is None:
        pool.shutdown(wait=True)
    return results


def _on_dask(client, fn, args_list, shared, on_done) -> list:
    # distributed imported here: an optional heavy dependency (the `sweep` extra), only for parallel runs
    from distributed import as_completed

    scattered = {k: client.scatter(v, broadcast=True) for k, v in shared.items()}
    futures = [client.submit(fn, *args, **scattered, pure=False) for args in args_list]
    index = {f.key: i for i, f in enumerate(futures)}
    results: list = [None] * len(futures)
    try:
        for fut in as_completed(futures):
            i = index[fut.key]
            results[i] = fut.result()  # a job's UserError re-raises here with its message
            fut.release()
            if on_done:
                on_done(i, results[i])
    except BaseException:
        client.cancel(futures)
        raise
    return results


@contextmanager
def dask_client(address: str | None, workers: int) -> Iterator:
    """A Client on `address`, or on a LocalCluster of `workers` processes (closed on exit)."""
    try:
        # imported here: an optional heavy dependency (the `sweep` extra), only for parallel runs
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise UserError("parallel runs need dask and distributed", "pip install 'costmodel[sweep]', or run serially with --jobs 1") from None
    import logging
    import multiprocessing as mp

    local = None
    if address:
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError):
            raise UserError(f"cannot reach the Dask scheduler at {address}",
                            "start one with `dask scheduler` (and `dask worker ADDRESS` on each machine), or drop --scheduler "
                            f"and unset {SCHEDULER_ENV} to run on a local cluster") from None
    else:
        # fork: workers start in ~0.5 s instead of ~3.5 s (spawn) and inherit registered modes
        method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        _quiet_resource_tracker()
        with dask.config.set({"distributed.worker.multiprocessing-method": method}):
            local = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                 silence_logs=logging.CRITICAL)  # a failed task reaches the client as its exception (one line for a UserError), not as a worker log
        client = Client(local)
    try:
        yield client
    except KeyboardInterrupt:
        _stop_local(local)  # Ctrl-C: the workers go now (they got the SIGINT too), without a restart
        raise
    finally:
        _close(client, local)


# multiprocessing's resource tracker starts with the first worker and takes this process's -W flags:
# after Ctrl-C kills the workers it unlinks their semaphores without a "leaked semaphore" warning
# line (the interrupted run's one line stays the only one, as without Dask)
TRACKER_QUIET = "ignore::UserWarning:multiprocessing.resource_tracker"


def _quiet_resource_tracker() -> None:
    if TRACKER_QUIET not in sys.warnoptions:
        sys.warnoptions.append(TRACKER_QUIET)


def _stop_local(local) -> None:
    """Kill a local cluster's worker processes, with their nannies' automatic restart off."""
    if local is None:
        return
    for nanny in list(getattr(local, "workers", {}).values()):
        nanny.auto_restart = False
        proc = getattr(getattr(nanny, "process", None), "process", None)
        if proc is not None and proc.is_alive():
            proc.kill()


def _close(client, local) -> None:
    """Close within CLOSE_TIMEOUT_S each; a cluster that is slow to say goodbye is not an error."""
    for thing in (client, local):
        if thing is None:
            continue
        try:
            thing.close(timeout=CLOSE_TIMEOUT_S)
        except (TimeoutError, OSError, RuntimeError):
            pass


def _one(mode, qps, kwargs, profile):
    return run_point(profile, mode, qps, **kwargs)


def run_points(profile, points: list[tuple], *, processes: int | None = None, progress=None,
               scheduler: str | None = None, **kwargs) -> list[PointResult]:
    """[(mode, qps), ...] or [(mode, qps, concurrency), ...] (closed-loop clients, None: open loop)
    -> [PointResult, ...] in the same order; `progress(done, total, result)`."""
    if processes is not None and processes < 1:
        raise UserError(f"processes {processes!r} must be >= 1", "e.g. --jobs 4")
    n, done = len(points), [0]

    def on_done(i, res):
        done[0] += 1
        if progress:
            progress(done[0], n, res)

    args = [(p[0], p[1], {**kwargs, "concurrency": p[2]} if len(p) > 2 and p[2] is not None else kwargs) for p in points]
    if processes is None and scheduler is None and os.environ.get(SCHEDULER_ENV, "").strip() == "" and _small(points, kwargs):
        processes = 1  # a few hundred requests in all: starting workers would cost more than it saves
    return run_tasks(_one, args, cluster=Workers(scheduler, processes, local="processes"), on_done=on_done, shared={"profile": profile})


SERIAL_REQUESTS = 2000  # at about 50k simulated requests per CPU-second, below this a grid is done before a worker has started


def _small(points: list[tuple], kwargs: dict) -> bool:
    """Whether a grid's requests in all are few enough to simulate in this process (an estimate: the
    explicit request count, else rate x window; an unknown length counts as large)."""
    n = kwargs.get("n_requests")
    if n is not None:
        return n * len(points) <= SERIAL_REQUESTS
    d = kwargs.get("duration_s")
    if d is None or any(p[1] is None for p in points):
        return False
    return sum(p[1] * d for p in points) <= SERIAL_REQUESTS


def simulate_grid(profile, modes, qps_list, *, processes: int | None = None, progress=None, scheduler: str | None = None,
          concurrency: list | None = None, **kwargs) -> list[PointResult]:
    """run_point for every (mode, qps[, concurrency]) (mode-major order), in parallel (run_tasks).
    `concurrency`: closed-loop client counts, crossed with the rates (None: open loop).
    `progress(done, total, result)` is called as points finish; kwargs go to run_point."""
    modes = [modes] if isinstance(modes, str) else list(modes)
    qps_list = [qps_list] if qps_list is None or isinstance(qps_list, (int, float)) else list(qps_list)
    for m in modes:
        check_mode(profile, m)
    points = [(m, q, c) for m in modes for q in qps_list for c in (concurrency or [None])]
    return run_points(profile, points, processes=processes, progress=progress, scheduler=scheduler, **kwargs)

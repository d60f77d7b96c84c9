"""The one line `simulate --no-prefix-caching` and `plan --prefix-caching off` print where turning
vLLM's prefix cache off changes nothing: the workload shares no prompt prefix (no system_prompt,
sessions, or trace hash_ids or session ids: every prompt distinct, simulate/workload.py) and no
request was preempted (a preempted request's recompute is the only other hit the cache could give),
so the cache finds no hits with caching on either."""

from __future__ import annotations


def caching_off_note(workload_path: str | None, option: str, preemptions: int) -> str | None:
    """The line to print (None: turning caching off may have changed the figures)."""
    from simulate.workload import load_workload

    wl = load_workload(workload_path) if workload_path else None
    shared = wl is not None and (wl.prefix is not None or (wl.trace is not None and (wl.trace.hash_ids is not None or wl.trace.session is not None)))
    if shared or preemptions:
        return None
    return (f"{option} changes nothing here: the workload shares no prompt prefix (no system_prompt, sessions or trace hash_ids) and no "
            "request was preempted, so vLLM's prefix cache finds no hits with it on either")

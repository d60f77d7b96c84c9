"""One router family (simulate/routers/): a point's replicas (`simulate`, `plan`) and a day's pools
route with the same registry, so a router registered once is a choice everywhere."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from costmodel.baseline_profile import roofline_profile
from costmodel.errors import UserError
from simulate import routers
from simulate.api import run_point
from simulate.cluster.fleet import simulate_fleet
from simulate.cluster.pool import PoolSpec
from simulate.cluster.scaling import Scaling
from simulate.workload import build_requests

PROFILE = roofline_profile("h200", "bf16", 0.33)


def test_simulate_offers_every_registered_router():
    from simulate.cli.simulate import simulate

    router = next(p for p in simulate.params if p.name == "router")
    assert tuple(router.type.choices) == routers.router_names() and router.default == routers.DEFAULT_ROUTER
    assert {"least-outstanding", "round-robin", "least-tokens"} <= set(routers.router_names())


def test_least_tokens_routes_a_point():
    """The router the day's pools had alone now routes `simulate`'s points: every replica is used."""
    res = run_point(PROFILE, "ar", 4.0, n_requests=300, seed=0, replicas=3, router="least-tokens")
    assert set(res.requests.replica) == {0, 1, 2} and res.summary.router == "least-tokens"


def test_one_replica_takes_every_arrival_whatever_the_router():
    for name in routers.router_names():
        assert set(run_point(PROFILE, "ar", 2.0, n_requests=40, seed=0, router=name).requests.replica) == {0}


def test_a_router_registered_once_routes_points_and_pools():
    routers.register("last", lambda replicas: (lambda prompt_tokens, output_tokens: replicas[-1]))
    try:
        point = run_point(PROFILE, "ar", 2.0, n_requests=60, seed=0, replicas=3, router="last").requests
        assert set(point.replica) == {2}
        reqs = build_requests(PROFILE, None, 2.0, n_requests=60, seed=0)
        pool = PoolSpec("p", PROFILE, "ar", router="last", scaling=Scaling(min_replicas=3, max_replicas=3, initial_replicas=3))
        rec = simulate_fleet([pool], reqs).rec
        assert len(set(rec.replica.tolist())) == 1 and np.isfinite(rec.finish_s).all()
    finally:
        routers.unregister("last")
    with pytest.raises(UserError, match="unknown router 'last'"):
        run_point(PROFILE, "ar", 2.0, n_requests=10, router="last")

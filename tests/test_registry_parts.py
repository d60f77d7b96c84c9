"""Profile parts are a registry that comes with the modes (costmodel/modes: each mode's `parts`):
the profile holds every registered part under its own key, reads and writes it as a top-level key
of the JSON, and validates it through the part; a mode that draws from a part refuses a profile
without it."""

from __future__ import annotations

import json

import pytest

from costmodel.baseline_profile import roofline_profile
from costmodel.errors import UserError
from costmodel.modes import find_part, get_mode, profile_parts, register, unregister
from costmodel.modes.diffusion import COMMIT_STATS
from costmodel.modes.mtp import MTP_ACCEPTANCE
from costmodel.schemas.profile import Profile
from tests.toy.burst.mode import BURST, BurstMode


def test_the_built_in_parts_come_with_their_modes():
    assert [p.key for p in profile_parts()][:2] == [COMMIT_STATS.key, MTP_ACCEPTANCE.key]
    assert get_mode("diffusion").parts == (COMMIT_STATS,) and get_mode("mtp").parts == (MTP_ACCEPTANCE,) and not get_mode("ar").parts


def test_a_profile_round_trips_its_parts_under_their_keys(tmp_path):
    p = roofline_profile("h200", "bf16", 0.5)
    path = tmp_path / "p.json"
    p.save(path)
    doc = json.loads(path.read_text())
    keys = list(doc)
    assert keys[keys.index("modes") + 1: keys.index("modes") + 3] == ["commit_stats", "mtp_acceptance"]
    q = Profile.load(path)
    assert q == p and q.commit_stats == p.commit_stats and q.mtp_acceptance.num_speculative_tokens == p.mtp_acceptance.num_speculative_tokens


def test_a_mode_refuses_a_profile_without_its_part():
    p = roofline_profile("h200", "bf16", 0.5)
    p.mtp_acceptance = None  # a part is set as an attribute of its key
    with pytest.raises(UserError, match="mode mtp needs mtp_acceptance"):
        p.validate()


def test_unknown_parts_are_refused_and_late_parts_read_empty():
    p = roofline_profile("h200", "bf16", 0.5)
    with pytest.raises(TypeError, match="unknown profile parts"):
        Profile(p.profile_id, p.hardware, p.precision, p.engine, p.modes, not_a_part=1)
    register(BurstMode())  # registers its part too
    try:
        assert find_part(BURST.key) is BURST and p.burst_steps is None  # a profile made before: the part's empty value
    finally:
        unregister(BurstMode.name)
    assert find_part(BURST.key) is None

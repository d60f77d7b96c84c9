"""The probe suite: six regimes of at least 20 prompts, a deterministic per-prompt split, and the
answer checks of the scorable regimes."""

from __future__ import annotations

from collections import Counter

import pytest

from costmodel.errors import UserError
from measure.probes import REGIMES, Probe, check_answer, load_suite, split_of


def test_suite_has_six_regimes_of_at_least_twenty_prompts():
    suite = load_suite()
    counts = Counter(p.regime for p in suite)
    assert set(counts) == set(REGIMES) and min(counts.values()) >= 20
    assert len({p.prompt_id for p in suite}) == len(suite)
    for reg in REGIMES:
        splits = Counter(p.split for p in suite if p.regime == reg)
        assert set(splits) == {"exploratory", "confirmatory"}  # both halves in every regime
    assert all(p.scorable for p in suite if p.regime != "R5") and not any(p.scorable for p in suite if p.regime == "R5")
    assert all(isinstance(p.check["value"], int) for p in suite if p.regime == "R1")


def test_split_is_a_deterministic_function_of_the_prompt_id():
    # pinned: the split depends on the prompt id alone (sha256), not on the process's hash seed or the run
    assert {i: split_of(i) for i in ("r1-01", "r1-04", "r2-01", "r5-01")} == {
        "r1-01": "confirmatory", "r1-04": "exploratory", "r2-01": "exploratory", "r5-01": "confirmatory"}
    assert [p.split for p in load_suite(["R4"])] == [split_of(p.prompt_id) for p in load_suite(["R4"])]
    with pytest.raises(UserError, match="unknown probe regime"):
        load_suite(["R9"])


@pytest.mark.parametrize("check, text, want", [
    ({"kind": "number", "value": 1170}, "Together they cost 1,170 cents.", True),
    ({"kind": "number", "value": 27}, "She has 27 left, not 28.", False),
    ({"kind": "number", "value": 66}, "The final price is $66.", True),
    ({"kind": "python_def", "name": "digit_sum"}, "```python\ndef digit_sum(n):\n    return sum(map(int, str(abs(n))))\n```", True),
    ({"kind": "python_def", "name": "digit_sum"}, "def digit_sum(n) return 0", False),
    ({"kind": "python_def", "name": "digit_sum"}, "def other(n):\n    return 0\n", False),
    ({"kind": "contains_any", "answers": ["Na"]}, "The symbol is Na.", True),
    ({"kind": "contains_any", "answers": ["Na"]}, "Its name is sodium.", False),
    ({"kind": "contains_any", "answers": ["7", "seven"]}, "There are Seven.", True),
    ({"kind": "json_object", "keys": {"name": "string", "age": "integer"}}, '```json\n{"name": "Ada", "age": 36}\n```', True),
    ({"kind": "json_object", "keys": {"name": "string", "age": "integer"}}, '{"name": "Ada", "age": "36"}', False),
    ({"kind": "json_object", "keys": {"ok": "boolean", "n": "number"}}, '{"ok": true, "n": 2.5}', True),
    ({"kind": "json_object", "keys": {"n": "integer"}}, '{"n": true}', False),
    ({"kind": "json_object", "keys": {"n": "integer"}}, "no json here", False),
])
def test_checks(check, text, want):
    assert check_answer(Probe("R1", "x", "p", None, check), text) is want


def test_open_ended_regime_is_not_scored():
    p = next(p for p in load_suite(["R5"]))
    assert check_answer(p, "anything at all") is None

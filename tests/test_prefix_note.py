"""An option that changes nothing says so (issue 48 item 5): turning vLLM's prefix cache off on a
workload that shares no prompt prefix gives the same figures, and `simulate` and `plan` say it in
one line; where prompts share a system prompt the cache matters and no such line is printed."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

SIM = ["simulate", "--qps", "2", "--mode", "ar", "--hardware", "h200", "--requests", "30"]
SHARED = str(Path(__file__).resolve().parents[1] / "data" / "workloads" / "chat-system-prompt.json")
NOTE = "changes nothing here: the workload shares no prompt prefix"


def test_simulate_says_caching_off_changed_nothing_and_it_did_not(cli, tmp_path):
    code, off, err = cli(*SIM, "--no-prefix-caching", "-o", str(tmp_path / "off"))
    assert code == 0, err
    assert [line for line in off.splitlines() if NOTE in line] == [
        f"--no-prefix-caching {NOTE} (no system_prompt, sessions or trace hash_ids) and no request was preempted, so vLLM's prefix cache "
        "finds no hits with it on either"]
    code, on, err = cli(*SIM, "-o", str(tmp_path / "on"))
    assert code == 0 and NOTE not in on
    a, b = (pd.read_csv(tmp_path / d / "summary.csv") for d in ("off", "on"))
    figures = ["output_tokens_per_s", "ttft_ms_p95", "e2e_ms_p95", "prefill_tokens_saved"]
    assert a[figures].equals(b[figures])  # what the line says


def test_no_line_where_prompts_share_a_prefix(cli):
    code, out, err = cli(*SIM, "--no-prefix-caching", "--workload", SHARED)
    assert code == 0, err
    assert NOTE not in out


def test_plan_says_it_too(cli, tmp_path):
    code, out, err = cli("plan", "--qps", "2", "--hardware", "h200", "--mode", "ar", "--duration", "30", "--jobs", "1", "--prefix-caching", "off",
                         "-o", str(tmp_path / "plan"))
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[-2].startswith(f"--prefix-caching off {NOTE}") and lines[-1].startswith("At 2 QPS")  # the answer stays last

"""MTP per-position acceptance from vLLM's speculative-decoding counters, else the stated default
(vLLM benchmarks' synthetic 0.8 per token, k = 4; costmodel.prior).

Input (`--mtp-metrics`): one or two scrapes of a live vLLM server's Prometheus `/metrics` text
(two: before and after a load run, and the counter deltas are used), or a JSON file
{"num_drafts": N, "num_accepted_tokens_per_pos": [a_0, ..., a_{k-1}], "source": "..."}, or an
endpoint run directory holding such a file as `mtp_counters.json` (`costmodel measure --endpoint`
writes it for MTP deployments).
Counters used: `vllm:spec_decode_num_drafts`, `vllm:spec_decode_num_accepted_tokens_per_pos`
(label `position`, counts drafts whose position j was accepted). Per-position CONDITIONAL
acceptance, as `MtpAcceptance` stores it: p_1 = a_0 / drafts, p_i = a_{i-1} / a_{i-2}.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from costmodel.errors import UserError
from costmodel.jsonfile import read_json
from costmodel.prior import vllm_synthetic_mtp_acceptance
from costmodel.schemas.profile import MtpAcceptance, Provenance
from costmodel.timestamps import now_iso

DRAFTS = "vllm:spec_decode_num_drafts"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def _prom_counters(path: Path) -> tuple[float, dict[int, float]]:
    try:
        text = path.read_text(encoding="utf-8")
        drafts, per_pos, seen = 0.0, {}, False
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                base = s.name.removesuffix("_total")
                if base == DRAFTS:
                    drafts += s.value
                    seen = True
                elif base == PER_POS:
                    pos = int(s.labels.get("position", 0))
                    per_pos[pos] = per_pos.get(pos, 0.0) + s.value
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"--mtp-metrics {path} is not a Prometheus text scrape ({e})", "save the text of GET /metrics from the vLLM server") from None
    if not seen or not per_pos:
        raise UserError(f"--mtp-metrics {path} has no {DRAFTS}/{PER_POS} counters",
                        "scrape a vLLM server started with --speculative-config (method mtp)")
    return drafts, per_pos


def _json_counters(path: Path) -> tuple[float, dict[int, float], str]:
    d = read_json(path, "MTP metrics file")
    try:
        drafts = float(d["num_drafts"])
        per_pos = {i: float(a) for i, a in enumerate(d["num_accepted_tokens_per_pos"])}
    except (KeyError, TypeError, ValueError):
        raise UserError(f"MTP metrics file {path} lacks num_drafts / num_accepted_tokens_per_pos",
                        'write {"num_drafts": N, "num_accepted_tokens_per_pos": [...]}') from None
    return drafts, per_pos, str(d.get("source", ""))


def acceptance_from_counters(drafts: float, per_pos: dict[int, float], provenance: Provenance) -> MtpAcceptance:
    """Conditional per-position acceptance from cumulative vLLM counters."""
    k = max(per_pos) + 1 if per_pos else 0
    if drafts <= 0 or k < 1 or sorted(per_pos) != list(range(k)):
        raise UserError(f"MTP counters ({provenance.source}) show no drafts or non-contiguous positions {sorted(per_pos)}",
                        "scrape after a load run with speculative decoding on")
    counts = [per_pos[i] for i in range(k)]
    if any(c < 0 for c in counts) or counts[0] > drafts or any(b > a + 1e-9 for a, b in zip(counts, counts[1:])):
        raise UserError(f"MTP counters ({provenance.source}) are inconsistent (accepted per position must not increase and not exceed drafts)",
                        "pass the before-scrape first and the after-scrape second")
    probs, prev = [], drafts
    for c in counts:
        probs.append(float(c / prev) if prev > 0 else 0.0)
        prev = c
    return MtpAcceptance(num_speculative_tokens=k, per_position=probs, provenance=provenance)


def load_mtp_acceptance(paths: list[str]) -> MtpAcceptance:
    """From one or two scrape files (or one JSON file), see the module docstring."""
    ps = [Path(p) / "mtp_counters.json" if Path(p).is_dir() else Path(p) for p in paths]
    for p, given in zip(ps, paths):
        if Path(given).is_dir() and not p.is_file():
            raise UserError(f"--mtp-metrics {given} is a directory without mtp_counters.json",
                            "pass an endpoint run of an MTP deployment, a /metrics scrape, or a JSON counters file")
    for p in ps:
        if not p.is_file():
            raise UserError(f"--mtp-metrics {p} does not exist", "pass a saved Prometheus /metrics scrape or a JSON counters file")
    if len(ps) > 2:
        raise UserError(f"--mtp-metrics was given {len(ps)} files", "pass one scrape, or two (before and after a load run)")
    if ps[0].suffix == ".json":
        if len(ps) != 1:
            raise UserError("--mtp-metrics takes a single JSON counters file", "pass one JSON file, or two Prometheus scrapes")
        drafts, per_pos, source = _json_counters(ps[0])
        src = f"{ps[0]}" + (f" ({source})" if source else "")
    else:
        drafts, per_pos = _prom_counters(ps[-1])
        src = f"vLLM spec-decode counters in {ps[-1]}"
        if len(ps) == 2:
            d0, p0 = _prom_counters(ps[0])
            if d0 > drafts or any(v < p0.get(i, 0.0) for i, v in per_pos.items()):
                raise UserError(f"MTP counters decreased from {ps[0]} to {ps[1]}",
                                "pass the before-scrape first and the after-scrape second, from one server run (a restart resets them)")
            drafts -= d0
            per_pos = {i: v - p0.get(i, 0.0) for i, v in per_pos.items()}
            src = f"vLLM spec-decode counter deltas {ps[0]} -> {ps[1]}"
    prov = Provenance("endpoint", src, date=now_iso(), notes=f"{drafts:.0f} drafts; conditional acceptance per position")
    return acceptance_from_counters(drafts, per_pos, prov)


def choose_mtp_acceptance(paths: list[str] | None) -> tuple[MtpAcceptance, str]:
    if paths:
        a = load_mtp_acceptance(list(paths))
        return a, f"MTP acceptance from {a.provenance.source}: k={a.num_speculative_tokens}, mean acceptance length {a.mean_acceptance_length:.2f}"
    a = vllm_synthetic_mtp_acceptance()
    return a, (f"MTP acceptance: the stated default ({a.provenance.source}; mean acceptance length {a.mean_acceptance_length:.2f}), "
               "no --mtp-metrics given")

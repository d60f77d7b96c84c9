"""Where each number in a profile came from, flattened for reports: measured / projected /
published / roofline / endpoint per pass model, commit statistics and MTP acceptance."""

from __future__ import annotations

from costmodel.modes import all_modes
from costmodel.schemas.profile import Profile, Provenance


def _prov(p: Provenance) -> dict:
    return {"kind": p.kind, "source": p.source, "hardware": p.hardware, "date": p.date, "notes": p.notes}


def profile_provenance(profile: Profile, modes=None) -> dict:
    """A JSON-able account of one profile's provenance (only `modes` when given)."""
    pass_models = {}
    for name, m in profile.modes.items():
        if modes is not None and name not in modes:
            continue
        pass_models[name] = {}
        for kind, pm in m.pass_models.items():
            d = _prov(pm.provenance)
            if pm.diagnostics is not None:
                d["n_obs"] = pm.diagnostics.n_obs
                d["cv_mape_pct"] = pm.diagnostics.cv_mape_pct
                d["heldout_mape_pct"] = pm.diagnostics.heldout_mape_pct
            pass_models[name][kind] = d
    out = {
        "profile_id": profile.profile_id,
        "hardware": profile.hardware.get("id"),
        "precision": profile.precision,
        "engine": profile.engine,
        "provenance": _prov(profile.provenance),
        "pass_models": pass_models,
        "notes": list(profile.notes),
    }
    parts = {p for m in all_modes() if modes is None or m.name in modes for p in m.profile_parts}
    if "commit_stats" in parts:
        out["commit_stats"] = {r: {**_prov(c.provenance), "tokens_per_call": c.tokens_per_call, "description": c.description}
                               for r, c in profile.commit_stats.items()}
    if profile.mtp_acceptance is not None and "mtp_acceptance" in parts:
        a = profile.mtp_acceptance
        out["mtp_acceptance"] = {**_prov(a.provenance), "num_speculative_tokens": a.num_speculative_tokens,
                                 "mean_acceptance_length": a.mean_acceptance_length}
    return out


def provenance_kinds(prov: dict) -> dict[str, list[str]]:
    """kind -> the parts of a profile_provenance() record with that kind, e.g. {"roofline": ["ar/prefill", ...]}."""
    out: dict[str, list[str]] = {}
    for mode, kinds in prov.get("pass_models", {}).items():
        for k, d in kinds.items():
            out.setdefault(d["kind"], []).append(f"{mode}/{k} pass cost")
    for r, d in prov.get("commit_stats", {}).items():
        out.setdefault(d["kind"], []).append(f"commit statistics {r}")
    if "mtp_acceptance" in prov:
        out.setdefault(prov["mtp_acceptance"]["kind"], []).append("MTP acceptance")
    return out

"""Where each number in a profile came from, flattened for reports: measured / projected /
published / roofline / endpoint per pass model, commit statistics and MTP acceptance."""

from __future__ import annotations

from costmodel.modes import all_modes, profile_parts
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
    used = {p for m in all_modes() if modes is None or m.name in modes for p in m.profile_parts}
    for part in profile_parts():  # each part the modes draw from, as its mode module accounts for it
        record = part.provenance_record(getattr(profile, part.key)) if part.key in used else None
        if record is not None:
            out[part.key] = record
    return out


def provenance_kinds(prov: dict) -> dict[str, list[str]]:
    """kind -> the parts of a profile_provenance() record with that kind, e.g. {"roofline": ["ar/prefill", ...]}."""
    out: dict[str, list[str]] = {}
    for mode, kinds in prov.get("pass_models", {}).items():
        for k, d in kinds.items():
            out.setdefault(d["kind"], []).append(f"{mode}/{k} pass cost")
    for part in profile_parts():
        for kind, what in part.provenance_items(prov[part.key]) if part.key in prov else ():
            out.setdefault(kind, []).append(what)
    return out

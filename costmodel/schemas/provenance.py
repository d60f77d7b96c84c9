"""Where each number in a profile came from, flattened for reports: measured / projected /
published / roofline / endpoint per pass model, commit statistics and MTP acceptance."""

from __future__ import annotations

from costmodel.modes import all_modes, get_mode, profile_parts
from costmodel.schemas.profile import Profile, Provenance
from costmodel.stepcost import host_overhead


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
        "hardware": profile.hardware.id,
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


# How each provenance kind reads where an answer is printed ("rests on ..."); the kinds are the profile schema's.
BASIS = {"measured": "measured", "projected": "projected", "published": "prior", "roofline": "roofline-only", "endpoint": "measured (endpoint)"}


def _origin(prov_part: dict) -> str:
    """The first clause of a provenance source, e.g. 'per-op projection of the H100 bf16 operator
    table (data/runs/ops/h100) to the RTX 5090's int4 roofline' or 'roofline time / efficiency 0.33'."""
    return str(prov_part.get("source") or "").split(", ")[0].strip()


def rests_on(prov: dict, mode: str) -> str:
    """The bases of the inputs one mode's figures rest on, read from a profile_provenance() record,
    e.g. 'projected pass timings (per-op projection of ... to the RTX 5090's int4 roofline); prior MTP
    acceptance': what is not measured on this GPU says where it comes from."""
    return "; ".join(rests_on_items(prov, mode))


def rests_on_items(prov: dict, mode: str) -> list[str]:
    parts: dict[str, set] = {}
    origins: dict[str, str] = {}
    for d in prov.get("pass_models", {}).get(mode, {}).values():
        parts.setdefault("pass timings", set()).add(BASIS.get(d["kind"], d["kind"]))
        if d["kind"] in ("projected", "roofline") and _origin(d):
            origins["pass timings"] = _origin(d)
    for part in get_mode(mode).parts:  # the profile parts the mode draws from, as the provenance account records them
        for kind in sorted(part.bases(prov[part.key])) if prov.get(part.key) else ():
            parts.setdefault(part.title or part.label, set()).add(BASIS.get(kind, kind))
    term = ((prov.get("engine") or {}).get("host_overhead") or {}).get(mode)
    if isinstance(term, dict):  # the engine's step work beside the passes (costmodel/stepcost/host_overhead.py)
        parts.setdefault("engine step term", set()).add(host_overhead.basis(term))
    if not parts:
        kind = prov.get("provenance", {}).get("kind", "unknown")
        return [f"{BASIS.get(kind, kind)} inputs (profile details not available)"]
    return [f"{'/'.join(sorted(k))} {part}" + (f" ({origins[part]})" if part in origins else "") for part, k in parts.items()]

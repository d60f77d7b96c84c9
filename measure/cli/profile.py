"""`costmodel profile show|validate|project|carry-term|roofline`: read, check, move and make profiles."""

from __future__ import annotations

import json

import click
from rich.table import Table

from costmodel.baseline_profile import DEFAULT_EFFICIENCY, roofline_profile
from costmodel.console import make_console
from costmodel.hardware import get_hardware
from costmodel.schemas.profile import Profile
from measure.fit.calibrate import with_carried_term
from measure.fit.projection import check_weights_fit, compare_passes, project_profile


def _prov(p) -> str:
    bits = [f"{p.kind}: {p.source}"]
    extra = ", ".join(x for x in (p.hardware, p.date) if x)
    if extra:
        bits.append(f"({extra})")
    if p.notes:
        bits.append(f"- {p.notes}")
    return " ".join(bits)


def _pct(x) -> str:
    return "-" if x is None else f"{x:.2f}%"


def show_profile(con, prof) -> None:
    """A readable summary of a profile with the provenance of every part."""
    hw = prof.hardware
    con.print(f"[bold]{prof.profile_id}[/bold] (schema {prof.schema_version}, created {prof.created_at or '?'})")
    con.print(f"hardware: {hw.name} ({hw.id}): {hw.memory_gb:g} GB, {hw.memory_bandwidth_tbps:g} TB/s, "
              f"{', '.join(f'{k} {v:g}' for k, v in hw.tflops.items())} TFLOP/s dense")
    con.print(f"precision: {prof.precision}; engine: {json.dumps(prof.engine, sort_keys=True)}", highlight=False)
    con.print(f"provenance: {_prov(prof.provenance)}", highlight=False)
    for n in prof.notes:
        con.print(f"  note: {n}", highlight=False)
    for name, m in prof.modes.items():
        t = Table(title=f"mode {name}: {m.model}" + (f" + assistant {m.assistant}" if m.assistant else ""), show_lines=False)
        for c in ["pass kind", "ms = max(roofline, ...)", "n", "R2", "MAPE", "k-fold", "held-out", "median x roofline", "support (seqs / tokens per seq / context)", "source"]:
            t.add_column(c, overflow="fold")
        for kind, pm in m.pass_models.items():
            d = pm.diagnostics
            sup = pm.support
            support = " / ".join(f"{int(sup[k][0])}-{int(sup[k][1])}" if k in sup else "any" for k in ("seqs", "tokens_per_seq", "context_tokens"))
            t.add_row(kind, " + ".join(f"{c:.4g}" if f == "const" else f"{c:.4g}*{f}" for f, c in pm.coef.items()),
                      str(d.n_obs) if d else "-", "-" if not d or d.r2 is None else f"{d.r2:.4f}",
                      _pct(d.mape_pct if d else None), _pct(d.cv_mape_pct if d else None), _pct(d.heldout_mape_pct if d else None),
                      "-" if pm.median_x_roofline is None else f"{pm.median_x_roofline:.2f}", support, pm.provenance.kind)
        con.print(t)
        for kind, pm in m.pass_models.items():
            con.print(f"  {kind}: {_prov(pm.provenance)}", highlight=False)
        if m.notes:
            con.print(f"  {name} notes: {m.notes}", highlight=False)
    if prof.commit_stats:
        t = Table(title="commit statistics per regime (diffusion)")
        for c in ["regime", "task", "steps/canvas mean [p10, p90]", "tokens/call", "content tokens mean [p10, p90]", "re-noise/gen", "commit entropy nats", "source"]:
            t.add_column(c, overflow="fold")
        for r, c in prof.commit_stats.items():
            s, L = c.steps_per_canvas, c.content_length
            t.add_row(r, c.description, f"{s.mean:.1f} [{s.quantile(0.1):g}, {s.quantile(0.9):g}]", f"{c.tokens_per_call:.1f}",
                      f"{L.mean:.0f} [{L.quantile(0.1):g}, {L.quantile(0.9):g}]", f"{c.renoise_per_generation:.2f}",
                      "-" if c.commit_entropy_nats is None else f"{c.commit_entropy_nats:.4f}", c.provenance.kind)
        con.print(t)
        for r, c in prof.commit_stats.items():
            con.print(f"  {r}: {_prov(c.provenance)}", highlight=False)
    if prof.mtp_acceptance:
        a = prof.mtp_acceptance
        con.print(f"MTP acceptance: k={a.num_speculative_tokens}, per position {[round(x, 3) for x in a.per_position]}, "
                  f"mean acceptance length {a.mean_acceptance_length:.2f}; {_prov(a.provenance)}", highlight=False)


@click.group()
def profile():
    """Show, validate, project and make profiles (the simulator's only input about the hardware)."""


@profile.command()
@click.argument("path", type=click.Path())
def show(path):
    """Readable summary of a profile with the provenance of every part."""
    show_profile(make_console(), Profile.load(path))


@profile.command()
@click.argument("path", type=click.Path())
def validate(path):
    """Check a profile: prints OK, or one line naming what is wrong (exit 2)."""
    p = Profile.load(path)
    click.echo(f"OK {path}: {p.profile_id} ({p.hardware.id}, {p.precision}; modes {', '.join(p.modes)}; {p.provenance.kind})")


@profile.command()
@click.argument("path", type=click.Path())
@click.option("--hardware", required=True, help="Target GPU catalog id (or with --hardware-file, an id it describes).")
@click.option("--hardware-file", type=click.Path(), default=None, help="JSON file describing GPUs the catalog lacks.")
@click.option("--precision", required=True, help="Target precision: bf16, fp8, int4 (weight-only 4-bit), nvfp4.")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), required=True, help="Projected profile JSON to write.")
@click.option("--id", "profile_id", default=None, help="Profile id (default: <hardware>-<precision>-projected-from-<source id>).")
@click.option("--compare", "compare", type=click.Path(), default=None,
              help="A profile of the target GPU and precision (e.g. measured there): print the projection's error against it per pass.")
def project(path, hardware, hardware_file, precision, out, profile_id, compare):
    """Project a profile to another GPU/precision: fitted coefficients (engine efficiency) carried,
    roofline features re-evaluated on the target, const (overhead) carried as is; table pass models
    scaled point by point by the roofline ratio.

    Example: costmodel profile project h200.json --hardware rtx-5090 --precision int4 -o rtx-5090.json
    """
    src = Profile.load(path)
    p = project_profile(src, hardware, precision, hardware_file, profile_id)
    diffs = compare_passes(p, Profile.load(compare)) if compare else []
    p.save(out)
    con = make_console()
    for n in p.notes[len(src.notes):]:
        con.print(f"- {n}", highlight=False)
    if diffs:
        t = Table(title=f"projection vs {compare}")
        for c in ("mode", "pass", "seqs x tokens, context", "projected ms", "compared ms", "error"):
            t.add_column(c, justify="left" if c in ("mode", "pass") else "right")
        for d in diffs:
            t.add_row(d.mode, d.kind, f"{d.seqs} x {d.tokens}, {d.context}", f"{d.projected_ms:.2f}", f"{d.compared_ms:.2f}", f"{d.err_pct:+.1f}%")
        con.print(t)
    con.print(f"wrote {out} ({p.profile_id})")


@profile.command("carry-term")
@click.argument("path", type=click.Path())
@click.option("--from", "source", type=click.Path(), required=True, help="The profile whose engine step terms to carry (e.g. one calibrated with costmodel fit --calibrate).")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), required=True, help="Profile JSON to write (may be PATH itself).")
def carry_term(path, source, out):
    """Give a profile another profile's engine step terms (per mode both price), labelled as carried:
    the engine's step work calibrated on one GPU and precision, assumed on another.

    Example: costmodel profile carry-term h200.json --from h100-sxm-fp8-calibrated.json -o h200.json
    """
    p = with_carried_term(Profile.load(source), Profile.load(path))
    p.save(out)
    make_console().print(f"wrote {out} ({p.profile_id}: {p.notes[-1]})")


@profile.command()
@click.option("--hardware", required=True, help="GPU catalog id.")
@click.option("--hardware-file", type=click.Path(), default=None, help="JSON file describing GPUs the catalog lacks.")
@click.option("--precision", default="bf16", show_default=True)
@click.option("--efficiency", type=float, default=None, help="Fraction of the roofline the engine reaches (default 0.33, from the compiled H200 path).")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), required=True, help="Profile JSON to write.")
def roofline(hardware, hardware_file, precision, efficiency, out):
    """A profile priced straight from the roofline at a stated efficiency (provenance roofline)."""
    p = roofline_profile(hardware, precision, DEFAULT_EFFICIENCY if efficiency is None else efficiency, hardware_file=hardware_file)
    p.notes.extend(check_weights_fit(get_hardware(hardware, hardware_file), precision, p.modes))
    p.save(out)
    con = make_console()
    for n in p.notes:
        con.print(f"- {n}", highlight=False)
    con.print(f"wrote {out} ({p.profile_id})")

"""`costmodel roofline`: the physical limit of each pass kind at a shape, and a batch sweep."""

from __future__ import annotations

import click
import pandas as pd
from rich.table import Table

from costmodel.atomic import write_csv
from costmodel.console import make_console
from costmodel.errors import UserError
from costmodel.hardware import default_hardware, get_hardware
from costmodel.models import AR_SIBLING, ASSISTANT_FOR, get_model
from costmodel.modes import family_of_pass, modes_of_family
from costmodel.options import parse_ints, parse_list
from costmodel.precision import get_precision
from costmodel.roofline import PASS_KINDS, Roofline, Segment, crossover_batch, default_tokens


def roofline_table(model_name: str, hardware: str, precision: str, kinds: list[str], batches: list[int],
                   prompt: int, context: int, draft_tokens: int, tokens: int | None = None,
                   hardware_file: str | None = None) -> pd.DataFrame:
    """One row per (pass kind, batch): FLOPs, bytes by kind, limit times and the binding one."""
    model = get_model(model_name)
    hw = get_hardware(hardware, hardware_file)
    prec = get_precision(precision)
    target = model
    if any(family_of_pass(k) != model.family for k in kinds):  # e.g. AR passes asked of DiffusionGemma: its AR sibling runs them
        target = get_model(AR_SIBLING.get(model.name, model.name))
    assistant = get_model(ASSISTANT_FOR[target.name]) if target.name in ASSISTANT_FOR else None
    rows = []
    for kind in kinds:
        pk = PASS_KINDS[kind]
        fam = family_of_pass(kind)
        m = model if fam == model.family else target
        if m.family != fam:
            raise UserError(f"pass kind {kind} belongs to a {fam} model, not {m.name}", f"use --model with a {fam} model (costmodel models)")
        roof = Roofline(m, hw, prec, assistant)
        t = tokens or default_tokens(kind, m, prompt, draft_tokens)
        ctx = 0 if pk.query_tokens == "prompt" else context  # a prompt pass starts from an empty cache
        for b in batches:
            r = roof.pass_cost(Segment(kind, b, t, ctx))
            rows.append({
                "pass_kind": kind, "model": (assistant.name if pk.role == "assistant" else m.name),
                "hardware": hw.id, "precision": prec.name, "seqs": b, "tokens_per_seq": t, "context_tokens": ctx,
                "gflop": r.flops / 1e9, "gb_moved": r.bytes / 1e9, "weight_gb": r.weight_bytes / 1e9,
                "kv_read_gb": r.kv_read_bytes / 1e9, "kv_write_gb": r.kv_write_bytes / 1e9, "logits_gb": r.logits_bytes / 1e9,
                "experts_touched_per_layer": r.experts_touched_per_layer,
                "compute_ms": r.compute_ms, "memory_ms": r.memory_ms, "roofline_ms": r.roofline_ms, "bound": r.bound,
                "compute_bound_from_seqs": crossover_batch(roof, kind, t, ctx),
            })
    return pd.DataFrame(rows)


@click.command()
@click.option("--model", "model_name", default="diffusiongemma-26b-a4b", show_default=True, help="Catalog name or config.json path.")
@click.option("--hardware", default=default_hardware(), show_default=True, help="Catalog id or a hardware JSON file.")
@click.option("--hardware-file", type=click.Path(), default=None, help="JSON file describing extra GPUs.")
@click.option("--precision", default="bf16", show_default=True)
@click.option("--pass-kind", "kinds", default=None, help="Comma list; default: every pass kind of the model's modes.")
@click.option("--batch", "batch", default=None, help="Sequences in the pass; a comma list gives a sweep.")
@click.option("--sweep", is_flag=True, help="Sweep batch 1,2,4,...,256 (instead of --batch).")
@click.option("--tokens", type=int, default=None, help="Query tokens per sequence (default: natural for the kind).")
@click.option("--prompt", type=click.IntRange(min=1), default=1024, show_default=True, help="Prompt tokens for prefill passes.")
@click.option("--context", type=click.IntRange(min=0), default=1024, show_default=True, help="Cached tokens before non-prefill passes.")
@click.option("--draft-tokens", type=click.IntRange(1, 16), default=4, show_default=True, help="MTP k (verify covers k+1).")
@click.option("--csv", "csv_path", type=click.Path(), default=None, help="Also write the table as CSV.")
def roofline(model_name, hardware, hardware_file, precision, kinds, batch, sweep, tokens, prompt, context, draft_tokens, csv_path):
    """Physical limit (compute vs memory) of every pass kind at a batch shape.

    Example: costmodel roofline --model diffusiongemma-26b-a4b --hardware h200 --precision bf16 --batch 1
    """
    model = get_model(model_name)
    if kinds:
        kind_list = parse_list(kinds, "pass-kind")
        for k in kind_list:
            if k not in PASS_KINDS:
                raise UserError(f"unknown pass kind {k!r}", f"use one of {', '.join(PASS_KINDS)}")
    else:
        kind_list = list(dict.fromkeys(k for md in modes_of_family(model.family) for k in md.pass_kinds))
    if tokens is not None and tokens < 1:
        raise UserError(f"--tokens {tokens} is below 1", "give at least one token per sequence")
    if sweep and batch:
        raise UserError("--sweep sweeps its own batches (1, 2, 4, ..., 256) and --batch gives others", "give one of --sweep and --batch")
    batches = parse_ints(batch, "batch") if batch else ([1, 2, 4, 8, 16, 32, 64, 128, 256] if sweep else [1])
    df = roofline_table(model_name, hardware, precision, kind_list, batches, prompt, context, draft_tokens, tokens, hardware_file)
    con = make_console()
    table = Table(title=f"Roofline: {model.name} on {df.hardware.iloc[0]} ({precision})")
    for col in ["pass_kind", "seqs", "tokens/seq", "ctx", "GFLOP", "GB moved", "compute ms", "memory ms", "limit ms", "bound"]:
        table.add_column(col, justify="right" if col not in ("pass_kind", "bound") else "left")
    for r in df.itertuples():
        table.add_row(r.pass_kind, str(r.seqs), str(r.tokens_per_seq), str(r.context_tokens), f"{r.gflop:,.1f}", f"{r.gb_moved:.2f}",
                      f"{r.compute_ms:.3f}", f"{r.memory_ms:.3f}", f"{r.roofline_ms:.3f}", r.bound)
    con.print(table)
    for kind, g in df.groupby("pass_kind", sort=False):
        x = g.compute_bound_from_seqs.iloc[0]
        con.print(f"{kind}: " + (f"turns compute-bound at {int(x)} sequences" if pd.notna(x) else "memory-bound up to 4096 sequences"))
    if csv_path:
        write_csv(csv_path, df)
        con.print(f"wrote {csv_path}")

"""Outputs of `costmodel analyze`: the tables (CSV and parquet), a short summary.md and a
self-contained summary.html with the bin-sweep chart inline (plus bin_sweep.svg beside them).

The summary is built once as a list of blocks (heading, paragraph, warning, table, chart) and
rendered to both formats, so the markdown and the HTML always say the same thing. Every write is
atomic (costmodel.atomic).
"""

from __future__ import annotations

import html
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from costmodel import atomic, outputset
from measure.analyze.core import BIN_SIZES, CONTROL_BLOCK, POOLED, Analysis
from costmodel.schemas.rundir import RunManifest

TABLES = ("regimes", "bin_sweep", "auroc", "canvases", "generations", "hook_checks")
CHART = "bin_sweep.svg"


@dataclass
class Source:
    """Where the analysed tables came from: a run directory (with its manifest) or two files."""

    label: str
    manifest: RunManifest | None = None


@dataclass
class Block:
    kind: str  # h1 | h2 | p | warn | table | chart | list
    text: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    items: list[str] = field(default_factory=list)


def provenance_warning(source: Source) -> str | None:
    """The plain statement a summary must open with when the commits are not the model's own."""
    m = source.manifest
    can_show = ("What they can show: that the accept_canvas hook, the run directory and this analysis work end to end, "
                "and the structure of the hook data (row counts, positions inside the canvas, first acceptances that agree "
                "with new_positions, re-noise records, entropy lists aligned with positions; see Hook-data checks).")
    if m is None:
        return ("Provenance unknown: these tables were given without a run manifest, so nothing here says whether the commits "
                "are DiffusionGemma's own behaviour (real weights) or random weights / a replayed schedule. Treat every "
                "statistic below as describing these tables only. " + can_show)
    if m.commit_source == "model":
        return None
    what = {
        "random-weights": "random weights (weights: " + m.weights + "), not trained DiffusionGemma weights",
        "replay": "a replayed or constructed commit schedule, not the model deciding what to accept",
        "none": "a run that records no model commit behaviour",
    }.get(m.commit_source, m.commit_source)
    return (f"These commit statistics come from {what}. They cannot describe DiffusionGemma's commit behaviour: "
            "commit order, tau_b, the bin sweep, tokens per call, same-call pairs, accept-calls, re-noising, commit "
            "entropy and confidence-vs-correctness all reflect that source. " + can_show)


def fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def fmt_ci(mean, lo, hi, digits: int = 3) -> str:
    if isinstance(mean, float) and math.isnan(mean):
        return "n/a"
    return f"{fmt(mean, digits)} [{fmt(lo, digits)}, {fmt(hi, digits)}]"


def _header_blocks(a: Analysis, source: Source) -> list[Block]:
    """Title, provenance warning, the run's line and what was analysed."""
    m = source.manifest
    title = f"Commit-order analysis: {m.run_id if m else source.label}"
    blocks = [Block("h1", title)]
    warning = provenance_warning(source)
    if warning:
        blocks.append(Block("warn", warning))
    run_line = f"Source: `{source.label}`"
    if m:
        run_line += f"; mode {m.mode}, model {m.model}, weights {m.weights}, commit_source {m.commit_source}, run status {m.status}"
        if m.status != "complete":
            run_line += f" ({len(m.done_units)} of {len(m.planned_units) or len(m.done_units)} units done)"
    blocks.append(Block("p", run_line + "."))
    blocks.append(Block("p", f"Split analysed: {a.split}. {len(a.generations)} generations, {len(a.canvases)} canvases, "
                             f"{a.regimes['prompts'].sum()} prompts over {len(a.regimes)} regimes. Prompt-clustered bootstrap: "
                             f"{a.bootstrap_resamples} resamples, seed {a.seed}. Content positions only (before the first EOS/pad) "
                             f"unless marked raw."))
    return blocks


def _regime_blocks(r) -> list[Block]:
    """The per-regime tables: commit order, then commit rates (with a note on low content coverage)."""
    blocks = [Block("h2", "Commit order per regime")]
    blocks.append(Block("table", header=["regime", "gens (prompts x seeds)", "tau_b content [95% CI]", "seed SD", "raw-canvas tau_b (EOS/pad incl.)",
                                         f"block-seq. control (/{CONTROL_BLOCK})", "re-noise events (/gen)", "monotone canvases", "tau_b monotone only"],
                        rows=[[x.regime, f"{x.generations} ({x.prompts} x {x.seeds})",
                               fmt_ci(x.tau_b_content_mean, x.tau_b_content_ci_lo, x.tau_b_content_ci_hi), fmt(x.tau_b_content_seed_sd),
                               fmt(x.tau_b_raw_canvas_mean), fmt(x.tau_b_block_seq_control_mean),
                               f"{x.renoise_events_content_total} ({fmt(x.renoise_events_content_per_generation, 2)})",
                               f"{x.monotone_canvases} of {x.canvases}", fmt(x.tau_b_monotone_mean)] for x in r.itertuples()]))
    blocks.append(Block("h2", "Commit rates per regime"))
    blocks.append(Block("table", header=["regime", "content positions (mean)", "content coverage", "tokens / accept-call", "same-call pair fraction",
                                         "accept-calls / gen mean (min-max)", "committing calls / gen", "commit entropy nats (canvas means: mean, min-max)"],
                        rows=[[x.regime, fmt(x.content_positions_mean, 1), fmt(x.content_coverage_frac_mean, 3), fmt(x.tokens_per_accept_call_mean, 1),
                               fmt(x.same_call_pair_frac_mean, 2),
                               f"{fmt(x.accept_calls_per_generation_mean, 1)} ({x.accept_calls_per_generation_min}-{x.accept_calls_per_generation_max})",
                               fmt(x.committing_calls_per_generation_mean, 1),
                               f"{fmt(x.commit_entropy_mean_nats, 4)} ({fmt(x.commit_entropy_canvas_min_nats, 4)}-{fmt(x.commit_entropy_canvas_max_nats, 4)})"]
                              for x in r.itertuples()]))
    low_cov = r[r["content_coverage_frac_mean"] < 0.999]
    if not low_cov.empty:
        blocks.append(Block("p", "Content coverage below 1: some content positions were never accepted ("
                                 + ", ".join(f"{x.regime} {x.content_coverage_frac_mean:.1%}" for x in low_cov.itertuples())
                                 + " accepted on average). They have no commit call and are left out of tau_b; random weights accept "
                                   "about one position per call, so most of their canvas is never accepted."))
    return blocks


def _bin_sweep_blocks(a: Analysis) -> list[Block]:
    sweep = a.bin_sweep.pivot(index="regime", columns="bin_positions", values="tau_b_mean")
    return [Block("h2", "Bin sweep: block-level tau_b by bin size"),
            Block("table", header=["regime"] + [("1 (token)" if b == 1 else str(b)) for b in BIN_SIZES],
                  rows=[[reg] + [fmt(sweep.loc[reg, b]) for b in BIN_SIZES] for reg in sweep.index]),
            Block("chart", CHART),
            Block("p", "Bin size is a choice of ruler, not a property of the model: read the whole sweep, never one bin. "
                       "A bin wider than a canvas's content puts all its positions in one bin, where tau_b is undefined "
                       "(n/a; per-bin counts in bin_sweep.csv).")]


def _check_blocks(a: Analysis) -> list[Block]:
    """The hook-data checks and the analysis notes."""
    c = a.checks
    problems = c.problems()
    blocks = [Block("h2", "Hook-data checks"),
              Block("p", f"{c.commit_rows} commit rows over {c.canvases_with_commits} canvases. "
                         + ("All records consistent: first acceptances agree with new_positions, every re-noised position was accepted "
                            "before, entropy lists match position lists, all positions inside the canvas."
                            if not problems else "Problems found:"))]
    if problems:
        blocks.append(Block("list", items=problems))
    if a.notes:
        blocks.append(Block("h2", "Notes"))
        blocks.append(Block("list", items=list(a.notes)))
    return blocks


def summary_blocks(a: Analysis, source: Source, files: list[str]) -> list[Block]:
    """The summary (markdown and HTML) as blocks, in reading order."""
    return (_header_blocks(a, source) + _regime_blocks(a.regimes) + _bin_sweep_blocks(a) + _auroc_blocks(a) + _check_blocks(a)
            + [Block("h2", "Definitions"), Block("list", items=DEFINITIONS), Block("p", "Files: " + ", ".join(files) + ".")])


DEFINITIONS = [
    "Content positions: canvas positions before the first EOS/pad (eos_positions of the generations table). Trailing EOS/pad "
    "positions commit first, so the raw-canvas tau_b (all accepted positions) is shown only to make that trap visible.",
    "Commit call of a position: the first accept_canvas call whose accepted_positions holds it (first-acceptance order; "
    "re-noised positions keep their first call). Positions never accepted are left out.",
    "tau_b: Kendall tau_b (scipy.stats.kendalltau, variant b, tie-aware) between commit call and position, per canvas; "
    "positions first accepted in one call are tied. A regime's figure is the mean over canvases (one canvas per generation "
    "for a one-canvas run, so the mean over generations); canvases where it is undefined are left out and counted.",
    "95% CI: percentile interval over prompt-clustered bootstrap resamples (prompts drawn with replacement, each with all its "
    "seeds). Seed SD: standard deviation (ddof 1) across seeds of the per-seed mean tau_b.",
    "Bin sweep: tau_b between commit call and position // bin, per canvas, averaged like tau_b. Block-sequential control: "
    f"tau_b of call = position // {CONTROL_BLOCK} (tied within a block) against position, over each canvas's content length; "
    f"for length L it equals sqrt(1 - T / C(L,2)), T = within-block pairs.",
    "Tokens per accept-call: content positions first accepted in a canvas / accept_canvas calls on it (mean over canvases). "
    "Accept-calls per generation: accept_canvas calls summed over a generation's canvases; committing calls: those that "
    "first-accept at least one content position.",
    "Same-call pair fraction: among pairs of accepted content positions of a canvas, the fraction first accepted in the same "
    "call (sum of C(n_call, 2) / C(n, 2)); mean over canvases.",
    "Commit entropy: entropy (nats) recorded at a content position's first acceptance. Commit confidence of a generation: "
    "minus its mean commit entropy over content positions.",
    "Re-noise events: entries of renoised_positions on content positions. A canvas is monotone when none of its content "
    "positions was re-noised; tau_b monotone only = the same mean over monotone canvases.",
    "AUROC: probability that a correct generation has higher commit confidence than an incorrect one (Mann-Whitney U / "
    "(n_correct x n_incorrect), ties one half), within a regime, CI by the same prompt resampling. The pooled figure resamples "
    "prompts within each regime and is shown only beside the per-regime ones.",
]


def _auroc_blocks(a: Analysis) -> list[Block]:
    out = [Block("h2", "Commit confidence vs correctness (within regime)")]
    au = a.auroc
    if au.empty:
        out.append(Block("p", "No generation carries a correctness label (`correct` column), so AUROC is not computed."))
        return out
    per = au[au["scope"] == "regime"]
    pooled = au[au["scope"] == "pooled"]
    rows = [[x.regime, f"{x.correct} / {x.incorrect}", fmt_ci(x.auroc, x.auroc_ci_lo, x.auroc_ci_hi), str(x.bootstrap_resamples_used)] for x in per.itertuples()]
    if not pooled.empty:
        p = pooled.iloc[0]
        rows.append([f"{POOLED}: do not use alone", f"{p.correct} / {p.incorrect}", fmt_ci(p.auroc, p.auroc_ci_lo, p.auroc_ci_hi), str(p.bootstrap_resamples_used)])
    out.append(Block("table", header=["regime", "correct / incorrect", "AUROC [95% CI]", "resamples with both classes"], rows=rows))
    if not pooled.empty:
        p = pooled.iloc[0]
        text = ("Simpson's paradox warning: the pooled AUROC mixes regimes that differ in both accuracy and confidence level, so it can "
                "point the other way from every regime; it is shown only beside the per-regime figures and must not be read alone.")
        defined = per["auroc"].dropna()
        if not math.isnan(p.auroc) and not defined.empty and ((defined > 0.5).all() and p.auroc < 0.5 or (defined < 0.5).all() and p.auroc > 0.5):
            text += f" Here it does: pooled {p.auroc:.3f} against per-regime {', '.join(f'{v:.3f}' for v in defined)}."
        out.append(Block("warn", text))
    undefined = per[per["auroc"].isna()]
    if not undefined.empty:
        out.append(Block("p", "AUROC undefined where a regime has only one class: " + ", ".join(undefined["regime"]) + "."))
    return out


# -- rendering ----------------------------------------------------------------------------------------

def _rendered(blocks: list[Block], render: dict) -> list[str]:
    """Each block through its kind's renderer (`render`: kind -> Block -> text), in order: the one
    walk both formats share, so they say the same thing; a kind a format lacks is left out."""
    return [render[b.kind](b) for b in blocks if b.kind in render]


def _markdown_table(b: Block) -> str:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(map(esc, b.header)) + " |", "|" + "---|" * len(b.header)]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in b.rows]
    return "\n".join(lines)


_MARKDOWN = {
    "h1": lambda b: f"# {b.text}",
    "h2": lambda b: f"## {b.text}",
    "p": lambda b: b.text,
    "warn": lambda b: f"> **WARNING.** {b.text}",
    "list": lambda b: "\n".join(f"- {i}" for i in b.items),
    "chart": lambda b: f"![bin sweep]({b.text})",
    "table": _markdown_table,
}


def render_markdown(blocks: list[Block]) -> str:
    return "\n\n".join(_rendered(blocks, _MARKDOWN)) + "\n"


CSS = """body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:0.5rem 0 1rem}th,td{border:1px solid #ccc;padding:0.25rem 0.5rem;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.warn{border:2px solid #b00;background:#fff0f0;padding:0.6rem 0.9rem;margin:1rem 0}
code{background:#f3f3f3;padding:0 0.2rem}"""


def _html_table(b: Block) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in b.header)
    rows = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in b.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _html(svg: str) -> dict:
    """The HTML renderers; the chart block is the inline `svg`."""
    e = html.escape
    return {
        "h1": lambda b: f"<h1>{e(b.text)}</h1>",
        "h2": lambda b: f"<h2>{e(b.text)}</h2>",
        "p": lambda b: f"<p>{_code_spans(e(b.text))}</p>",
        "warn": lambda b: f'<div class="warn"><strong>WARNING.</strong> {_code_spans(e(b.text))}</div>',
        "list": lambda b: "<ul>" + "".join(f"<li>{_code_spans(e(i))}</li>" for i in b.items) + "</ul>",
        "chart": lambda b: f"<figure>{svg}</figure>",
        "table": _html_table,
    }


def render_html(blocks: list[Block], svg: str) -> str:
    e = html.escape
    body = _rendered(blocks, _html(svg))
    title = e(blocks[0].text) if blocks else "commit-order analysis"
    return f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{CSS}</style></head>\n<body>\n' + "\n".join(body) + "\n</body></html>\n"


def _code_spans(text: str) -> str:
    parts = text.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def bin_sweep_svg(a: Analysis) -> str:
    """Mean block-level tau_b against bin size per regime, with the bootstrap CI as a band."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.hashsalt": "costmodel-analyze", "svg.fonttype": "path"}):
        fig = Figure(figsize=(7.0, 4.2))
        ax = fig.add_subplot()
        for regime, d in a.bin_sweep.groupby("regime", sort=True):
            d = d.sort_values("bin_positions")
            line, = ax.plot(d["bin_positions"], d["tau_b_mean"], marker="o", label=str(regime))
            ax.fill_between(d["bin_positions"], d["tau_b_ci_lo"], d["tau_b_ci_hi"], color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(BIN_SIZES), [("1\n(token)" if b == 1 else str(b)) for b in BIN_SIZES])
        ax.axhline(0.0, color="#888", linewidth=0.8)
        ax.set_xlabel("bin size (positions)")
        ax.set_ylabel("tau_b (mean over canvases)")
        ax.set_title("Block-level tau_b vs bin size, content positions (band: 95% prompt-bootstrap CI)", fontsize=9)
        ax.legend(fontsize=8, ncols=2)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def write_report(a: Analysis, outdir: str | Path, source: Source) -> list[Path]:
    """Write every table (CSV + parquet), the chart, summary.md and summary.html: one output set,
    published whole (costmodel/outputset.py); returns the paths."""
    out = Path(outdir)
    with outputset.publishing(out, "analyze") as stage:
        written = _write_files(a, stage, source)
    return outputset.published(written, stage, out) + [out / outputset.MANIFEST]


def _write_files(a: Analysis, out: Path, source: Source) -> list[Path]:
    frames = {
        "regimes": a.regimes, "bin_sweep": a.bin_sweep, "auroc": a.auroc, "canvases": a.canvases, "generations": a.generations,
        "hook_checks": pd.DataFrame([{"check": k, "count": v} for k, v in vars(a.checks).items()]),
    }
    written: list[Path] = []
    for name in TABLES:
        written.append(atomic.write_csv(out / f"{name}.csv", frames[name]))
        written.append(atomic.write_parquet(out / f"{name}.parquet", frames[name]))
    svg = bin_sweep_svg(a)
    written.append(atomic.write_text(out / CHART, svg))
    names = [p.name for p in written] + ["summary.md", "summary.html"]
    blocks = summary_blocks(a, source, names)
    written.append(atomic.write_text(out / "summary.md", render_markdown(blocks)))
    written.append(atomic.write_text(out / "summary.html", render_html(blocks, svg)))
    return written

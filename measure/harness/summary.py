"""Per-shape medians of a run's timed passes (warm-ups excluded), with spread and efficiency against
the roofline, plus the hook overhead and profiles the run wrote beside its tables. Derived data:
`python -m measure.harness.summary RUN` recomputes RUN/summary.json and RUN/summary.md."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel import atomic
from costmodel.schemas.rundir import Run, load_run



GROUP = ["engine", "pass_kind", "seqs", "tokens_per_seq", "prompt_tokens", "canvas", "draft_tokens"]


def pass_medians(passes: pd.DataFrame) -> pd.DataFrame:
    """One row per (engine, pass kind, sequences, query tokens, prompt tokens, and for diffusion the
    canvas, for MTP k): n, the context range, median/p10/p90/min/max GPU ms, median wall and forward
    ms, median roofline ms and median x_roofline. Decode, draft and verify steps of one generation
    share a group (their context grows by a few tokens per step)."""
    if passes.empty:
        return pd.DataFrame()
    df = passes[~passes["warmup"].astype(bool)] if "warmup" in passes else passes
    if "cell" in df:
        df = df[~df["cell"].astype(str).str.startswith("probe")]
    if df.empty:
        return pd.DataFrame()
    keys = [k for k in GROUP if k in df and df[k].notna().any()]
    g = df.groupby(keys, dropna=False)
    out = g["gpu_ms"].agg(n="size", gpu_ms_median="median", gpu_ms_min="min", gpu_ms_max="max").reset_index()
    out["context_tokens"] = g["context_tokens"].min().to_numpy()
    out["context_tokens_max"] = g["context_tokens"].max().to_numpy()
    out["gpu_ms_p10"] = g["gpu_ms"].quantile(0.1).to_numpy()
    out["gpu_ms_p90"] = g["gpu_ms"].quantile(0.9).to_numpy()
    out["wall_ms_median"] = g["wall_ms"].median().to_numpy()
    if "forward_gpu_ms" in df:
        out["forward_gpu_ms_median"] = g["forward_gpu_ms"].median().to_numpy()
    if "roofline_ms" in df:
        out["roofline_ms"] = g["roofline_ms"].median().to_numpy()
        out["memory_ms"] = g["memory_ms"].median().to_numpy()
        out["compute_ms"] = g["compute_ms"].median().to_numpy()
        out["x_roofline_median"] = g["x_roofline"].median().to_numpy()
    return out.sort_values(keys).reset_index(drop=True)


def mtp_acceptance_counts(passes: pd.DataFrame, verify: str) -> dict[int, dict]:
    """Per k: drafts (rows x rounds) and, per draft position j, rounds whose draft j was accepted
    (the vLLM counter definition measure.fit.mtp reads); `verify`: the pass kind that verifies the drafts."""
    out: dict[int, dict] = {}
    if passes.empty or "accepted_per_seq" not in passes:
        return out
    v = passes[(passes["pass_kind"] == verify) & ~passes["warmup"].astype(bool)]
    for k, grp in v.groupby("draft_tokens"):
        k = int(k)
        acc = np.concatenate([np.asarray(a, dtype=int) for a in grp["accepted_per_seq"]]) if len(grp) else np.empty(0, int)
        out[k] = {"num_drafts": int(acc.size), "num_accepted_tokens_per_pos": [int((acc > j).sum()) for j in range(k)]}
    return out


def _fmt(x, nd=2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def write_summary(run: Run) -> dict:
    passes = run.table("passes")
    med = pass_medians(passes)
    m = run.manifest
    doc: dict = {"run_id": m.run_id, "mode": m.mode, "model": m.model, "weights": m.weights, "commit_source": m.commit_source,
                 "hardware": m.hardware, "gpu_name": m.gpu_name, "engine": m.engine, "status": m.status,
                 "pass_medians": json.loads(med.to_json(orient="records")) if not med.empty else []}
    for name in ("hook_overhead", "campaign_time"):
        p = run.path / f"{name}.json"
        if p.exists():
            doc[name] = json.loads(p.read_text())
    profiles = sorted((run.path / "profile").glob("*.json")) if (run.path / "profile").exists() else []
    doc["profiles"] = [json.loads(p.read_text()) for p in profiles]
    serving = m.serving  # the run's mode, resolved once from its manifest
    if serving.assistant:
        counts = mtp_acceptance_counts(passes, serving.group_kinds[0])
        doc["mtp_acceptance"] = {"source": m.settings.get("mtp_acceptance_source"), "counts_per_k": counts}
        if m.weights == "checkpoint":
            for k, c in counts.items():
                atomic.write_json(run.path / f"mtp_acceptance_k{k}.json", {**c, "source": f"costmodel measure run {m.run_id} ({m.model}, greedy verification, k={k})"})
    if run.has("generations"):
        gens = run.table("generations")
        doc["generations"] = {"canvases": int(len(gens)), "steps_mean": float(gens["steps"].mean()) if len(gens) else None,
                              "content_length_mean": float(gens["content_length"].mean()) if len(gens) else None}
    atomic.write_json(run.path / "summary.json", doc)
    atomic.write_text(run.path / "summary.md", render_markdown(doc, med))
    return doc


def render_markdown(doc: dict, med: pd.DataFrame) -> str:
    lines = [f"# {doc['run_id']}", "",
             f"mode {doc['mode']}, model {doc['model']}, weights {doc['weights']}, commit_source {doc['commit_source']}, "
             f"GPU {doc['gpu_name'] or 'none'} ({doc['hardware'] or 'no catalog entry'}), engine {doc['engine'].get('engine')}, "
             f"experts {doc['engine'].get('experts_implementation')}, status {doc['status']}", ""]
    if doc["weights"] == "random":
        lines += ["Random weights: pass timings are the architecture's; commit statistics and acceptance are NOT the model's.", ""]
    if not med.empty:
        lines += ["| pass | seqs | tokens/seq | context | n | GPU ms median [p10, p90] | forward ms | roofline ms | x roofline |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in med.to_dict("records"):
            ctx = f"{r['context_tokens']}" + (f"-{r['context_tokens_max']}" if r["context_tokens_max"] != r["context_tokens"] else "")
            lines.append(f"| {r['pass_kind']} | {r['seqs']} | {r['tokens_per_seq']} | {ctx} | {r['n']} | "
                         f"{_fmt(r['gpu_ms_median'])} [{_fmt(r['gpu_ms_p10'])}, {_fmt(r['gpu_ms_p90'])}] | {_fmt(r.get('forward_gpu_ms_median'))} | "
                         f"{_fmt(r.get('roofline_ms'))} | {_fmt(r.get('x_roofline_median'))} |")
        lines.append("")
    h = doc.get("hook_overhead")
    if h:
        lines += [f"Hook overhead ({h['engine']}, batch {h['batch']}, prompt {h['prompt_tokens']}): {_fmt(h['overhead_ms_per_step'], 3)} ms per "
                  f"denoising step = {_fmt(h['overhead_pct_of_step'])}% of a {_fmt(h['denoise_step_gpu_ms_median'])} ms step; "
                  f"outputs identical hooked vs unhooked: {h['identical_outputs']} ({h['identical_pairs']}).", ""]
    for p in doc.get("profiles", []):
        cats = ", ".join(f"{k} {v:.2f}" for k, v in list(p["categories_ms_per_step"].items())[:6])
        lines += [f"Profile {p['unit']} ({p['pass_kind']}, {p['seqs']} seqs, context {p['context_tokens']}): {p['total_ms_per_step']:.2f} ms "
                  f"{p['time']} per step: {cats} (ms)", ""]
    t = doc.get("campaign_time")
    if t:
        lines += [f"Wall time of the command: {t.get('command_wall_s', 0):.0f} s (model build {t.get('build_s', 0):.1f} s).", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    for path in argv:
        write_summary(load_run(path))
        print(Path(path) / "summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

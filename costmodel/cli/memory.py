"""`costmodel memory`: one replica's memory budget per term (weights, activations, CUDA graphs, KV
blocks, diffusion sampler buffers, headroom) with sources, and the engine limits it implies, as
vLLM 0.32 computes them (costmodel/memory.py; docs/memory.md)."""

from __future__ import annotations

import click
from rich.table import Table

from costmodel.console import make_console
from costmodel.errors import UserError
from costmodel.hardware import catalog, default_hardware, get_hardware, load_user_hardware
from costmodel.memory import EngineSettings, kv_capacity, replica_memory, request_limit, simple_kv_tokens
from costmodel.modes import all_modes, get_mode, mode_names
from costmodel.options import parse_ints
from costmodel.precision import PRECISIONS, get_precision


def _settings(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, max_model_len, block_size, k, canvas):
    return EngineSettings(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                          gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, block_size=block_size,
                          num_speculative_tokens=k, canvas_length=canvas)


def _one(con, hw, mode, prec, settings, contexts):
    """Terms table, limits table and capacity at the given contexts for one GPU and mode."""


    mem = replica_memory(hw, mode, prec, settings)
    check_contexts(mem, contexts)
    t = Table(title=f"Replica memory: {mem.model}{' + ' + mem.assistant if mem.assistant else ''} ({mode.name}) on {hw.id}, {prec.name}")
    for c in ("term", "GB", "GiB", "source"):
        t.add_column(c, justify="right" if c in ("GB", "GiB") else "left", overflow="fold")
    for term in mem.terms:
        t.add_row(term.name, f"{term.bytes / 1e9:,.3f}", f"{term.bytes / 2**30:,.3f}", term.source + (f" [dim]({term.note})[/dim]" if term.note else ""))
    con.print(t)
    lim = mem.limits
    s = Table(title="Engine limits (vLLM 0.32 defaults; explicit settings win)")
    for c in ("setting", "value", "from"):
        s.add_column(c, overflow="fold")
    for name in ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "max_model_len", "block_size"):
        s.add_row(name, f"{getattr(lim, name):g}" if isinstance(getattr(lim, name), float) else f"{getattr(lim, name):,}", lim.source.get(name, ""))
    s.add_row("KV blocks", f"{lim.num_gpu_blocks:,}", "engine budget - weights - activations - CUDA graphs, / bytes per block")
    s.add_row("KV cache size (vLLM's log line)", f"{lim.kv_tokens_logged:,} tokens", f"max concurrency {lim.max_concurrency_logged:.2f}x at max_model_len")
    s.add_row("KV slots per running request per step", f"{lim.step_tokens:,}",
              (mode.kv_step_slots.__doc__ or "").strip() or "the mode's step slots (costmodel/modes)")
    if lim.max_canvases_by_memory is not None:
        s.add_row("canvases the sampler headroom holds", f"{lim.max_canvases_by_memory:,}", "(1 - utilisation) x device / sampler bytes per canvas")
    s.add_row("binding limit", lim.binding, "")
    con.print(s)
    c = Table(title="Concurrent requests at a context length (KV blocks vs max_num_seqs)")
    for col in ("context tokens", "KV blocks / request", "requests by KV", "running", "binding", "token budget", "today's simple model (tokens)"):
        c.add_column(col, justify="right")
    simple = simple_kv_tokens(hw, mode, prec)
    for n in contexts:
        cap = kv_capacity(mem, n)
        c.add_row(f"{n:,}", f"{cap.blocks_per_request:,.0f}", f"{cap.requests:,}", f"{cap.max_running:,}", cap.binding, f"{cap.tokens:,}", f"{simple:,}")
    con.print(c)


def check_engine_limits(mode, max_model_len, block_size) -> None:
    """The relations simulate checks too (costmodel/inputs.py RELATIONS): a max_model_len within the
    model's context, a KV block a multiple of vLLM's GPU block unit."""
    from costmodel.engine_settings import BLOCK_MULTIPLE_GPU, SRC_BLOCK_KERNEL
    from costmodel.models import get_model

    model = get_model(mode.default_model)
    ctx = int(model.text_config.get("max_position_embeddings", 262144))
    if max_model_len is not None and max_model_len > ctx:
        raise UserError(f"--max-model-len {max_model_len:,} is above {model.name}'s context of {ctx:,} tokens (max_position_embeddings)",
                        f"give --max-model-len <= {ctx:,}")
    if block_size is not None and block_size % BLOCK_MULTIPLE_GPU:
        raise UserError(f"--block-size {block_size} is not a multiple of {BLOCK_MULTIPLE_GPU}: vLLM's FlashAttention backend cannot page KV in it "
                        f"({SRC_BLOCK_KERNEL})", f"give a multiple of {BLOCK_MULTIPLE_GPU}, e.g. {max(16, block_size // 16 * 16)}")


def check_contexts(mem, contexts) -> None:
    """A context no request can have on this replica (the model's context, max_model_len, the KV
    cache) is refused, naming the limit, not shown as a concurrency."""
    lim = request_limit(mem)
    over = [n for n in contexts if n > lim.tokens]
    if over:
        raise UserError(f"--context {over[0]:,} is above {lim.why} on {mem.hardware} ({mem.mode})",
                        f"give contexts <= {lim.tokens:,}")


def _fit(hw, mode, prec_name, settings):
    """(memory, None) at the given precision, or at the widest catalog precision that fits when none
    was given; (None, reason) when nothing fits."""

    names = [prec_name] if prec_name else [p.name for p in sorted(PRECISIONS.values(), key=lambda p: -p.weight_bytes)
                                           if p.compute in hw.tflops]
    reason = None
    for name in names:
        try:
            return replica_memory(hw, mode, get_precision(name), settings), None
        except UserError as e:
            reason = reason or str(e)
    return None, reason


def _all(con, specs, prec_name, settings, contexts):
    """One row per catalog GPU x mode (at --precision, else each GPU's widest precision that fits);
    a combination that does not fit is listed below the table with its one-line reason."""


    t = Table(title=f"Replica memory per GPU x mode ({prec_name or 'widest precision that fits'}; vLLM 0.32 defaults)")
    cols = ["GPU", "mode", "precision", "weights GB", "act+graphs GB", "KV GB", "KV blocks", "KV tokens (vLLM log)", "max_num_seqs"]
    cols += [f"requests @{n:,}" for n in contexts] + [f"binding @{contexts[0]:,}"] + ["simple model tokens"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("GPU", "mode", "precision", "binding") else "right", overflow="fold")
    failed = []
    for hw in specs:
        for mode in all_modes():
            mem, reason = _fit(hw, mode, prec_name, settings)
            if mem is None:
                failed.append(f"{hw.id} {mode.name}: {reason}")
                continue
            check_contexts(mem, contexts)
            gb = {k: sum(x.bytes for x in mem.terms if x.kind in k) / 1e9 for k in (("weights",), ("activations", "graphs"), ("kv",))}
            lim = mem.limits
            caps = [kv_capacity(mem, n) for n in contexts]
            t.add_row(hw.id, mode.name, mem.precision, f"{gb[('weights',)]:.2f}", f"{gb[('activations', 'graphs')]:.2f}", f"{gb[('kv',)]:.2f}",
                      f"{lim.num_gpu_blocks:,}", f"{lim.kv_tokens_logged:,}", f"{lim.max_num_seqs:,}",
                      *[f"{c.requests:,}" for c in caps], caps[0].binding, f"{simple_kv_tokens(hw, mode, get_precision(mem.precision)):,}")
    con.print(t)
    for line in failed:
        con.print(f"does not fit: {line}")


@click.command()
@click.option("--hardware", default=default_hardware("memory"), show_default=True, help="Catalog id or a hardware JSON file.")
@click.option("--hardware-file", type=click.Path(), default=None, help="JSON file describing extra GPUs.")
@click.option("--mode", type=click.Choice(mode_names()), default=mode_names()[0], show_default=True)
@click.option("--precision", default=None, help="bf16, fp8, int4 or nvfp4 (costmodel/precision.py); default bf16, with --all "
              "each GPU's widest precision that fits.")
@click.option("--all", "all_", is_flag=True, help="Every catalog GPU x mode, one row each.")
@click.option("--context", default="1024,8192", show_default=True, help="Context lengths (tokens) to show concurrency at.")
@click.option("--max-num-seqs", type=int, default=None, help="Explicit setting (wins over vLLM's default).")
@click.option("--max-num-batched-tokens", type=int, default=None)
@click.option("--gpu-memory-utilization", type=float, default=None)
@click.option("--max-model-len", type=int, default=None)
@click.option("--block-size", type=int, default=None)
@click.option("--num-speculative-tokens", "k", type=int, default=None, help="MTP draft tokens k.")
@click.option("--canvas-length", type=int, default=None, help="Diffusion canvas length.")
def memory(hardware, hardware_file, mode, precision, all_, context, max_num_seqs, max_num_batched_tokens, gpu_memory_utilization,
           max_model_len, block_size, k, canvas_length):
    """Replica memory budget per term and the engine limits it implies (vLLM 0.32's own formulas)."""

    contexts = parse_ints(context, "context")
    check_engine_limits(get_mode(mode), max_model_len, block_size)
    settings = _settings(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, max_model_len, block_size, k, canvas_length).validate()
    con = make_console()
    if all_:
        specs = catalog()
        if hardware_file:
            specs.update(load_user_hardware(hardware_file))
        _all(con, list(specs.values()), precision, settings, contexts)
        return
    _one(con, get_hardware(hardware, hardware_file), get_mode(mode), get_precision(precision or "bf16"), settings, contexts)

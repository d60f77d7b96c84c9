"""A small OpenAI-compatible streaming server for the endpoint tests and the client benchmark.

Stdlib asyncio HTTP/1.1 (keep-alive, chunked SSE), bound to 127.0.0.1 only. Endpoints:
POST /v1/chat/completions and /v1/completions (stream=true, stream_options.include_usage and
continuous_usage_stats as vLLM implements them), GET /v1/models, /health, /metrics (Prometheus
text with vLLM's metric names, counters advancing with the work done).

Backends:
- `model`: real tokens from tiny transformers models with random weights on CPU, run one request at
  a time by an engine thread (so requests queue: vllm:num_requests_waiting is real):
    tiny-diffusiongemma  DiffusionGemmaForBlockDiffusion (canvas 32): each canvas streams as one
                         burst when it commits; denoising steps are counted from the generate()
                         streamer's put_draft calls, plus one commit step per canvas (vLLM's rule);
    tiny-gemma4          Gemma4ForCausalLM, one token per event;
    tiny-gemma4-mtp      the same AR tokens, grouped into verify steps whose accepted draft count is
                         drawn per step (per-position acceptance `--mtp-accept`, the synthetic
                         acceptance vLLM's own benchmarks use); spec_decode counters follow.
- `fast`: no model; sleep-paced steps (`--step-ms`), same three modes, every request concurrent.
  For the client benchmark and resilience tests.

Tokens have no tokenizer: a prompt is split on whitespace (one token per word, ids by CRC32) and a
token id t is streamed as the text " t<id>".

Fault injection, for resilience tests, by a directive in the prompt text `#fault=KIND[:ARG]`:
http500, http429, drop (connection cut after 2 events), truncate (clean end after 2 events, no
[DONE], no finish_reason), malformed (one unparseable event, then a normal stream), error_event
(an error object mid-stream), slow:S (S seconds before the response starts), stall (1 event then
silence), not_sse (a JSON answer to a streaming request), close (connection closed, no answer).

Run: python tests/servers/openai_server.py --backend fast --port 0   (prints "LISTENING <port>")
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import random
import re
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field

HOST = "127.0.0.1"
EOS_IDS = (1, 106)
FAULT_RE = re.compile(r"#fault=([a-z_0-9]+)(?::([0-9.]+))?")


# ---------------------------------------------------------------------------------------------
# metrics
# ---------------------------------------------------------------------------------------------
class Metrics:
    """vLLM-named Prometheus metrics; thread-safe (prometheus_client locks internally)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        r = self.registry = CollectorRegistry()
        L = ["model_name", "engine"]
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens processed.", L, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generation tokens processed.", L, registry=r)
        self.request_success = Counter("vllm:request_success", "Successful requests.", L + ["finished_reason"], registry=r)
        self.running = Gauge("vllm:num_requests_running", "Requests in model execution batches.", L, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be processed.", L, registry=r)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 means 100 percent.", L, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency.", L, registry=r)
        self.dg_steps = Counter("vllm:diffusion_num_denoising_steps", "Diffusion engine steps (commit steps included).", L, registry=r)
        self.dg_positions = Counter("vllm:diffusion_num_canvas_positions", "Canvas positions (canvas_length per canvas).", L, registry=r)
        self.dg_committed = Counter("vllm:diffusion_num_committed_tokens", "Tokens committed (emitted).", L, registry=r)
        self.sd_drafts = Counter("vllm:spec_decode_num_drafts", "Draft rounds.", L, registry=r)
        self.sd_draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Draft tokens proposed.", L, registry=r)
        self.sd_accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.", L, registry=r)
        self.sd_per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", L + ["position"], registry=r)

    def register(self, spec: "ModelSpec") -> None:
        """Expose a model's series at 0 from the start, as vLLM does (mode counters only for that mode)."""
        lab = (spec.name, "0")
        for m in (self.prompt_tokens, self.generation_tokens, self.running, self.waiting, self.kv):
            m.labels(*lab)
        if spec.mode == "diffusion":
            for m in (self.dg_steps, self.dg_positions, self.dg_committed):
                m.labels(*lab)
        if spec.mode == "mtp":
            for m in (self.sd_drafts, self.sd_draft_tokens, self.sd_accepted):
                m.labels(*lab)
            for pos in range(spec.k):
                self.sd_per_pos.labels(*lab, str(pos))

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


# ---------------------------------------------------------------------------------------------
# models and engines
# ---------------------------------------------------------------------------------------------
@dataclass
class ModelSpec:
    name: str
    mode: str  # diffusion | ar | mtp
    canvas_length: int = 32
    k: int = 4  # MTP draft tokens per step


@dataclass
class Job:
    """One generation; bursts of token ids go to `out` (None ends the stream)."""

    spec: ModelSpec
    prompt_ids: list[int]
    max_tokens: int
    ignore_eos: bool
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue
    cancelled: bool = False
    finish_reason: str = "length"
    generated: int = 0
    next_accept: int | None = None  # MTP: accepted drafts of the verify step being filled

    def emit(self, ids: list[int] | None) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, ids)


def tokenize(text: str, vocab: int) -> list[int]:
    return [2] + [10 + zlib.crc32(w.encode()) % (vocab - 10) for w in text.split()]


def cut_at_eos(ids: list[int], ignore_eos: bool) -> tuple[list[int], bool]:
    if ignore_eos:
        return ids, False
    for i, t in enumerate(ids):
        if t in EOS_IDS:
            return ids[:i], True
    return ids, False


class _Cancelled(Exception):
    pass


class FastEngine:
    """Sleep-paced steps, every request concurrently (an engine with an unbounded batch)."""

    def __init__(self, metrics: Metrics, step_ms: float, seed: int, mtp_accept: float, vocab: int = 512):
        self.m, self.step_s, self.rng, self.p, self.vocab = metrics, step_ms / 1e3, random.Random(seed), mtp_accept, vocab
        self.active = 0

    async def generate(self, job: Job) -> None:
        spec, m, lab = job.spec, self.m, (job.spec.name, "0")
        self.active += 1
        m.running.labels(*lab).set(self.active)
        m.prompt_tokens.labels(*lab).inc(len(job.prompt_ids))
        try:
            left = job.max_tokens
            while left > 0 and not job.cancelled:
                if spec.mode == "diffusion":
                    k = self.rng.randint(2, 6)
                    for _ in range(k + 1):  # k denoise steps + the commit step
                        await asyncio.sleep(self.step_s)
                    m.dg_steps.labels(*lab).inc(k + 1)
                    m.dg_positions.labels(*lab).inc(spec.canvas_length)
                    ids = [self._tok() for _ in range(min(spec.canvas_length, left))]
                    m.dg_committed.labels(*lab).inc(len(ids))
                elif spec.mode == "mtp":
                    await asyncio.sleep(self.step_s)
                    a = 0
                    while a < spec.k and self.rng.random() < self.p:
                        a += 1
                    m.sd_drafts.labels(*lab).inc()
                    m.sd_draft_tokens.labels(*lab).inc(spec.k)
                    m.sd_accepted.labels(*lab).inc(a)
                    for pos in range(spec.k):
                        m.sd_per_pos.labels(*lab, str(pos)).inc(1 if pos < a else 0)
                    ids = [self._tok() for _ in range(min(a + 1, left))]
                else:
                    await asyncio.sleep(self.step_s)
                    ids = [self._tok()]
                left -= len(ids)
                job.generated += len(ids)
                m.generation_tokens.labels(*lab).inc(len(ids))
                job.out.put_nowait(ids)
            job.finish_reason = "length"
        finally:
            self.active -= 1
            m.running.labels(*lab).set(self.active)
            job.out.put_nowait(None)

    def _tok(self) -> int:
        return self.rng.randrange(10, self.vocab)


class ModelEngine:
    """Real tiny models (random weights) on CPU, one request at a time in a worker thread."""

    KV_CAPACITY_TOKENS = 4096

    def __init__(self, metrics: Metrics, specs: dict[str, ModelSpec], seed: int, mtp_accept: float, denoise_steps: int):
        import torch

        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        torch.manual_seed(seed)
        self.torch = torch
        self.m, self.specs, self.p, self.denoise_steps = metrics, specs, mtp_accept, denoise_steps
        self.rng = random.Random(seed)
        self.models = {}
        for spec in specs.values():
            self.models[spec.name] = self._build(spec)
        self.vocab = 512
        self.q: queue.Queue = queue.Queue()
        self.kv_tokens = 0
        self._lock = threading.Lock()
        self._waiting: dict[str, int] = {s: 0 for s in specs}
        threading.Thread(target=self._worker, daemon=True).start()
        self._warmup()

    def _build(self, spec: ModelSpec):
        from costmodel.models import TINY_TEXT

        # Gemma4TextConfig's defaults add per-layer-input embeddings (262144 x 256 per layer) that
        # the public 26B-A4B config does not have; off, as in the harness (measure/harness/build.py).
        text = {**TINY_TEXT, "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}
        if spec.mode == "diffusion":
            from transformers import DiffusionGemmaConfig
            from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaForBlockDiffusion

            # DiffusionGemma always builds a Gemma-4 vision tower (0.17B at defaults; text never runs
            # it): a one-layer tower keeps the build fast, as the harness does for tiny shapes.
            vision = {"model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                      "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8, "position_embedding_size": 64}
            cfg = DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=spec.canvas_length)
            return DiffusionGemmaForBlockDiffusion(cfg).eval()
        shared = next((m for n, m in self.models.items() if self.specs[n].mode != "diffusion"), None)
        if shared is not None:
            return shared  # the MTP model streams the AR model's tokens
        from transformers import Gemma4ForCausalLM, Gemma4TextConfig

        return Gemma4ForCausalLM(Gemma4TextConfig(**text)).eval()

    def _warmup(self) -> None:
        for spec in self.specs.values():
            self._run(Job(spec, [2, 11, 12], spec.canvas_length if spec.mode == "diffusion" else 4, True, None, None), warm=True)

    async def generate(self, job: Job) -> None:
        lab = (job.spec.name, "0")
        with self._lock:
            self._waiting[job.spec.name] += 1
            self.m.waiting.labels(*lab).set(self._waiting[job.spec.name])
        self.q.put(job)

    def _worker(self) -> None:
        while True:
            job = self.q.get()
            lab = (job.spec.name, "0")
            with self._lock:
                self._waiting[job.spec.name] -= 1
                self.m.waiting.labels(*lab).set(self._waiting[job.spec.name])
            if job.cancelled:
                job.emit(None)
                continue
            self.m.running.labels(*lab).set(1)
            self.m.prompt_tokens.labels(*lab).inc(len(job.prompt_ids))
            self.kv_tokens = len(job.prompt_ids)
            self.m.kv.labels(*lab).set(self.kv_tokens / self.KV_CAPACITY_TOKENS)
            try:
                self._run(job)
            except _Cancelled:
                pass
            finally:
                self.kv_tokens = 0
                self.m.kv.labels(*lab).set(0.0)
                self.m.running.labels(*lab).set(0)
                job.emit(None)

    def _run(self, job: Job, warm: bool = False) -> None:
        torch, spec = self.torch, job.spec
        model = self.models[spec.name]
        ids = torch.tensor([job.prompt_ids])
        lab = (spec.name, "0")
        eng = self

        class Streamer:
            def __init__(self) -> None:
                self.first = True
                self.drafts = 0
                self.left = job.max_tokens
                self.pending: list[int] = []

            def put(self, value) -> None:
                if job.cancelled:
                    raise _Cancelled()
                if self.first:  # generate() first hands back the prompt
                    self.first = False
                    return
                toks = [int(t) for t in value.reshape(-1).tolist()]
                if spec.mode == "diffusion":
                    self._canvas(toks)
                else:
                    for t in toks:
                        self._token(t)

            def put_draft(self, value=None, logits=None) -> None:
                if job.cancelled:
                    raise _Cancelled()
                self.drafts += 1

            def end(self) -> None:
                if spec.mode == "mtp" and self.pending and not warm:
                    eng._mtp_flush(job, self.pending, final=True)
                    self.pending = []

            def _canvas(self, toks: list[int]) -> None:
                emit, hit_eos = cut_at_eos(toks[: self.left], job.ignore_eos)
                if not warm:
                    eng.m.dg_steps.labels(*lab).inc(self.drafts + 1)  # + the commit step
                    eng.m.dg_positions.labels(*lab).inc(spec.canvas_length)
                    eng.m.dg_committed.labels(*lab).inc(len(emit))
                    eng._out(job, emit)
                self.drafts = 0
                self.left -= len(emit)
                if hit_eos:
                    job.finish_reason = "stop"
                if hit_eos or self.left <= 0:
                    raise _Done()

            def _token(self, t: int) -> None:
                if not job.ignore_eos and t in EOS_IDS:
                    job.finish_reason = "stop"
                    raise _Done()
                self.left -= 1
                if warm:
                    return
                if spec.mode == "mtp":
                    self.pending.append(t)
                    self.pending = eng._mtp_flush(job, self.pending, final=False)
                else:
                    eng._out(job, [t])
                if self.left <= 0:
                    raise _Done()

        st = Streamer()
        try:
            with torch.no_grad():
                if spec.mode == "diffusion":
                    model.generate(ids, max_new_tokens=job.max_tokens, streamer=st, max_denoising_steps=self.denoise_steps)
                else:
                    model.generate(ids, max_new_tokens=job.max_tokens, do_sample=False, streamer=st,
                                   eos_token_id=None if job.ignore_eos else list(EOS_IDS), pad_token_id=0)
        except _Done:
            pass
        st.end()

    def _out(self, job: Job, ids: list[int]) -> None:
        if not ids:
            return
        job.generated += len(ids)
        self.kv_tokens += len(ids)
        lab = (job.spec.name, "0")
        self.m.generation_tokens.labels(*lab).inc(len(ids))
        self.m.kv.labels(*lab).set(min(1.0, self.kv_tokens / self.KV_CAPACITY_TOKENS))
        job.emit(ids)

    def _mtp_flush(self, job: Job, pending: list[int], final: bool) -> list[int]:
        """Group AR tokens into verify steps: a step emits accepted+1 tokens."""
        spec, lab = job.spec, (job.spec.name, "0")
        while pending:
            if job.next_accept is None:
                a = 0
                while a < spec.k and self.rng.random() < self.p:
                    a += 1
                job.next_accept = a
            a = job.next_accept
            if len(pending) < a + 1 and not final:
                return pending
            step, pending = pending[: a + 1], pending[a + 1 :]
            job.next_accept = None
            self.m.sd_drafts.labels(*lab).inc()
            self.m.sd_draft_tokens.labels(*lab).inc(spec.k)
            self.m.sd_accepted.labels(*lab).inc(a)
            for pos in range(spec.k):
                self.m.sd_per_pos.labels(*lab, str(pos)).inc(1 if pos < a else 0)
            self._out(job, step)
        return pending


class _Done(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------
@dataclass
class Server:
    engine: object
    metrics: Metrics
    specs: dict[str, ModelSpec]
    api_key: str | None = None
    seen_auth: list[str] = field(default_factory=list)
    max_in_flight: int = 0
    in_flight: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                try:
                    method, target, _ = line.decode("latin-1").split(" ", 2)
                except ValueError:
                    await self._send(writer, 400, {"error": {"message": "bad request line"}}, keep=False)
                    break
                headers: dict[str, str] = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length") or 0)
                body = await reader.readexactly(n) if n else b""
                keep = await self.route(method, target.split("?")[0], headers, body, writer)
                if not keep or headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def route(self, method: str, path: str, headers: dict, body: bytes, writer) -> bool:
        if method == "GET" and path == "/health":
            return await self._send(writer, 200, {"status": "ok"})
        if method == "GET" and path == "/metrics":
            return await self._raw(writer, 200, self.metrics.text(), "text/plain; version=0.0.4; charset=utf-8")
        if self.api_key is not None:
            auth = headers.get("authorization", "")
            self.seen_auth.append(auth)
            if auth != f"Bearer {self.api_key}":
                return await self._send(writer, 401, {"error": {"message": "invalid API key", "type": "AuthenticationError"}})
        if method == "GET" and path == "/v1/models":
            return await self._send(writer, 200, {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "test"} for n in self.specs]})
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            try:
                req = json.loads(body or b"{}")
            except ValueError:
                return await self._send(writer, 400, {"error": {"message": "body is not JSON"}})
            return await self.complete(req, path.endswith("chat/completions"), writer)
        return await self._send(writer, 404, {"error": {"message": f"no route {method} {path}"}})

    async def complete(self, req: dict, chat: bool, writer) -> bool:
        spec = self.specs.get(req.get("model"))
        if spec is None:
            return await self._send(writer, 404, {"error": {"message": f"model {req.get('model')!r} does not exist"}})
        text = "\n".join(str(m.get("content", "")) for m in req.get("messages", [])) if chat else str(req.get("prompt", ""))
        fm = FAULT_RE.search(text)
        fault, arg = (fm.group(1), fm.group(2)) if fm else (None, None)
        if fault == "close":
            writer.transport.abort()
            return False
        if fault == "slow":
            await asyncio.sleep(float(arg or 1.0))
        if fault in ("http500", "http429"):
            code = int(fault[4:])
            return await self._send(writer, code, {"error": {"message": "injected failure", "type": "InternalServerError" if code == 500 else "RateLimitError", "code": code}})
        if fault == "not_sse":
            return await self._send(writer, 200, {"id": "x", "object": "chat.completion", "choices": [{"message": {"content": "hi"}}]})
        if not req.get("stream"):
            return await self._send(writer, 400, {"error": {"message": "this test server only streams (stream=true)"}})
        opts = req.get("stream_options") or {}
        include_usage, continuous = bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats"))
        vocab = 512
        prompt_ids = tokenize(text, vocab)
        max_tokens = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        job = Job(spec, prompt_ids, max_tokens, bool(req.get("ignore_eos")), asyncio.get_running_loop(), asyncio.Queue())
        t_start = time.perf_counter()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        gen = asyncio.ensure_future(self.engine.generate(job))
        rid = f"cmpl-{zlib.crc32(os.urandom(8)):08x}"
        obj = "chat.completion.chunk" if chat else "text_completion"
        created = int(time.time())
        sent = 0
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")

            async def event(payload) -> None:
                data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
                msg = f"data: {data}\n\n".encode()
                writer.write(f"{len(msg):x}\r\n".encode() + msg + b"\r\n")
                await writer.drain()

            def chunk(text_piece: str | None, finish: str | None, role: bool = False) -> dict:
                if chat:
                    delta = {"role": "assistant", "content": ""} if role else ({"content": text_piece} if text_piece is not None else {})
                    c = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                else:
                    c = {"index": 0, "text": text_piece or "", "logprobs": None, "finish_reason": finish}
                d = {"id": rid, "object": obj, "created": created, "model": spec.name, "choices": [c]}
                if continuous:
                    d["usage"] = {"prompt_tokens": len(prompt_ids), "completion_tokens": sent, "total_tokens": len(prompt_ids) + sent}
                return d

            if chat:
                await event(chunk(None, None, role=True))
            n_events = 0
            while True:
                ids = await job.out.get()
                if ids is None:
                    break
                sent += len(ids)
                n_events += 1
                if fault == "malformed" and n_events == 2:
                    await event('{"choices": [{"delta": {"content": " t1"')
                await event(chunk("".join(f" t{t}" for t in ids), None))
                if fault == "error_event" and n_events == 1:
                    await event({"error": {"message": "injected engine failure", "type": "InternalServerError", "code": 500}})
                    await event("[DONE]")
                    job.cancelled = True
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    return True
                if fault == "drop" and n_events == 2:
                    job.cancelled = True
                    writer.transport.abort()
                    return False
                if fault == "truncate" and n_events == 2:
                    job.cancelled = True
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    return True
                if fault == "stall" and n_events == 1:
                    job.cancelled = True
                    await asyncio.sleep(3600)
            await event(chunk("", job.finish_reason))
            if include_usage:
                await event({"id": rid, "object": obj, "created": created, "model": spec.name, "choices": [],
                             "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": sent, "total_tokens": len(prompt_ids) + sent}})
            await event("[DONE]")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            lab = (spec.name, "0")
            self.metrics.request_success.labels(*lab, job.finish_reason).inc()
            self.metrics.e2e.labels(*lab).observe(time.perf_counter() - t_start)
            return True
        except (ConnectionError, asyncio.CancelledError):
            job.cancelled = True
            return False
        finally:
            self.in_flight -= 1
            if not gen.done() and isinstance(self.engine, FastEngine):
                job.cancelled = True

    async def _send(self, writer, status: int, obj: dict, keep: bool = True) -> bool:
        return await self._raw(writer, status, json.dumps(obj).encode(), "application/json", keep)

    async def _raw(self, writer, status: int, data: bytes, ctype: str, keep: bool = True) -> bool:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}.get(status, "Status")
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n{'' if keep else 'Connection: close' + chr(13) + chr(10)}\r\n".encode() + data)
        await writer.drain()
        return keep


def default_specs(backend: str) -> dict[str, ModelSpec]:
    names = ("tiny-diffusiongemma", "tiny-gemma4", "tiny-gemma4-mtp") if backend == "model" else ("fast-diffusion", "fast-ar", "fast-mtp")
    return {names[0]: ModelSpec(names[0], "diffusion"), names[1]: ModelSpec(names[1], "ar"), names[2]: ModelSpec(names[2], "mtp")}


async def serve(args) -> None:
    metrics = Metrics()
    specs = default_specs(args.backend)
    for spec in specs.values():
        metrics.register(spec)
    if args.backend == "model":
        engine = ModelEngine(metrics, specs, args.seed, args.mtp_accept, args.denoise_steps)
    else:
        engine = FastEngine(metrics, args.step_ms, args.seed, args.mtp_accept)
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    srv = Server(engine, metrics, specs, api_key)
    server = await asyncio.start_server(srv.handle, HOST, args.port, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"LISTENING {port}", flush=True)
    asyncio.ensure_future(_exit_with_parent(os.getppid()))
    async with server:
        await server.serve_forever()


async def _exit_with_parent(ppid: int) -> None:
    """Stop when the process that started us is gone (a killed test run leaves no server behind)."""
    while True:
        await asyncio.sleep(1.0)
        if os.getppid() != ppid:
            os._exit(0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["fast", "model"], default="fast")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--step-ms", type=float, default=2.0, help="fast backend: milliseconds per engine step")
    ap.add_argument("--denoise-steps", type=int, default=4, help="model backend: max_denoising_steps of the diffusion model")
    ap.add_argument("--mtp-accept", type=float, default=0.8, help="per-position draft acceptance probability (MTP)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--api-key-env", default=None, help="require 'Authorization: Bearer $VAR'")
    args = ap.parse_args(argv)
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass


class ServerProcess:
    """Start the server as a subprocess; `port`, `url`; `stop()` ends it (tests, benchmark)."""

    def __init__(self, *args: str, timeout_s: float = 90.0, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, __file__, "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        deadline = time.monotonic() + timeout_s
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("LISTENING") or not line and self.proc.poll() is not None:
                break
        if not line.startswith("LISTENING"):
            self.stop()
            raise RuntimeError(f"test server did not start: {self.proc.stderr.read()[-2000:] if self.proc.stderr else ''}")
        self.port = int(line.split()[1])
        self.url = f"http://{HOST}:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    main()

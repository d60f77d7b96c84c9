"""Async streaming load generator for OpenAI-compatible servers (httpx, HTTP/1.1, SSE).

Open loop: every request's arrival time is computed before the load starts (`schedule_s`), and a
single dispatcher wakes at each arrival and hands the request to its own task, so a slow server
never delays later arrivals. `--concurrency N` then caps the requests in flight (a request waits
for a free slot; that wait is recorded separately from the dispatcher's own lateness).

Times are seconds on the monotonic clock, relative to the load's start t0 (`LoadResult.t0_unix`
gives t0 on the wall clock). Per request:

- arrival_s       the scheduled arrival (the workload's arrival time);
- dispatch_s      when the dispatcher actually released it; lateness_ms = dispatch_s - arrival_s
                  (the client's own delay: the figure that shows the client is not the bottleneck);
- start_s         when the HTTP request was handed to the connection (after a --concurrency slot
                  was free); wait_ms = start_s - dispatch_s;
- first_token_s   receipt of the first SSE event carrying output (text, or a token count > 0;
                  the role-only first delta of chat streams does not count);
- finish_s        receipt of `data: [DONE]` (or of the end of the stream / the failure);
- ttft_ms         first_token_s - start_s;  e2e_ms = finish_s - start_s (both from the send, as
                  `vllm bench serve` measures them; queueing in the client is in wait_ms);
- itl_mean_ms     mean gap between successive output-carrying events of this request (per
                  request); pooled ITL percentiles in a run summary take every gap of every
                  successful request as one sample (like `vllm bench serve`'s ITL);
- tpot_ms         (e2e_ms - ttft_ms) / (output_tokens - 1), per request.

Token counts per event (`chunks.tokens`), in order of preference, named in `tokens_source`:
"usage"   - the difference of cumulative `usage.completion_tokens` (vLLM sends usage on every
            chunk when asked with stream_options.continuous_usage_stats, which this client does
            unless --no-continuous-usage);
"logprobs"- the number of per-token logprob entries in the event;
"pieces"  - 1 per event with non-empty text (a lower bound: a server that sends a 256-token
            burst as one event counts 1).
output_tokens is the final `usage.completion_tokens` when the server reports it, else the sum.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import resource
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import httpx
import numpy as np

from costmodel.errors import UserError
from measure.endpoint.failures import StreamFailure, classify, scrub
from measure.endpoint.sse import SSEParser
from measure.endpoint.transport import LeanTransport

START_LEAD_S = 0.05  # t0 lies this far after setup, so the first arrival is not late by setup time
ERROR_BODY_BYTES = 2048


@dataclass(frozen=True)
class PromptItem:
    prompt_id: str
    prompt: str | None = None  # text prompt (chat: one user message)
    messages: tuple | None = None  # full chat messages, JSON-able
    regime: str | None = None
    max_tokens: int | None = None  # per-prompt override of --max-tokens


@dataclass(frozen=True)
class PlannedRequest:
    request_id: str
    arrival_s: float
    item: PromptItem


@dataclass
class LoadConfig:
    api_base: str  # ".../v1"
    model: str
    api: str = "chat"  # chat | completions
    max_tokens: int = 512
    timeout_s: float = 600.0
    concurrency: int | None = None
    continuous_usage: bool = True
    ignore_eos: bool = False
    api_key: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return self.api_base.rstrip("/") + ("/chat/completions" if self.api == "chat" else "/completions")


@dataclass
class RequestRecord:
    request_id: str
    prompt_id: str
    regime: str | None
    arrival_s: float
    dispatch_s: float = math.nan
    start_s: float = math.nan
    first_token_s: float = math.nan
    finish_s: float = math.nan
    prompt_tokens: float = math.nan  # from usage; NaN when the server does not report it
    output_tokens: int = 0
    status: str = "error"  # ok | error
    failure_reason: str | None = None
    error_detail: str | None = None
    http_status: int | None = None
    finish_reason: str | None = None
    tokens_source: str = "pieces"
    n_chunks: int = 0
    max_tokens: int = 0
    lateness_ms: float = math.nan
    wait_ms: float = math.nan
    ttft_ms: float = math.nan
    e2e_ms: float = math.nan
    itl_mean_ms: float = math.nan
    tpot_ms: float = math.nan

    def finalize(self, chunk_t: list[float]) -> None:
        self.lateness_ms = (self.dispatch_s - self.arrival_s) * 1e3
        self.wait_ms = (self.start_s - self.dispatch_s) * 1e3
        self.ttft_ms = (self.first_token_s - self.start_s) * 1e3
        self.e2e_ms = (self.finish_s - self.start_s) * 1e3
        self.n_chunks = len(chunk_t)
        if len(chunk_t) > 1:
            self.itl_mean_ms = (chunk_t[-1] - chunk_t[0]) / (len(chunk_t) - 1) * 1e3
        if self.output_tokens > 1 and not math.isnan(self.ttft_ms):
            self.tpot_ms = (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)


@dataclass
class LoadResult:
    requests: list[RequestRecord]
    chunks: dict[str, list[tuple[float, int]]]  # request_id -> [(t_s, tokens)]
    t0_unix: float
    t0_monotonic: float
    last_arrival_s: float
    end_s: float  # when the last request finished, relative to t0


def schedule_s(qps: float, arrivals: str, n: int | None, duration_s: float | None, seed: int, cv: float = 1.0) -> np.ndarray:
    """Arrival times (s from t0) of a load: `n` requests and/or arrivals within `duration_s`,
    whichever ends first. qps=inf puts every arrival at 0 (then --concurrency paces the load).
    `gamma`: gaps gamma-distributed with mean 1/qps and coefficient of variation `cv` (shape
    1/cv^2: cv 1 is Poisson, cv 3 bursty; vLLM bench's --burstiness is the shape)."""
    if n is None and duration_s is None:
        raise UserError("the load has no end", "give --requests N or --duration SECONDS")
    if math.isinf(qps):
        if n is None:
            raise UserError("--qps inf with only --duration would send unboundedly many requests", "give --requests N (with --concurrency) or a finite --qps")
        return np.zeros(n)
    rng = np.random.default_rng(seed)
    cap = n if n is not None else int(math.ceil(qps * duration_s * 1.5 + 10 * math.sqrt(qps * duration_s + 1) + 10))
    if arrivals == "constant":
        t = np.arange(cap, dtype=float) / qps
    elif arrivals == "poisson":
        t = np.concatenate([[0.0], np.cumsum(rng.exponential(1.0 / qps, cap - 1))]) if cap > 0 else np.zeros(0)
    elif arrivals == "gamma":
        if not (cv > 0 and math.isfinite(cv)):
            raise UserError(f"--arrival-cv {cv!r} must be a positive number", "e.g. --arrival-cv 3 (1 is Poisson)")
        shape = 1.0 / cv ** 2
        t = np.concatenate([[0.0], np.cumsum(rng.gamma(shape, 1.0 / (qps * shape), cap - 1))]) if cap > 0 else np.zeros(0)
    else:
        raise UserError(f"--arrivals {arrivals!r} is unknown", "use poisson, gamma or constant")
    if duration_s is not None:
        t = t[t < duration_s]
    return t


def raise_fd_limit() -> None:
    """Lift the soft open-files limit to the hard one (each in-flight request holds a socket)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else max(soft, 65536), hard))
    except (ValueError, OSError):
        pass


def _quiet_gc() -> None:
    """Freeze everything built before the load (prebuilt requests, records, modules) out of the
    collector, so full collections during the load scan only the load's own garbage (a full
    collection over the prebuilt requests paused the loop ~100 ms at 250 req/s)."""
    gc.collect()
    gc.freeze()


def _restore_gc() -> None:
    gc.unfreeze()


class LoadClient:
    """Runs one load (a list of PlannedRequest) against one server."""

    def __init__(self, cfg: LoadConfig):
        self.cfg = cfg
        self._secrets = tuple(s for s in (cfg.api_key,) if s)
        self._headers = {"Accept": "text/event-stream"}
        if cfg.api_key:
            self._headers["Authorization"] = f"Bearer {cfg.api_key}"

    def body(self, item: PromptItem) -> dict:
        cfg = self.cfg
        b: dict[str, Any] = {"model": cfg.model, "stream": True, "max_tokens": item.max_tokens or cfg.max_tokens}
        b["stream_options"] = {"include_usage": True, **({"continuous_usage_stats": True} if cfg.continuous_usage else {})}
        if cfg.ignore_eos:
            b["ignore_eos"] = True
        if cfg.api == "chat":
            b["messages"] = list(item.messages) if item.messages else [{"role": "user", "content": item.prompt or ""}]
        else:
            b["prompt"] = item.prompt if item.prompt is not None else "\n".join(str(m.get("content", "")) for m in (item.messages or ()))
        return b

    async def run(self, planned: list[PlannedRequest], on_start: Callable[[float], Awaitable[None]] | None = None) -> LoadResult:
        """Send every planned request at its arrival time; return when all have ended."""
        raise_fd_limit()
        cfg = self.cfg
        loop = asyncio.get_running_loop()
        timeout = httpx.Timeout(cfg.timeout_s, connect=cfg.timeout_s, pool=None)
        sem = asyncio.Semaphore(cfg.concurrency) if cfg.concurrency else None
        records = [RequestRecord(p.request_id, p.item.prompt_id, p.item.regime, p.arrival_s, max_tokens=p.item.max_tokens or cfg.max_tokens) for p in planned]
        chunks: dict[str, list[tuple[float, int]]] = {p.request_id: [] for p in planned}
        async with httpx.AsyncClient(transport=LeanTransport(), timeout=timeout, headers=self._headers, trust_env=False) as http:
            # every request is encoded and built before t0: no URL parsing or JSON in the dispatch path
            built = [http.build_request("POST", cfg.url, content=json.dumps(self.body(p.item)).encode(),
                                        headers={"Content-Type": "application/json", "X-Request-Id": p.request_id}) for p in planned]
            await self._warm_up(http)
            _quiet_gc()
            t0 = loop.time() + START_LEAD_S
            t0_unix = time.time() + START_LEAD_S
            if on_start is not None:
                await on_start(t0)
            tasks = []
            for p, rec, req in zip(planned, records, built):
                delay = t0 + p.arrival_s - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                rec.dispatch_s = loop.time() - t0
                tasks.append(asyncio.create_task(self._one(http, sem, rec, req, chunks[p.request_id], t0)))
            try:
                if tasks:
                    await asyncio.gather(*tasks)
            finally:
                _restore_gc()
            end_s = loop.time() - t0
        for rec in records:
            rec.finalize([t for t, _ in chunks[rec.request_id]])
        return LoadResult(records, chunks, t0_unix, t0, float(planned[-1].arrival_s) if planned else 0.0, end_s)

    async def _warm_up(self, http: httpx.AsyncClient) -> None:
        """One GET of /models before t0: loads the HTTP stack's lazily imported code and opens a
        connection, so the first scheduled requests do not pay for it. Its outcome is ignored."""
        try:
            await asyncio.wait_for(http.get(self.cfg.api_base.rstrip("/") + "/models"), min(5.0, self.cfg.timeout_s))
        except Exception:  # noqa: BLE001 - an unreachable server shows up in the load's own records
            pass

    async def _one(self, http: httpx.AsyncClient, sem, rec: RequestRecord, req: httpx.Request, chunks: list, t0: float) -> None:
        loop = asyncio.get_running_loop()
        if sem is not None:
            await sem.acquire()
        st = _StreamState()
        try:
            rec.start_s = loop.time() - t0
            try:
                await asyncio.wait_for(self._stream(http, rec, st, req, chunks, t0), self.cfg.timeout_s)
                rec.status = "ok"
            except Exception as e:  # noqa: BLE001 - every failure becomes a row
                rec.status = "error"
                rec.failure_reason, rec.error_detail, status = classify(e, self._secrets)
                if rec.failure_reason == "timeout":
                    rec.error_detail = f"no end after {self.cfg.timeout_s:g} s ({len(chunks)} output events received)"
                rec.http_status = rec.http_status or status
                rec.finish_s = loop.time() - t0
            st.fill(rec, chunks)
        finally:
            if sem is not None:
                sem.release()

    async def _stream(self, http: httpx.AsyncClient, rec: RequestRecord, st: "_StreamState", req: httpx.Request, chunks: list, t0: float) -> None:
        loop = asyncio.get_running_loop()
        resp = await http.send(req, stream=True)
        try:
            rec.http_status = resp.status_code
            if not 200 <= resp.status_code < 300:
                raw = b""
                async for part in resp.aiter_bytes():
                    raw += part
                    if len(raw) >= ERROR_BODY_BYTES:
                        break
                raise StreamFailure("http_error", f"HTTP {resp.status_code}: {_error_text(raw)}", resp.status_code)
            ctype = resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                raise StreamFailure("not_event_stream", f"content-type {ctype!r}")
            parser = SSEParser()
            async for part in resp.aiter_bytes():
                if st.done:
                    continue  # drain the rest of the body so the connection can be reused
                t = loop.time() - t0
                for ev in parser.feed(part):
                    st.handle(ev.data, t, chunks)
            t_end = loop.time() - t0
            if not st.done:
                for ev in parser.close():
                    st.handle(ev.data, t_end, chunks)
        finally:
            await resp.aclose()
        rec.finish_s = st.done_t if st.done else t_end
        if st.error_event is not None:
            raise StreamFailure("server_error_event", st.error_event)
        if st.malformed is not None:
            raise StreamFailure("malformed_event", st.malformed + (f" ({st.n_malformed} bad events)" if st.n_malformed > 1 else ""))
        if not st.done and st.finish_reason is None:
            raise StreamFailure("stream_truncated", "stream ended before [DONE]" + (" inside an event" if parser.pending else ""))


class _StreamState:
    """Accumulates one response's events."""

    __slots__ = ("done", "done_t", "malformed", "error_event", "finish_reason", "first_t", "cum_usage", "final_usage", "prompt_tokens", "source", "n_malformed")

    def __init__(self) -> None:
        self.done = False
        self.done_t = math.nan
        self.malformed: str | None = None
        self.error_event: str | None = None
        self.finish_reason: str | None = None
        self.first_t = math.nan
        self.cum_usage = 0  # last cumulative completion_tokens seen on a chunk
        self.final_usage: int | None = None
        self.prompt_tokens: int | None = None
        self.source = "pieces"
        self.n_malformed = 0

    def handle(self, data: str, t: float, chunks: list) -> None:
        if data.strip() == "[DONE]":
            self.done, self.done_t = True, t
            return
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            self._bad(data)
            return
        if obj.get("error") is not None:
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            self.error_event = self.error_event or str(msg)[:200]
            return
        choices = obj.get("choices")
        usage = obj.get("usage")
        if choices is None and usage is None:
            self._bad(data)
            return
        text, n_logprobs = "", None
        if choices:
            parsed = self._choice(choices[0])
            if parsed is None:
                self._bad(data)
                return
            text, n_logprobs = parsed
        n = 0
        if isinstance(usage, dict):
            n = self._usage(usage, bool(choices))
        elif n_logprobs is not None:
            n = n_logprobs
            self.source = "logprobs"
        elif text:
            n = 1
        if n > 0 or text:
            if math.isnan(self.first_t):
                self.first_t = t
            chunks.append((t, n))

    def _choice(self, c) -> tuple[str, int | None] | None:
        """(output text, per-token logprob entries or None) of a stream choice; None if malformed.
        Records the finish reason."""
        if not isinstance(c, dict):
            return None
        delta = c.get("delta")
        if isinstance(delta, dict):
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
        else:
            text = c.get("text") or ""
        if not isinstance(text, str):
            return None
        n_logprobs = None
        lp = c.get("logprobs")
        if isinstance(lp, dict):
            seq = lp.get("content") if isinstance(lp.get("content"), list) else lp.get("tokens")
            if isinstance(seq, list):
                n_logprobs = len(seq)
        if c.get("finish_reason"):
            self.finish_reason = str(c["finish_reason"])
        return text, n_logprobs

    def _usage(self, usage: dict, on_content: bool) -> int:
        """Tokens this chunk adds by the cumulative usage (0 on the final usage-only chunk, which sets final_usage)."""
        ct = usage.get("completion_tokens")
        pt = usage.get("prompt_tokens")
        if isinstance(pt, int):
            self.prompt_tokens = pt
        if not isinstance(ct, int):
            return 0
        if on_content:  # continuous usage on a content chunk
            n = max(0, ct - self.cum_usage)
            self.cum_usage = max(self.cum_usage, ct)
            self.source = "usage"
            return n
        self.final_usage = ct  # the final usage-only chunk
        return 0

    def _bad(self, data: str) -> None:
        self.n_malformed += 1
        if self.malformed is None:
            self.malformed = f"unparseable event data: {data[:80]!r}"

    def fill(self, rec: RequestRecord, chunks: list) -> None:
        rec.first_token_s = self.first_t
        rec.finish_reason = self.finish_reason
        rec.tokens_source = self.source
        if self.prompt_tokens is not None:
            rec.prompt_tokens = float(self.prompt_tokens)
        counted = sum(n for _, n in chunks)
        rec.output_tokens = self.final_usage if self.final_usage is not None else max(counted, self.cum_usage)


def _error_text(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            err = obj.get("error", obj.get("detail", obj.get("message")))
            if isinstance(err, dict):
                err = err.get("message", err)
            if err is not None:
                text = str(err)
    except ValueError:
        pass
    return scrub(text)[:160]

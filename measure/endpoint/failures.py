"""Failures are data: every request of a load ends with `status` "ok" or "error" and, when it
failed, one `failure_reason` from `REASONS` plus a short `error_detail` (secrets scrubbed).

A request is "ok" only if the HTTP status was 2xx, the body was an event stream whose every event
parsed, no error object arrived, and the stream ended with `data: [DONE]` (or, for servers that
omit the sentinel, a `finish_reason` on the last choice before a clean end of stream).
"""

from __future__ import annotations

import asyncio
import errno

import httpx

# reason -> what it means (kept in the run's manifest notes and the report)
REASONS: dict[str, str] = {
    "connect_refused": "the TCP connection was refused (nothing listening on the port)",
    "connect_timeout": "no TCP/TLS connection within --timeout",
    "connect_error": "the connection failed for another reason (DNS, TLS, reset during connect, too many open files)",
    "timeout": "the request took longer than --timeout end to end (a slow or stalled server)",
    "read_timeout": "the server sent nothing for --timeout seconds while the response was open",
    "http_error": "the server answered with a non-2xx HTTP status (see http_status, error_detail)",
    "not_event_stream": "a 2xx answer that is not text/event-stream (the server ignored stream=true)",
    "stream_dropped": "the connection closed mid-response (incomplete chunked body, reset)",
    "stream_truncated": "the event stream ended cleanly but before [DONE] and without a finish_reason",
    "malformed_event": "an event's data was not the JSON of a completion chunk",
    "server_error_event": "the stream carried an error object (the server failed mid-generation)",
    "protocol_error": "the HTTP exchange itself was malformed",
    "client_error": "an unexpected exception inside the client (a bug; the type is in error_detail)",
    "reported_by_bench": "an imported `vllm bench serve` result recorded an error for this request (its text is in error_detail)",
}


class StreamFailure(Exception):
    """Raised inside the client to end a request with a given reason."""

    def __init__(self, reason: str, detail: str = "", http_status: int | None = None):
        assert reason in REASONS, reason
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.http_status = http_status


def _root_errno(exc: BaseException) -> int | None:
    seen = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno is not None:
            return cur.errno
        cur = cur.__cause__ or cur.__context__
    return None


def classify(exc: BaseException, secrets: tuple[str, ...] = ()) -> tuple[str, str, int | None]:
    """Map an exception raised while a request was open to (reason, detail, http_status)."""
    if isinstance(exc, StreamFailure):
        return exc.reason, scrub(exc.detail, secrets), exc.http_status
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) and not isinstance(exc, httpx.TimeoutException):
        return "timeout", "deadline exceeded", None
    if isinstance(exc, httpx.ConnectTimeout):
        return "connect_timeout", scrub(str(exc) or "connect timeout", secrets), None
    if isinstance(exc, httpx.PoolTimeout):
        return "connect_timeout", "no free connection in the pool", None
    if isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout)):
        return "read_timeout", type(exc).__name__, None
    if isinstance(exc, httpx.ConnectError):
        en = _root_errno(exc)
        text = str(exc)
        if en == errno.ECONNREFUSED or "refused" in text.lower():
            return "connect_refused", scrub(text or "connection refused", secrets), None
        return "connect_error", scrub(text or type(exc).__name__, secrets), None
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return "stream_dropped", scrub(str(exc) or type(exc).__name__, secrets), None
    if isinstance(exc, (httpx.ProtocolError, httpx.DecodingError)):
        return "protocol_error", scrub(str(exc) or type(exc).__name__, secrets), None
    if isinstance(exc, httpx.TransportError):
        return "connect_error", scrub(str(exc) or type(exc).__name__, secrets), None
    if isinstance(exc, OSError):
        return "connect_error", scrub(f"{type(exc).__name__}: {exc}", secrets), None
    return "client_error", scrub(f"{type(exc).__name__}: {exc}", secrets)[:200], None


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Remove secrets (the API key) from a message and cut it to one short line."""
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return " ".join(text.split())[:200]

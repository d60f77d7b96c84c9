"""Incremental server-sent-events parser (WHATWG HTML "event stream" rules).

Feed it the bytes of a response as they arrive; it returns the events each feed completed.
Handles CRLF, LF and lone CR line endings (also split across feeds), multi-line `data:`,
comments, `event:`/`id:`/`retry:` fields, a leading BOM and UTF-8 sequences split across feeds
(invalid UTF-8 becomes U+FFFD, so a broken server yields malformed JSON, not an exception).
An event is dispatched only at a blank line; `pending` tells whether the stream ended inside an
unterminated event (a stream cut mid-event).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry_ms: int | None = None


class SSEParser:
    """`feed(bytes) -> list[SSEEvent]`; `close() -> list[SSEEvent]` at end of stream."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""  # undecoded-to-lines text (the incomplete last line)
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._started = False
        self._has_fields = False  # lines seen since the last dispatch

    @property
    def pending(self) -> bool:
        """True if bytes of an event arrived that no blank line has terminated yet."""
        return bool(self._buf) or self._has_fields

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if not self._started:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        text = self._buf + text
        # A trailing CR may be the first half of CRLF: keep it until the next feed.
        hold_cr = text.endswith("\r")
        if hold_cr:
            text = text[:-1]
        if "\r" in text:
            lines = _LINE_END.split(text)
        else:
            lines = text.split("\n")
        self._buf = lines.pop() + ("\r" if hold_cr else "")
        out: list[SSEEvent] = []
        for line in lines:
            self._line(line, out)
        return out

    def close(self) -> list[SSEEvent]:
        """End of stream: flush the decoder. Per the spec an unterminated event is discarded;
        check `pending` before calling to learn whether one was cut off."""
        tail = self._decoder.decode(b"", final=True)
        text = self._buf + tail
        out: list[SSEEvent] = []
        if text:
            lines = _LINE_END.split(text)
            last = lines.pop()
            for line in lines:
                self._line(line, out)
            self._buf = last
        return out

    # -- internals -------------------------------------------------------------------------------
    def _line(self, line: str, out: list[SSEEvent]) -> None:
        if line == "":
            if self._data:
                data = "\n".join(self._data)
                out.append(SSEEvent(data=data, event=self._event or "message", id=self._id, retry_ms=self._retry))
            self._data = []
            self._event = ""
            self._has_fields = False
            return
        if line[0] == ":":
            return  # comment (keep-alive)
        self._has_fields = True
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self._id = value
        elif name == "retry":
            if value.isdigit():
                self._retry = int(value)
        # other field names are ignored, as the spec says

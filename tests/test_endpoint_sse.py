"""The SSE parser: WHATWG event-stream rules, any split of the byte stream."""

from hypothesis import given, settings, strategies as st

from measure.endpoint.sse import SSEEvent, SSEParser


def parse_all(chunks):
    p = SSEParser()
    out = []
    for c in chunks:
        out += p.feed(c)
    out += p.close()
    return out, p


def test_basic_events_and_fields():
    raw = b": keep-alive\n\ndata: {\"a\": 1}\n\nevent: update\nid: 7\nretry: 1500\ndata: line1\ndata: line2\n\ndata\n\ndata:no-space\n\n"
    evs, p = parse_all([raw])
    assert evs == [
        SSEEvent('{"a": 1}'),
        SSEEvent("line1\nline2", event="update", id="7", retry_ms=1500),
        SSEEvent("", id="7", retry_ms=1500),
        SSEEvent("no-space", id="7", retry_ms=1500),
    ]
    assert not p.pending


def test_line_endings_crlf_cr_lf_and_bom():
    raw = "\ufeffdata: a\r\n\r\ndata: b\r\rdata: c\n\n".encode()
    evs, _ = parse_all([raw])
    assert [e.data for e in evs] == ["a", "b", "c"]


def test_cr_lf_split_across_feeds_is_one_line_end():
    evs, _ = parse_all([b"data: x\r", b"\n\r", b"\ndata: y\r\n\r\n"])
    assert [e.data for e in evs] == ["x", "y"]


def test_utf8_split_inside_a_character_and_invalid_bytes():
    raw = "data: héllo €\n\n".encode()
    i = raw.index("€".encode()) + 1
    evs, _ = parse_all([raw[:i], raw[i:]])
    assert evs[0].data == "héllo €"
    evs, _ = parse_all([b"data: \xff\xfe\n\n"])
    assert evs[0].data == "\ufffd\ufffd"


def test_unterminated_event_is_pending_and_dropped():
    evs, p = parse_all([b"data: done\n\ndata: cut off mid-ev"])
    assert [e.data for e in evs] == ["done"]
    assert p.pending
    evs, p = parse_all([b"data: cut after the line\n"])
    assert evs == [] and p.pending
    evs, p = parse_all([b"data: ok\n\n: trailing comment\n"])
    assert [e.data for e in evs] == ["ok"] and not p.pending


def test_done_sentinel_and_openai_chunks_arrive_as_data():
    raw = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
    evs, _ = parse_all([raw])
    assert [e.data for e in evs] == ['{"choices":[{"delta":{"content":"hi"}}]}', "[DONE]"]


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"), max_size=20)


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(st.lists(_text, min_size=1, max_size=3), min_size=1, max_size=6),
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    comments=st.booleans(),
)
def test_any_split_gives_the_same_events(events, ending, cuts, comments):
    text = ""
    for lines in events:
        if comments:
            text += ": ping" + ending
        text += "".join(f"data: {ln}{ending}" for ln in lines) + ending
    raw = text.encode()
    want, _ = parse_all([raw])
    assert [e.data for e in want] == ["\n".join(lines) for lines in events]
    pos = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *pos], [*pos, len(raw)])]
    got, p = parse_all(pieces)
    assert got == want
    assert not p.pending

"""Prompt content for prefix caching, synthesised from the workload description: a request's
content is a list of segments `(segment_id, tokens)` in order (a tenant's system prompt, a session's
earlier turns and replies, the request's own message, its output), and a KV block's hash names the
content up to the block's end, as vLLM's chained block hash does (vllm/v1/core/kv_cache_utils.py
`hash_block_tokens`: the parent block's hash is part of the key).

A segment id stands for the same tokens wherever it appears, and always after the same segments
(a system prompt opens a prompt; a session's turn t follows its turns before t), so the content up
to a position is named by (segment holding the position's last token, offset in it): block j of
size B hashes to `segment_id * 2**21 + (offset of (j + 1) * B in that segment + spread(segment_id))
mod 2**21`. Two requests share block j exactly when their content up to (j + 1) * B is the same,
whatever B the engine runs. The spread (a segment's own rotation of its offsets) changes no
equality; it varies the hashes' low bits, which index Python's dicts: with the offset alone there,
every request's block j landed on one slot of the prefix cache's tables and each lookup probed
through a chain of them (a third of a shared-prompt day's time went to dict lookups).

Segment ids (>= 0; simulate/kvcache.py private_hashes are < 0): system prompt of app a:
SYS + a; request i's own message: OWN + i, its output: OUT + i; a trace's prefix-block hash h
(Mooncake `hash_ids`): TRACE + h.
"""

from __future__ import annotations

OFFSET_BITS = 21  # a segment holds fewer than 2**21 tokens (longer than any model's context)
SYS, OWN, OUT, TRACE = 1 << 36, 2 << 36, 3 << 36, 4 << 36
MAX_SEGMENT_ID = 1 << 36  # per kind (apps, requests, trace hashes)


OFFSET_SPAN = 1 << OFFSET_BITS
SPREAD_MUL = 0x9E3779B97F4A7C15  # Fibonacci hashing's multiplier: the spread takes the product's high bits


def spread(sid: int) -> int:
    """A segment's rotation of its offsets, in [0, 2**21) (module docstring)."""
    return ((sid * SPREAD_MUL) >> 40) & (OFFSET_SPAN - 1)


def block_hashes(segments, block_size: int) -> list:
    """The hash of every full block of `segments` ((id, tokens), ...) at `block_size` tokens."""
    out: list = []
    end = block_size  # the end of the next block
    start = 0
    for sid, n in segments:
        stop = start + n
        if end <= stop:
            k = (stop - end) // block_size + 1  # blocks ending in this segment
            hi = sid << OFFSET_BITS
            lo = end - start + spread(sid)  # the first block's rotated offset, < 2**22
            top = lo + k * block_size
            if top <= OFFSET_SPAN:
                out.extend(range(hi + lo, hi + top, block_size))
            else:  # the rotation wraps past 2**21 inside the segment
                cut = lo if lo >= OFFSET_SPAN else lo + -(-(OFFSET_SPAN - lo) // block_size) * block_size
                out.extend(range(hi + lo, hi + min(cut, top), block_size))
                out.extend(range(hi + cut - OFFSET_SPAN, hi + top - OFFSET_SPAN, block_size))
            end += k * block_size
        start = stop
    return out


def truncated(segments, tokens: int) -> list:
    """The first `tokens` tokens of `segments`."""
    out, left = [], tokens
    for sid, n in segments:
        if left <= 0:
            break
        out.append((sid, min(n, left)))
        left -= n
    return out


def plain(i: int, prompt: int, output: int, system: tuple | None = None) -> list:
    """Request i: an optional (app, tokens) system prompt, its own message, its output."""
    segs = [(SYS + system[0], system[1])] if system and system[1] > 0 else []
    own = prompt - (system[1] if system else 0)
    if own > 0:
        segs.append((OWN + i, own))
    segs.append((OUT + i, output))
    return segs


class PlainContent:
    """The content of every request of a workload without sessions, as `plain` makes it, held as
    arrays and made per request when asked for (`content[i]`): a day of a million requests holds no
    million lists. `content[:k]` keeps the first k requests; other slices are lists."""

    __slots__ = ("apps", "system_tokens", "prompt", "output")

    def __init__(self, apps, system_tokens: int, prompt, output):
        self.apps, self.system_tokens, self.prompt, self.output = apps, int(system_tokens), prompt, output

    def __len__(self) -> int:
        return len(self.prompt)

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if start == 0 and step == 1:
                return PlainContent(None if self.apps is None else self.apps[:stop], self.system_tokens, self.prompt[:stop], self.output[:stop])
            return [self[j] for j in range(start, stop, step)]
        if i < 0:
            i += len(self)
        system = None if self.apps is None else (int(self.apps[i]), self.system_tokens)
        return plain(int(i), int(self.prompt[i]), int(self.output[i]), system)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def session_turns(idx: list, own: list, outputs: list, system: tuple | None = None) -> dict:
    """The content of each turn of one session (requests `idx` in turn order, each with its own new
    message and output lengths): the system prompt, every earlier turn's message and reply, its
    message, its output. Returns {request index: (segments, prompt tokens)}."""
    hist = [(SYS + system[0], system[1])] if system and system[1] > 0 else []
    out = {}
    for i, m, o in zip(idx, own, outputs):
        hist = hist + [(OWN + i, int(m))]
        prompt = sum(n for _, n in hist)
        out[i] = (hist + [(OUT + i, int(o))], prompt)
        hist = hist + [(OUT + i, int(o))]
    return out


def trace_content(i: int, prompt: int, output: int, hash_ids, hash_block: int) -> list:
    """Trace request i whose prompt's leading blocks of `hash_block` tokens carry `hash_ids`
    (Mooncake): one segment per named block (the last may be partial), then its own tokens."""
    segs, pos = [], 0
    for h in hash_ids:
        n = min(hash_block, prompt - pos)
        segs.append((TRACE + int(h), n))
        pos += n
    if prompt > pos:
        segs.append((OWN + i, prompt - pos))
    segs.append((OUT + i, output))
    return segs


def history_content(i: int, prompt: int, output: int, prev: list | None) -> list:
    """A session trace's request i (BurstGPT-style session ids): its prompt repeats the previous
    turn's prompt and reply (`prev`, its segments), as far as it is long enough, then adds its own."""
    segs = truncated(prev, prompt) if prev else []
    pos = sum(n for _, n in segs)
    if prompt > pos:
        segs.append((OWN + i, prompt - pos))
    segs.append((OUT + i, output))
    return segs

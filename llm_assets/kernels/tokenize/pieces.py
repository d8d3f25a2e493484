"""Bounded pieces before BPE: a run of one character class (letters, digits, other symbols,
whitespace) longer than :data:`MAX_RUN_CHARS` is cut into runs of at most that many characters
before a tokenizer sees it.

Pre-tokenizers (GPT-2's regex and its kind) hand BPE one piece per such run, and BPE's cost grows
faster than a piece's length: 32 MB of letters without a space would take minutes where 32 MB of
words take seconds. Cut, every document costs time in proportion to its length. Ordinary text
holds no run that long, so its ids are exactly the tokenizer's own; a run that long is encoded as
consecutive runs of :data:`MAX_RUN_CHARS` characters (the last shorter), each ending a piece.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence

import numpy as np
import regex

MAX_RUN_CHARS = 4096
"""The longest run of one character class a tokenizer is given whole."""

_WHITESPACE = np.zeros(0x3002, dtype=bool)
"""Code points that are whitespace (Unicode's White_Space, and the ASCII separators 0x1C-0x1F
that Python counts as spaces), up to U+3000; every higher code point maps to the last entry."""
_WHITESPACE[[*range(0x09, 0x0E), *range(0x1C, 0x21), 0x85, 0xA0, 0x1680]] = True
_WHITESPACE[[*range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]] = True
_WINDOW_CHARS = 1 << 20
"""Characters looked at at once by the quick check: its memory stays a few MB per text."""


@functools.cache
def _run_pattern(bound: int) -> regex.Pattern:
    """Maximal runs longer than ``bound`` of each class; the look-behinds let a match start only
    where its run starts, so a scan is linear in the text's length."""
    n = bound + 1
    classes = (r"\p{L}", r"\p{N}", r"[^\s\p{L}\p{N}]", r"\s")
    return regex.compile("|".join(f"(?<!{c}){c}{{{n},}}" for c in classes))


def _long_spans(text: str, bound: int) -> list[tuple[int, int]]:
    """Spans (character offsets) of the runs of whitespace and of non-whitespace longer than
    ``bound``: every run of one class longer than ``bound`` lies inside one. A quick check on the
    code points, a window at a time."""
    spans: list[tuple[int, int]] = []
    run_start, run_space = 0, None  # the run the last window ended in: its start and class
    for offset in range(0, len(text), _WINDOW_CHARS):
        window = text[offset : offset + _WINDOW_CHARS]
        points = np.frombuffer(window.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        space = _WHITESPACE[np.minimum(points, len(_WHITESPACE) - 1)]
        if run_space is not None and bool(space[0]) != run_space:
            if offset - run_start > bound:
                spans.append((run_start, offset))
            run_start = offset
        changes = np.flatnonzero(space[1:] != space[:-1]) + 1 + offset
        if changes.size:
            if changes[0] - run_start > bound:
                spans.append((run_start, int(changes[0])))
            long = np.flatnonzero(changes[1:] - changes[:-1] > bound)
            spans += [(int(changes[i]), int(changes[i + 1])) for i in long]
            run_start = int(changes[-1])
        run_space = bool(space[-1])
    if len(text) - run_start > bound:
        spans.append((run_start, len(text)))
    return spans


def cut_points(text: str, bound: int = MAX_RUN_CHARS) -> list[int]:
    """Where to cut ``text`` (character offsets, ascending) so that no run of one class is
    longer than ``bound``: every ``bound`` characters into each longer run; ``[]`` for text
    with no such run (nearly all text, told apart cheaply)."""
    if len(text) <= bound:
        return []
    spans = _long_spans(text, bound)
    if not spans:
        return []
    pattern = _run_pattern(bound)
    cuts: list[int] = []
    for start, end in spans:
        for run in pattern.finditer(text, start, end):
            cuts.extend(range(run.start() + bound, run.end(), bound))
    return cuts


def segments(text: str, cuts: Sequence[int]) -> list[str]:
    """``text`` split at ``cuts``: consecutive parts whose concatenation is ``text``."""
    edges = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(edges)]


def encode_bounded(
    encode: Callable[[list[str]], list[list[int]]], texts: list[str], bound: int = MAX_RUN_CHARS
) -> list[list[int]]:
    """``encode(texts)``, with each text that holds a run longer than ``bound`` encoded as its
    :func:`segments`, their ids concatenated: the same ids for every other text, and time in
    proportion to length for all."""
    if not texts or max(map(len, texts)) <= bound:
        return encode(texts)
    cut = {i: c for i, text in enumerate(texts) if (c := cut_points(text, bound))}
    if not cut:
        return encode(texts)
    ids = encode([("" if i in cut else text) for i, text in enumerate(texts)])
    for i, cuts in cut.items():
        ids[i] = list(itertools.chain.from_iterable(encode(segments(texts[i], cuts))))
    return ids

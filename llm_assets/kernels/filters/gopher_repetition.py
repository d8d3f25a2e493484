"""Gopher repetition rules (Rae et al. 2021; datatrove's ``GopherRepetitionFilter``),
vectorized over a batch.

Definitions (the text is normalized: lines end with ``"\\n"``, paragraphs with ``"\\n\\n"``):

* **lines** are the non-empty pieces of the text split on ``"\\n"``; **paragraphs** the non-empty
  pieces split on two or more newlines (so the blank line between paragraphs is no line, and
  never counts as a repeated one);
* a line (paragraph) is **duplicated** when it equals an earlier line (paragraph) of the same
  document; its characters count towards the share of the document's characters;
* the **top n-gram** share: of the word n-grams of a document, the most frequent one (the
  earliest on ties); if it occurs more than once, its count times the characters of its words,
  over the characters of all words, else 0 (overlapping occurrences each count, as in Gopher:
  ``"aa aa aa aa"`` scores 1.5);
* the **duplicated n-gram** share: the characters of the words covered by an n-gram occurrence
  that repeats an n-gram seen earlier in the document, each word counted once however many such
  occurrences cover it, over the characters of all words.

Speed: a line (paragraph) is only compared, by dictionary-encoding it, when another line of its
document has the same length. N-grams are 64-bit keys rolled from random per-word hashes and a
per-document salt, so no n-gram matches across documents (two different n-grams share a key
with probability ~2^-64 per pair). Most n-grams of prose occur once: for the smallest n, sorting
the keys finds the few that repeat; a longer n-gram can only repeat where both the shorter one
at its start and the one a word later repeat, so each larger n looks at a few percent of the
words. Those are numbered by an Arrow dictionary encoding (in order of first appearance, so an
occurrence repeats an earlier one when its number is not above every number before it),
counted, and their covered words summed from where each repeat starts and ends. About 50,000
documents of ~500 characters a second on one core, with the quality rules and every check on.

Differences from datatrove, which follows the paper less literally: its n-gram shares divide by
the text's length (spaces and punctuation-only text included) where the paper and this module
divide by the characters of the words; its top n-gram counts even an n-gram seen once; its
duplicated n-grams are found greedily (skipping past each repeat), which can miss overlapping
ones.

A check is off when its bound is ``None``; a dropped document's reason names the first failing
check, in the order of the spec's fields, and its value is the measure.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.kernels.filters.base import Filter, SharedWords
from llm_assets.kernels.filters.bounds import Check, check_bound, drop_first_failure, format_share
from llm_assets.kernels.schema import TEXT, StageResult
from llm_assets.kernels.settings import Form
from llm_assets.kernels.words import (
    Pieces,
    Words,
    factorize,
    first_occurrences,
    numpy_of,
    ratio,
    text_array,
    words_of,
)

DUP_LINE_RATIO = "dup_line_ratio"
DUP_PARA_RATIO = "dup_para_ratio"
DUP_LINE_CHAR_RATIO = "dup_line_char_ratio"
DUP_PARA_CHAR_RATIO = "dup_para_char_ratio"
TOP_NGRAM_CHAR_RATIO = "top_{n}gram_char_ratio"
"""Template of the top n-gram reasons: ``top_2gram_char_ratio`` ... (:func:`top_ngram_reason`)."""
DUP_NGRAM_CHAR_RATIO = "dup_{n}gram_char_ratio"
"""Template of the duplicated n-gram reasons: ``dup_5gram_char_ratio`` ...
(:func:`dup_ngram_reason`)."""


_SEED = 0x6F9E1D2C
_ROLL = np.uint64(0x9E3779B97F4A7C15)


def top_ngram_reason(n: int) -> str:
    """Reason (and measure name) of the top ``n``-gram rule, e.g. ``top_2gram_char_ratio``."""
    return TOP_NGRAM_CHAR_RATIO.format(n=n)


def dup_ngram_reason(n: int) -> str:
    """Reason (and measure name) of the duplicated ``n``-gram rule, e.g.
    ``dup_5gram_char_ratio``."""
    return DUP_NGRAM_CHAR_RATIO.format(n=n)


NgramBounds = tuple[tuple[int, float | None], ...]


def _check_ngrams(owner: str, name: str, pairs: object) -> None:
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise ValueError(f"{owner}.{name} must be a tuple of (n, max ratio) pairs, got {pairs!r}")
    seen: set[int] = set()
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"{owner}.{name}: each entry must be (n, max ratio), got {pair!r}")
        n, bound = pair
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"{owner}.{name}: n must be an integer >= 1, got {n!r}")
        if n in seen:
            raise ValueError(f"{owner}.{name}: n={n} is listed twice")
        seen.add(n)
        check_bound(owner, f"{name}[n={n}]", bound, high=1.0)


@dataclass(frozen=True)
class RepetitionSpec:
    """Gopher repetition bounds, datatrove's ``GopherRepetitionFilter`` defaults; a bound set to
    ``None`` turns its check off, as does leaving an n out of (or emptying) an n-gram tuple.
    N-gram bounds are ``(n, max share of the characters of the words)`` pairs."""

    max_dup_line_ratio: float | None = field(
        default=0.3, metadata={"doc": "Highest share of lines that repeat an earlier line"}
    )
    max_dup_para_ratio: float | None = field(
        default=0.3,
        metadata={"doc": "Highest share of paragraphs that repeat an earlier paragraph"},
    )
    max_dup_line_char_ratio: float | None = field(
        default=0.2,
        metadata={"doc": "Highest share of characters in lines that repeat an earlier line"},
    )
    max_dup_para_char_ratio: float | None = field(
        default=0.2, metadata={"doc": "Highest share of characters in repeated paragraphs"}
    )
    top_ngram_char_ratios: NgramBounds = field(
        default=((2, 0.20), (3, 0.18), (4, 0.16)),
        metadata={"doc": "n -> max share of characters in the most frequent n-gram"},
    )
    dup_ngram_char_ratios: NgramBounds = field(
        default=((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)),
        metadata={"doc": "n -> max share of characters in duplicated n-grams"},
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name in (
            "max_dup_line_ratio",
            "max_dup_para_ratio",
            "max_dup_line_char_ratio",
            "max_dup_para_char_ratio",
        ):
            check_bound(owner, name, getattr(self, name), high=1.0)
        for name in ("top_ngram_char_ratios", "dup_ngram_char_ratios"):
            pairs = getattr(self, name)
            _check_ngrams(owner, name, pairs)
            object.__setattr__(self, name, tuple((int(n), b) for n, b in pairs))


def _duplicates(pieces: Pieces, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: how many pieces equal an earlier piece of the row, and their characters.

    Equal pieces have equal lengths, so only the pieces whose (row, length in bytes) occurs
    twice are compared (dictionary-encoded): hashing every line of the batch is the costly
    part, and most lines have a length of their own within their document."""
    if len(pieces.parents) == 0:
        return np.zeros(rows, np.int64), np.zeros(rows, np.int64)
    width = np.int64(int(pieces.nbytes.max()) + 1)
    candidates = np.flatnonzero(
        _occurs_twice((pieces.parents * width + pieces.nbytes).view(np.uint64))
    )
    if len(candidates) == 0:
        return np.zeros(rows, np.int64), np.zeros(rows, np.int64)
    encoded = pieces.flat.take(pa.array(candidates)).dictionary_encode()
    ids = numpy_of(encoded.indices).astype(np.int64)
    parents = pieces.parents[candidates]
    keys = parents * np.int64(len(encoded.dictionary)) + ids  # exact: (row, piece) pairs
    repeats = np.flatnonzero(~first_occurrences(factorize(keys)))
    # Characters of the repeated pieces only (counting code points costs a pass over the text).
    chars = numpy_of(pc.utf8_length(encoded.dictionary.take(pa.array(ids[repeats])))).astype(
        np.int64
    )
    rows_of = parents[repeats]
    return np.bincount(rows_of, minlength=rows), np.bincount(
        rows_of, weights=chars, minlength=rows
    ).astype(np.int64)


def _paragraphs(texts: pa.Array) -> pa.Array:
    """Each text split on runs of two or more newlines (as ``re.split(r"\\n{2,}", text)``).

    Splitting on the fixed ``"\\n\\n"`` is several times faster than on the regex and gives the
    same pieces, except that a run of 2k + 1 newlines leaves its last newline at the start of
    the next piece (and longer runs add empty pieces, which are dropped anyway): strip it."""
    lists = pc.split_pattern(texts, "\n\n")
    flat = lists.flatten()
    offsets = numpy_of(lists.offsets)
    first = np.zeros(len(flat), bool)
    first[offsets[:-1][np.diff(offsets) > 0] - offsets[0]] = True
    strip = pc.and_(pc.starts_with(flat, "\n"), pa.array(~first))
    if not pc.any(strip).as_py():  # no run of 3, 5, ... newlines: the common case
        return lists
    flat = pc.if_else(strip, pc.utf8_slice_codeunits(flat, 1), flat)
    return type(lists).from_arrays(pa.array(offsets - offsets[0]), flat)


def _random_u64(seed: int, size: int) -> np.ndarray:
    """``size`` fixed pseudo-random 64-bit values (the same for the same seed and size)."""
    return np.random.default_rng([_SEED, seed]).integers(0, 2**64, size=size, dtype=np.uint64)


def _extend(keys: np.ndarray, next_words: np.ndarray) -> np.ndarray:
    """Keys of the n-grams whose (n-1)-gram keys are ``keys``, followed by the words whose
    hashes are ``next_words``: a multiply-xorshift step, then the word mixed in."""
    keys = keys * _ROLL
    keys ^= keys >> np.uint64(29)
    keys ^= next_words
    return keys


def _occurs_twice(keys: np.ndarray) -> np.ndarray:
    """True where a key occurs more than once.

    Most n-grams of prose occur once, so numbering every key with a hash table is wasted work:
    sort the keys (SIMD), take the few that repeat, and look each key up in a small direct table
    of those (a slot per repeated key's low bits, cache-resident); keys whose slot is shared by
    two repeated keys are looked up exactly."""
    if len(keys) < 2:
        return np.zeros(len(keys), bool)
    ordered = np.sort(keys)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]  # sorted
    repeated = repeated[np.r_[True, repeated[1:] != repeated[:-1]]] if len(repeated) else repeated
    if len(repeated) == 0:
        return np.zeros(len(keys), bool)
    mask = np.uint64((1 << max(4, (4 * len(repeated) - 1).bit_length())) - 1)
    slot_of_repeated = (repeated & mask).astype(np.intp)
    table = np.zeros(int(mask) + 1, np.uint64)
    table[slot_of_repeated] = repeated
    per_slot = np.bincount(slot_of_repeated, minlength=len(table))
    slots = (keys & mask).astype(np.intp)
    occupancy = per_slot[slots]
    found = (table[slots] == keys) & (occupancy > 0)
    shared = np.flatnonzero(occupancy > 1)
    if len(shared):
        position = np.minimum(np.searchsorted(repeated, keys[shared]), len(repeated) - 1)
        found[shared] = repeated[position] == keys[shared]
    return found


def _ngram_measures(
    words: Words,
    rows: int,
    top: tuple[int, ...],
    dup: tuple[int, ...],
) -> dict[str, np.ndarray]:
    """Top and duplicated n-gram character shares (see the module docstring) for each n of
    ``top`` and ``dup``, over the word n-grams of every row.

    Only the starts of n-grams that occur twice in their row are numbered, counted and
    compared: for the smallest n, those :func:`_occurs_twice` finds; for each larger n, the
    positions where both the (n-1)-gram there and the one a word later occur more than once,
    since a repeated n-gram repeats its prefix and its suffix. In prose that is a few percent of
    the words."""
    out = {top_ngram_reason(n): np.zeros(rows) for n in top}
    out.update({dup_ngram_reason(n): np.zeros(rows) for n in dup})
    wanted = set(top) | set(dup)
    ids, vocab = words.ids, words.vocab
    total = len(ids)
    if not wanted or total == 0:
        return out
    length = numpy_of(pc.utf8_length(vocab)).astype(np.int64)[ids]
    word_chars = words.sums(length)
    cumulative = np.zeros(total + 1, np.int64)
    np.cumsum(length, out=cumulative[1:])
    parent = words.parents
    hashes = _random_u64(1, len(vocab))[ids]
    lowest = min(wanted)
    if total < lowest:
        return {name: np.zeros(rows) for name in out}
    keys = hashes ^ _random_u64(2, rows)[parent]  # 1-grams, salted per row
    for n in range(2, lowest + 1):
        keys = _extend(keys[: total - n + 1], hashes[n - 1 :])
    # n-grams that fit in their row: the row of the first word is that of the last.
    starts = np.flatnonzero(parent[: total - lowest + 1] == parent[lowest - 1 :])
    keys = keys[starts]
    twice = _occurs_twice(keys)
    starts, keys = starts[twice], keys[twice]
    flags = np.zeros(total + 1, bool)
    for n in range(lowest, max(wanted) + 1):
        if n > lowest:
            # A repeated n-gram repeats the (n-1)-grams at its start and one word later.
            flags[starts] = True
            last = np.minimum(starts + n - 1, total - 1)
            keep = flags[starts + 1] & (parent[last] == parent[starts]) & (starts + n - 1 < total)
            flags[starts] = False
            starts = starts[keep]
            keys = _extend(keys[keep], hashes[starts + n - 1])
        if len(starts) == 0:
            break
        codes = factorize(keys)
        counts = np.bincount(codes)
        first = first_occurrences(codes)
        if n in top:
            _top_ngram(out[top_ngram_reason(n)], counts, starts[first], parent, cumulative, n)
        if n in dup:
            _dup_ngram(out[dup_ngram_reason(n)], starts[~first], parent, cumulative, n)
        repeated = counts[codes] > 1
        starts, keys = starts[repeated], keys[repeated]
    return {name: ratio(chars, word_chars) for name, chars in out.items()}


def _top_ngram(
    out: np.ndarray,
    counts: np.ndarray,
    first_start: np.ndarray,
    parent: np.ndarray,
    cumulative: np.ndarray,
    n: int,
) -> None:
    """Set ``out[row]`` to the characters of the row's most frequent n-gram (the earliest on
    ties) times its count, when that is more than one. Code ``c`` has ``counts[c]``
    occurrences, the first at ``first_start[c]``; codes follow the text, so rows are sorted."""
    multi = np.flatnonzero(counts > 1)
    if len(multi) == 0:
        return
    count = counts[multi]
    row = parent[first_start[multi]]
    new_row = np.r_[True, row[1:] != row[:-1]]
    segment = np.cumsum(new_row) - 1
    is_best = np.flatnonzero(count == np.maximum.reduceat(count, np.flatnonzero(new_row))[segment])
    best = is_best[np.r_[True, segment[is_best][1:] != segment[is_best][:-1]]]
    start = first_start[multi[best]]
    out[row[best]] = (cumulative[start + n] - cumulative[start]) * count[best]


def _dup_ngram(
    out: np.ndarray,
    repeat_starts: np.ndarray,
    parent: np.ndarray,
    cumulative: np.ndarray,
    n: int,
) -> None:
    """Set ``out[row]`` to the characters of the row's words covered by the n-gram occurrences
    starting at ``repeat_starts`` (sorted), each word once: all n-grams have n words, so an
    occurrence adds the words from where the previous one ended (or its own start) to its end."""
    if len(repeat_starts) == 0:
        return
    ends = repeat_starts + n
    since = np.maximum(repeat_starts, np.r_[0, ends[:-1]])  # never before the row: rows differ
    added = cumulative[ends] - cumulative[np.minimum(since, ends)]
    out += np.bincount(parent[repeat_starts], weights=added, minlength=len(out))


def _enabled(pairs: NgramBounds) -> tuple[int, ...]:
    return tuple(n for n, bound in pairs if bound is not None)


def repetition_measures(
    texts: pa.Array | pa.ChunkedArray,
    spec: RepetitionSpec | None = None,
    *,
    words: Words | None = None,
) -> dict[str, np.ndarray]:
    """Measure the Gopher repetition rules of every text, vectorized over the batch.

    Returns float64 arrays with one entry per text: ``dup_line_ratio``, ``dup_para_ratio``
    (of the lines / paragraphs), ``dup_line_char_ratio``, ``dup_para_char_ratio`` (of the
    text's characters), and ``top_<n>gram_char_ratio`` / ``dup_<n>gram_char_ratio`` (of the
    characters of the words) for each n of the spec whose bound is not ``None``. ``words``: the
    texts' words, if already split (:class:`Words`).
    """
    spec = spec or RepetitionSpec()
    texts = text_array(texts)
    rows = len(texts)
    chars = numpy_of(pc.utf8_length(texts)).astype(np.int64)
    out: dict[str, np.ndarray] = {}
    for name, lists in (
        ("line", pc.split_pattern(texts, "\n")),
        ("para", _paragraphs(texts)),
    ):
        pieces = Pieces(lists, rows)
        count, dup_chars = _duplicates(pieces, rows)
        out[f"dup_{name}_ratio"] = ratio(count, np.diff(pieces.offsets))
        out[f"dup_{name}_char_ratio"] = ratio(dup_chars, chars)
    words = words_of(texts, words)
    top, dup = _enabled(spec.top_ngram_char_ratios), _enabled(spec.dup_ngram_char_ratios)
    out.update(_ngram_measures(words, rows, top, dup))
    return out


def _repetition_checks(spec: RepetitionSpec) -> list[Check]:
    checks: list[Check] = [
        (DUP_LINE_RATIO, DUP_LINE_RATIO, spec.max_dup_line_ratio, False, format_share),
        (DUP_PARA_RATIO, DUP_PARA_RATIO, spec.max_dup_para_ratio, False, format_share),
        (
            DUP_LINE_CHAR_RATIO,
            DUP_LINE_CHAR_RATIO,
            spec.max_dup_line_char_ratio,
            False,
            format_share,
        ),
        (
            DUP_PARA_CHAR_RATIO,
            DUP_PARA_CHAR_RATIO,
            spec.max_dup_para_char_ratio,
            False,
            format_share,
        ),
    ]
    for n, bound in spec.top_ngram_char_ratios:
        checks.append((top_ngram_reason(n), top_ngram_reason(n), bound, False, format_share))
    for n, bound in spec.dup_ngram_char_ratios:
        checks.append((dup_ngram_reason(n), dup_ngram_reason(n), bound, False, format_share))
    return checks


def repetition_filter(
    table: pa.Table, spec: RepetitionSpec, words: Words | None = None
) -> StageResult:
    """Kernel: drop documents that repeat themselves beyond a Gopher bound (repeated lines or
    paragraphs, one phrase dominating, long passages said twice: spam, navigation, templates,
    degenerate generated text). Adds no columns. ``words``: the words of ``table[TEXT]``, if
    already split (:class:`Words`)."""
    measures = repetition_measures(table[TEXT], spec, words=words)
    return drop_first_failure(table, _repetition_checks(spec), measures)


def _ngram_bounds(bounds: Mapping[str, float]) -> NgramBounds:
    try:
        return tuple(sorted((int(n), float(v)) for n, v in bounds.items()))
    except ValueError as exc:
        raise ValueError(f"n-gram bounds are keyed by n (an integer), got {bounds}") from exc


class GopherRepetitionFilter(Filter):
    """The Gopher repetition rules; in the run config, an n-gram bound table is keyed by n."""

    name = "repetition"
    config_key = "repetition"
    spec_type = RepetitionSpec
    on_by_default = True
    recorded_when_off = True
    forms: ClassVar[Mapping[str, Form]] = {
        name: Form(type=dict[str, float], to_spec=_ngram_bounds)
        for name in ("top_ngram_char_ratios", "dup_ngram_char_ratios")
    }

    @classmethod
    def owns(cls, reason: str) -> bool:
        return reason.startswith(("dup_", "top_"))

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        return repetition_filter(table, self.spec, words(table))

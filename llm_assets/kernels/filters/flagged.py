"""Flagged words (profanity, explicit terms, slurs): reject documents dense with them.

A document is split on whitespace into words; each word is lowercased and stripped of the
punctuation around it (``"Shit!"`` is ``shit``, ``(ass)`` is ``ass``, ``class`` is never ``ass``)
and looked up in the word list with one hash lookup per word (``pc.is_in``). A list entry of
several words (``son of a bitch``) flags the consecutive words it spells, whatever punctuation
stands between them. The count of a document is the number of its words that are flagged (a word
covered by two entries counts once), so the density ``flagged / words`` never exceeds 1 and reads
as "x of n words". Entries that begin or end with a symbol (``a$$``) are also looked up with only
sentence punctuation stripped. There is no stemming: list the inflections.

Speed: one RE2 pass over the lowercased texts finds the rows that contain any listed word between
non-alphanumeric characters (a superset of the rows with a flagged word, and in most corpora a
small share); only those rows are split into words and looked up.

The shipped list (``flagged_words_en.txt``) is English; other languages need their own list
(``FlaggedWordsSpec(path=...)``: UTF-8, one word or phrase per line, ``#`` starts a comment).
Lists are cached per path (and the file's modification time), since the filter runs per batch.
"""

from __future__ import annotations

import functools
import os
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.kernels.filters.base import FILTER_STAGE, Build, Filter, Inputs, SharedWords
from llm_assets.kernels.schema import TEXT, StageResult, drop_rows, empty_rejects, string_array

FLAGGED_WORDS = "flagged_words"
DEFAULT_LIST = "flagged_words_en.txt"
"""The shipped English list, package data of :mod:`llm_assets.kernels`."""

PUNCTUATION = (
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    "\u00a1\u00a7\u00ab\u00b6\u00b7\u00bb\u00bf"  # ¡ § « ¶ · » ¿
    "\u2010\u2011\u2012\u2013\u2014\u2015"  # hyphens and dashes
    "\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f"  # curly quotes
    "\u2020\u2021\u2022\u2026\u2039\u203a"  # † ‡ • … ‹ ›
    "\u3001\u3002\uff01\uff0c\uff1a\uff1b\uff1f"  # CJK and full-width punctuation
)
"""Characters stripped from both ends of a word before lookup."""
_SENTENCE_PUNCTUATION = "".join(c for c in PUNCTUATION if c not in "#$%&*+-/<=>@\\^_|~§¶†‡")
"""What only sentences put around a word: stripped instead for list entries that begin or end
with a symbol (``a$$``, ``#hashtag``), which a full strip would cut short."""


@dataclass(frozen=True)
class FlaggedWordsSpec:
    """The flagged-words filter: reject documents where more than ``max_density`` of the words
    are on the list (datatrove's and C4's "bad words" filters, as a density so one stray word in
    a long document does not cost the document)."""

    enabled: bool = field(default=True, metadata={"doc": "Apply this filter (false: off)"})
    path: str | None = field(
        default=None,
        metadata={"doc": "Word list (one per line); default: the shipped English list"},
    )
    """A UTF-8 word list, one word or phrase per line, ``#`` comments; None: the shipped
    English list."""
    max_density: float = field(
        default=0.01, metadata={"doc": "Flagged words per word above which to drop"}
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_density <= 1.0:
            raise ValueError(f"flagged max_density must be within [0, 1], got {self.max_density}")
        if self.path is not None and not str(self.path).strip():
            raise ValueError("flagged words path must be a file path or None (the shipped list)")


def _parse(text: str, name: str) -> frozenset[str]:
    words = set()
    for line in text.splitlines():
        entry = " ".join(line.split("#", 1)[0].split())
        if entry:
            words.add(unicodedata.normalize("NFC", entry).lower())
    if not words:
        raise ValueError(f"flagged-word list {name} has no words (only blank lines and comments)")
    return frozenset(words)


@functools.lru_cache(maxsize=32)
def _load(path: str | None, stamp: tuple[int, int]) -> frozenset[str]:
    """Parse a list once per (path, modification time, size)."""
    if path is None:
        resource = resources.files("llm_assets.kernels") / DEFAULT_LIST
        try:
            text = resource.read_text(encoding="utf-8-sig")
        except OSError as exc:
            raise FileNotFoundError(
                f"the shipped flagged-word list {resource} is missing: reinstall llm-assets "
                f"(the package data must include {DEFAULT_LIST})"
            ) from exc
        return _parse(text, str(resource))
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise OSError(f"cannot read flagged-word list {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"flagged-word list {path} is not UTF-8 text: {exc}") from exc
    return _parse(text, path)


def load_word_list(path: str | os.PathLike[str] | None = None) -> frozenset[str]:
    """Load a flagged-word list (lowercased, NFC, inner whitespace collapsed to one space).

    ``None`` loads the shipped English list. Raises :class:`FileNotFoundError` for a missing file
    and :class:`OSError` for an unreadable one, :class:`ValueError` for a file that is not UTF-8
    or holds no words; each message names the file. Cached: an unchanged file is read once."""
    if path is None:
        return _load(None, (0, 0))
    name = os.fspath(path)
    try:
        stat = os.stat(name)
    except FileNotFoundError:
        raise FileNotFoundError(f"flagged-word list not found: {name}") from None
    except OSError as exc:
        raise OSError(f"cannot read flagged-word list {name}: {exc.strerror or exc}") from exc
    return _load(name, (stat.st_mtime_ns, stat.st_size))


@dataclass(frozen=True)
class _Lookup:
    """A word list prepared for matching."""

    singles: pa.Array
    edged: bool
    """Some single word begins or ends with punctuation (``a$$``): then each word stripped of
    sentence punctuation only is looked up too."""
    firsts: pa.Array
    """First words of the phrases: the only places a phrase can start."""
    phrases: dict[int, pa.Array]
    """Phrases by their number of words."""
    prefilter: str | None
    """An RE2 pattern found in every text that holds a flagged word (and in few others): its
    first word with a non-alphanumeric (or no) character on either side. None for huge lists."""


_PREFILTER_MAX_WORDS = 5000


def _re2_escape(word: str) -> str:
    return "".join("\\" + c if c.isascii() and not c.isalnum() else c for c in word)


@functools.lru_cache(maxsize=32)
def _compiled(words: frozenset[str]) -> _Lookup:
    singles = sorted(w for w in words if " " not in w)
    phrases: dict[int, list[str]] = {}
    for w in words:
        if " " in w:
            phrases.setdefault(w.count(" ") + 1, []).append(w)
    firsts = sorted({w.split(" ")[0] for w in words if " " in w})
    prefilter = None
    heads = sorted(set(singles) | set(firsts))
    if len(heads) <= _PREFILTER_MAX_WORDS:
        guarded: dict[tuple[bool, bool], list[str]] = {}
        for w in heads:
            key = (w[0] in _ALNUM, w[-1] in _ALNUM)
            guarded.setdefault(key, []).append(_re2_escape(w))
        prefilter = "|".join(
            ("(?:^|[^a-z0-9])" if lead else "")
            + "(?:"
            + "|".join(ws)
            + ")"
            + ("(?:[^a-z0-9]|$)" if trail else "")
            for (lead, trail), ws in sorted(guarded.items())
        )
    return _Lookup(
        singles=pa.array(singles, pa.string()),
        edged=any(w != w.strip(PUNCTUATION) for w in singles),
        firsts=pa.array(firsts, pa.string()),
        phrases={n: pa.array(sorted(ps), pa.string()) for n, ps in phrases.items()},
        prefilter=prefilter,
    )


_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def _count_lowered(lowered: pa.Array, lookup: _Lookup) -> tuple[np.ndarray, np.ndarray]:
    """Flagged words and words per (lowercased) text."""
    n = len(lowered)
    # Trimmed first: pyarrow 26's split sometimes keeps trailing non-ASCII whitespace.
    tokens = pc.utf8_split_whitespace(pc.utf8_rtrim_whitespace(lowered))
    flat = pc.list_flatten(tokens)
    parents = pc.list_parent_indices(tokens).to_numpy()
    # Arrow yields an empty token for leading or trailing whitespace: not a word.
    real = pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    n_words = np.bincount(parents, weights=real, minlength=n).astype(np.int32)
    trimmed = pc.utf8_trim(flat, PUNCTUATION)
    hit = pc.is_in(trimmed, value_set=lookup.singles)
    if lookup.edged:
        sentence_trimmed = pc.utf8_trim(flat, _SENTENCE_PUNCTUATION)
        hit = pc.or_(hit, pc.is_in(sentence_trimmed, value_set=lookup.singles))
    covered = hit.to_numpy(zero_copy_only=False)
    if lookup.phrases:
        covered = covered.copy()
        heads = np.flatnonzero(
            pc.is_in(trimmed, value_set=lookup.firsts).to_numpy(zero_copy_only=False)
        )
    for length, entries in lookup.phrases.items():
        starts = heads[heads + length - 1 < len(flat)]
        starts = starts[parents[starts + length - 1] == parents[starts]]  # within one text
        if starts.size == 0:
            continue
        parts = [trimmed.take(pa.array(starts + k)) for k in range(length)]
        joined = pc.binary_join_element_wise(*parts, " ")
        found = starts[pc.is_in(joined, value_set=entries).to_numpy(zero_copy_only=False)]
        for k in range(length):
            covered[found + k] = True
    flagged = np.bincount(parents, weights=covered, minlength=n).astype(np.int32)
    return flagged, n_words


def _count(texts: pa.Array, words: frozenset[str]) -> tuple[np.ndarray, np.ndarray]:
    """Flagged words per text, and words per text wherever any is flagged (0 elsewhere).

    Only the texts the prefilter finds are split into words: in most corpora a small share."""
    n = len(texts)
    flagged = np.zeros(n, np.int32)
    n_words = np.zeros(n, np.int32)
    if n == 0:
        return flagged, n_words
    lookup = _compiled(words)
    lowered = pc.utf8_lower(texts)
    if lookup.prefilter is None:
        return _count_lowered(lowered, lookup)
    hit = pc.fill_null(pc.match_substring_regex(lowered, lookup.prefilter), False)
    rows = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
    if rows.size:
        flagged[rows], n_words[rows] = _count_lowered(lowered.take(pa.array(rows)), lookup)
    return flagged, n_words


def flagged_counts(
    texts: pa.Array | pa.ChunkedArray | Sequence[str], words: frozenset[str]
) -> np.ndarray:
    """Number of flagged words in each text (int32): case-insensitive whole words, surrounding
    punctuation ignored, every word of a matched phrase counted, no word counted twice."""
    array = string_array(texts)
    if not words:
        return np.zeros(len(array), np.int32)
    return _count(array, frozenset(words))[0]


def flagged_filter(table: pa.Table, spec: FlaggedWordsSpec) -> StageResult:
    """Reject documents whose flagged words per word exceed ``spec.max_density`` (a density
    exactly at the threshold passes), with reason ``flagged_words`` and a value like
    ``0.034 (3 of 88 words)``; ``enabled=False`` passes the table through."""
    if not spec.enabled:
        return StageResult(table, empty_rejects())
    words = load_word_list(spec.path)  # also on an empty batch: a bad path fails early
    flagged, n_words = _count(string_array(table.column(TEXT)), words)
    density = np.zeros(len(flagged), np.float64)
    nonzero = n_words > 0
    density[nonzero] = flagged[nonzero] / n_words[nonzero]
    dropped = density > spec.max_density
    values = [
        f"{density[i]:.3f} ({flagged[i]} of {n_words[i]} words)" for i in np.flatnonzero(dropped)
    ]
    return drop_rows(
        table,
        pa.array(dropped, pa.bool_()),
        stage=FILTER_STAGE,
        reasons=[FLAGGED_WORDS] * len(values),
        values=values,
    )


class FlaggedWordsFilter(Filter):
    """Flagged words; a custom list, wherever it is, is read when the run config is read (a
    missing, unreadable, non-UTF-8 or empty list is named as ``flagged_words.path``); a disabled
    one is never read."""

    name = "flagged"
    config_key = "flagged_words"
    spec_type = FlaggedWordsSpec
    reasons = (FLAGGED_WORDS,)
    on_by_default = True
    recorded_when_off = True

    @classmethod
    def from_config(cls, config: Any, build: Build, inputs: Inputs) -> dict[str, Any]:
        path = config.path
        if config.enabled and path:
            inputs.resolve(path, "flagged_words.path")
            try:
                load_word_list(path)
            except (OSError, ValueError) as exc:
                raise ValueError(f"flagged_words.path {path!r}: {exc}") from exc
        return super().from_config(config, build, inputs)

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        return flagged_filter(table, self.spec)

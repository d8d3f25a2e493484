"""Gopher quality heuristics and repetition rules (Rae et al. 2021, "Scaling Language Models";
datatrove's ``GopherQualityFilter`` and ``GopherRepetitionFilter``), vectorized over a batch.

Definitions (the text is normalized: lines end with ``"\\n"``, paragraphs with ``"\\n\\n"``):

* **words** are the whitespace-separated tokens (``str.split()``; Arrow's
  ``utf8_split_whitespace`` splits on the same characters); a word's length is in characters;
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

Speed: every measure is computed for the whole batch at once with Arrow compute and numpy; no
Python code runs per document (except to format the value of a rejected one). Words, lines and
paragraphs are flattened with the index of their document. Words are dictionary-encoded, so
per-word properties (length, letters, stop word, symbols) are computed once per distinct word
and summed per document with ``np.add.reduceat``; a line (paragraph) is only compared, by
dictionary-encoding it, when another line of its document has the same length. N-grams are
64-bit keys rolled from random per-word hashes and a per-document salt, so no n-gram matches
across documents (two different n-grams share a key with probability ~2^-64 per pair). Most
n-grams of prose occur once: for the smallest n, sorting the keys finds the few that repeat; a
longer n-gram can only repeat where both the shorter one at its start and the one a word later
repeat, so each larger n looks at a few percent of the words. Those are numbered by an Arrow
dictionary encoding (in order of first appearance, so an occurrence repeats an earlier one when
its number is not above every number before it), counted, and their covered words summed from
where each repeat starts and ends. About 50,000 documents of ~500 characters a second on one core,
both filters with every check on.

Differences from datatrove, which follows the paper less literally: its n-gram shares divide by
the text's length (spaces and punctuation-only text included) where the paper and this module
divide by the characters of the words; its top n-gram counts even an n-gram seen once; its
duplicated n-grams are found greedily (skipping past each repeat), which can miss overlapping
ones; its word counts and mean length skip punctuation-only words; its line ratios count blank
lines; its bullet lines start with ``•`` or ``-`` only, where the paper says "a bullet point" and
this module also counts the other common bullet glyphs and Markdown's ``*`` (:data:`BULLETS`).
Like datatrove and the paper, the hash and the ellipsis ratios are two checks that share one
bound (``max_symbol_word_ratio``), not one check of their sum.

A check is off when its bound is ``None``. A dropped document is a reject whose reason names the
first failing check, in the order of the spec's fields, and whose value is the measure.

The stop-word rule is English (its words are English ones): when the table holds the result of
language identification (the ``language`` column :func:`language_filter`
adds; ``filter_table`` runs the rule after it), it applies only to the documents identified as
English (:data:`STOP_WORDS_LANGUAGE`) and to those without a result (null); a German document is
not rejected for lacking English stop words, while every other rule still applies to it. Without
that column (language identification off) the rule applies to every document, as it did before
languages were told apart.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.kernels.flagged import PUNCTUATION
from llm_assets.kernels.schema import LANGUAGE, TEXT, StageResult, drop_rows

# --- reject reasons, in the order the checks run --------------------------------------------------
TOO_FEW_WORDS = "too_few_words"
TOO_MANY_WORDS = "too_many_words"
MEAN_WORD_LENGTH_TOO_SHORT = "mean_word_length_too_short"
MEAN_WORD_LENGTH_TOO_LONG = "mean_word_length_too_long"
HASH_WORD_RATIO = "hash_word_ratio"
ELLIPSIS_WORD_RATIO = "ellipsis_word_ratio"
BULLET_LINES_RATIO = "bullet_lines_ratio"
ELLIPSIS_LINES_RATIO = "ellipsis_lines_ratio"
ALPHA_WORDS_RATIO = "alpha_words_ratio"
TOO_FEW_STOP_WORDS = "too_few_stop_words"
QUALITY_REASONS = (
    TOO_FEW_WORDS,
    TOO_MANY_WORDS,
    MEAN_WORD_LENGTH_TOO_SHORT,
    MEAN_WORD_LENGTH_TOO_LONG,
    HASH_WORD_RATIO,
    ELLIPSIS_WORD_RATIO,
    BULLET_LINES_RATIO,
    ELLIPSIS_LINES_RATIO,
    ALPHA_WORDS_RATIO,
    TOO_FEW_STOP_WORDS,
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

# --- measure names (keys of quality_measures; repetition measures are named as their reasons) ----
WORDS = "words"
MEAN_WORD_LENGTH = "mean_word_length"
STOP_WORDS = "stop_words"

STOP_WORDS_LANGUAGE = "en"
"""Language code (of the ``language`` column) of the documents the stop-word rule applies to when
language identification ran: the stop words are English."""

BULLETS = ("•", "●", "○", "▪", "-", "*", "‣", "⁃")
"""Characters that start a bullet line (after optional spaces or tabs). A superset of
datatrove's ``•`` and ``-``: the paper's "bullet point" is any bullet, and ``*`` starts Markdown's
list items as ``-`` does."""
HASH = "#"
"""Counted in the text for ``hash_word_ratio``."""
ELLIPSES = ("...", "…")
"""What ends an ellipsis line (before optional spaces or tabs); counted in the text (without
overlaps: ``"......"`` is two) for ``ellipsis_word_ratio``."""

_BULLET_LINE = "^[ \\t]*[" + "".join("\\" + c if c in "-*" else c for c in BULLETS) + "]"
_ELLIPSIS_LINE = "(?:" + "|".join(e.replace(".", "\\.") for e in ELLIPSES) + ")[ \\t]*$"
_SEED = 0x6F9E1D2C
_ROLL = np.uint64(0x9E3779B97F4A7C15)


def top_ngram_reason(n: int) -> str:
    """Reason (and measure name) of the top ``n``-gram rule, e.g. ``top_2gram_char_ratio``."""
    return TOP_NGRAM_CHAR_RATIO.format(n=n)


def dup_ngram_reason(n: int) -> str:
    """Reason (and measure name) of the duplicated ``n``-gram rule, e.g.
    ``dup_5gram_char_ratio``."""
    return DUP_NGRAM_CHAR_RATIO.format(n=n)


# --- specs ----------------------------------------------------------------------------------------
def _check(
    owner: str, name: str, value: object, *, integer: bool = False, high: float | None = None
) -> None:
    """Refuse a bound that is not None, not a number >= 0 (an int if ``integer``), or above
    ``high``, naming the field."""
    if value is None:
        return
    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, numbers.Integral if integer else numbers.Real)
    if isinstance(value, bool) or not ok_type:
        raise ValueError(f"{owner}.{name} must be {kind} or None, got {value!r}")
    if not value >= 0 or (high is not None and value > high):  # `not >=` also catches NaN
        span = f"between 0 and {high}" if high is not None else ">= 0"
        raise ValueError(f"{owner}.{name} must be {span} (or None), got {value!r}")


def _check_order(owner: str, low_name: str, low: float | None, high_name: str, high: float | None):
    if low is not None and high is not None and high < low:
        raise ValueError(f"{owner}.{high_name} ({high}) must be >= {owner}.{low_name} ({low})")


@dataclass(frozen=True)
class QualitySpec:
    """Gopher quality bounds, datatrove's ``GopherQualityFilter`` defaults; a bound set to
    ``None`` turns its check off. See the module docstring for the definitions."""

    min_words: int | None = 50
    max_words: int | None = 100_000
    min_mean_word_length: float | None = 3.0
    max_mean_word_length: float | None = 10.0
    max_symbol_word_ratio: float | None = 0.1
    """Bound of two checks, as in the paper ("for either the hash symbol or the ellipsis"):
    ``#`` count / words (``hash_word_ratio``), and ``...`` and ``…`` count / words
    (``ellipsis_word_ratio``)."""
    max_bullet_lines_ratio: float | None = 0.9
    """Lines starting with a bullet (:data:`BULLETS`) after optional spaces / lines."""
    max_ellipsis_lines_ratio: float | None = 0.3
    """Lines ending with ``...`` or ``…`` / lines."""
    min_alpha_words_ratio: float | None = 0.8
    """Words with at least one letter (any script) / words."""
    min_stop_words: int | None = 2
    """Words that are in ``stop_words`` once lowercased and stripped of surrounding punctuation.
    English only: with a ``language`` column in the table (language identification on), documents
    identified as another language skip this check (see the module docstring); without one,
    every document is checked."""
    stop_words: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name in ("min_words", "max_words", "min_stop_words"):
            _check(owner, name, getattr(self, name), integer=True)
        for name in ("min_mean_word_length", "max_mean_word_length", "max_symbol_word_ratio"):
            _check(owner, name, getattr(self, name))
        for name in ("max_bullet_lines_ratio", "max_ellipsis_lines_ratio", "min_alpha_words_ratio"):
            _check(owner, name, getattr(self, name), high=1.0)
        _check_order(owner, "min_words", self.min_words, "max_words", self.max_words)
        _check_order(
            owner,
            "min_mean_word_length",
            self.min_mean_word_length,
            "max_mean_word_length",
            self.max_mean_word_length,
        )
        if (
            not isinstance(self.stop_words, Iterable)
            or isinstance(self.stop_words, str)
            or not all(
                isinstance(w, str) and w and not any(c.isspace() for c in w)
                for w in self.stop_words
            )
        ):
            raise ValueError(
                f"{owner}.stop_words must be a tuple of single words, got {self.stop_words!r}"
            )
        object.__setattr__(self, "stop_words", tuple(self.stop_words))


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
        _check(owner, f"{name}[n={n}]", bound, high=1.0)


@dataclass(frozen=True)
class RepetitionSpec:
    """Gopher repetition bounds, datatrove's ``GopherRepetitionFilter`` defaults; a bound set to
    ``None`` turns its check off, as does leaving an n out of (or emptying) an n-gram tuple.
    N-gram bounds are ``(n, max share of the characters of the words)`` pairs."""

    max_dup_line_ratio: float | None = 0.3
    max_dup_para_ratio: float | None = 0.3
    max_dup_line_char_ratio: float | None = 0.2
    max_dup_para_char_ratio: float | None = 0.2
    top_ngram_char_ratios: NgramBounds = ((2, 0.20), (3, 0.18), (4, 0.16))
    dup_ngram_char_ratios: NgramBounds = (
        (5, 0.15),
        (6, 0.14),
        (7, 0.13),
        (8, 0.12),
        (9, 0.11),
        (10, 0.10),
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name in (
            "max_dup_line_ratio",
            "max_dup_para_ratio",
            "max_dup_line_char_ratio",
            "max_dup_para_char_ratio",
        ):
            _check(owner, name, getattr(self, name), high=1.0)
        for name in ("top_ngram_char_ratios", "dup_ngram_char_ratios"):
            pairs = getattr(self, name)
            _check_ngrams(owner, name, pairs)
            object.__setattr__(self, name, tuple((int(n), b) for n, b in pairs))


# --- helpers over flattened pieces ----------------------------------------------------------------
def _text_array(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous string array; a null text counts as empty."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks else pa.array([], texts.type)
    return pc.fill_null(texts, "") if texts.null_count else texts


def _np(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False)


def _row_sums(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row, the sum of ``values`` (row ``i``'s at ``offsets[i]:offsets[i + 1]``) as int64
    (float64 if floats)."""
    dtype = np.float64 if values.dtype.kind == "f" else np.int64
    starts = offsets[:-1]
    if len(values) == 0:
        return np.zeros(len(starts), dtype)
    # reduceat sums values[starts[i]:starts[i + 1]], the last to the end; an empty row would
    # get the next row's first value (or index past the end), hence the 0 appended and where.
    padded = np.concatenate([values, np.zeros(1, values.dtype)])
    sums = np.add.reduceat(padded, starts, dtype=dtype)
    return np.where(starts < offsets[1:], sums, 0)


class _Pieces:
    """The non-empty items of a list-of-strings array, flattened, with the row each came from
    (nondecreasing) and row ``i``'s items at ``offsets[i]:offsets[i + 1]``."""

    def __init__(self, lists: pa.Array, rows: int) -> None:
        flat = lists.flatten()
        parents = _np(pc.list_parent_indices(lists)).astype(np.int64, copy=False)
        lengths = _np(pc.binary_length(flat))
        if len(lengths) and not lengths.all():
            keep = lengths > 0
            flat, parents, lengths = flat.filter(pa.array(keep)), parents[keep], lengths[keep]
        self.flat = flat
        self.parents = parents
        self.nbytes = lengths
        self.offsets = np.zeros(rows + 1, np.int64)
        np.cumsum(np.bincount(parents, minlength=rows), out=self.offsets[1:])
        self._encoded: tuple[np.ndarray, pa.Array] | None = None

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per row, the sum of ``values`` (one number per item) as int64 (float64 if floats)."""
        return _row_sums(self.offsets, values)

    def encoded(self) -> tuple[np.ndarray, pa.Array]:
        """Integer id of every item (equal items, equal ids) and the distinct items."""
        if self._encoded is None:
            if len(self.flat) == 0:
                self._encoded = np.zeros(0, np.int64), pa.array([], pa.string())
            else:
                encoded = self.flat.dictionary_encode()
                ids = _np(encoded.indices).astype(np.int64, copy=False)
                self._encoded = ids, encoded.dictionary
        return self._encoded


_OTHER_WHITESPACE = (
    r"[\x{1c}-\x{1f}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}"
    r"\x{3000}]"
)
"""What ``str.split()`` and ``utf8_split_whitespace`` split on besides ASCII ``\\t\\n\\v\\f\\r``
and space."""


class Words:
    """The whitespace-separated words of a batch of texts (as ``str.split()``), dictionary-encoded:
    for every word in text order, the row it belongs to (``parents``, nondecreasing) and its id
    (``ids``, numbered in order of first appearance), the distinct words (``vocab[id]``), and row
    ``i``'s words at ``offsets[i]:offsets[i + 1]``.

    Splitting and encoding the words is the costly part of every kernel that reads words (the
    Gopher quality and repetition rules, MinHash): ``filter_table`` builds it once per batch
    with :meth:`of` and hands each kernel the words of the rows it sees with :meth:`take`. A
    kernel given no words splits the text itself; either way it sees the same words with the
    same ids, so its results are the same."""

    def __init__(
        self, parents: np.ndarray, ids: np.ndarray, vocab: pa.Array, offsets: np.ndarray
    ) -> None:
        self.parents = parents
        self.ids = ids
        self.vocab = vocab
        self.offsets = offsets

    @classmethod
    def of(cls, texts: pa.Array | pa.ChunkedArray) -> Words:
        """The words of every text (a null text has none).

        Split on ASCII whitespace first (several times faster than on Unicode whitespace); only
        when a word then contains other whitespace is the batch split again on Unicode
        whitespace. Trailing whitespace is trimmed first: pyarrow 26's ``utf8_split_whitespace``
        sometimes keeps the last whitespace character of a non-ASCII string (``"é The\\n"`` may
        give ``"The\\n"``, depending on the memory past the string)."""
        texts = pc.utf8_rtrim_whitespace(_text_array(texts))
        rows = len(texts)
        pieces = _Pieces(pc.ascii_split_whitespace(texts), rows)
        ids, vocab = pieces.encoded()
        if len(vocab) and pc.any(pc.match_substring_regex(vocab, _OTHER_WHITESPACE)).as_py():
            pieces = _Pieces(pc.utf8_split_whitespace(texts), rows)
            ids, vocab = pieces.encoded()
        return cls(pieces.parents, ids, vocab, pieces.offsets)

    @property
    def rows(self) -> int:
        """How many texts the words come from."""
        return len(self.offsets) - 1

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per row, the sum of ``values`` (one number per word) as int64 (float64 if floats)."""
        return _row_sums(self.offsets, values)

    def take(self, rows: np.ndarray) -> Words:
        """The words of the texts at ``rows`` (ascending positions), exactly as :meth:`of` gives
        them for those texts: ids renumbered in order of first appearance, the vocabulary cut to
        the words still present. The n-gram hashes of the repetition rules are drawn by id, so
        the same ids keep them, and every result, the same."""
        rows = np.asarray(rows, np.int64)
        if len(rows) == self.rows:
            return self
        counts = np.diff(self.offsets)[rows]
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        # Position of each kept word: its rank among the kept words, shifted by how far its
        # row moved.
        shift = np.repeat(self.offsets[:-1][rows] - offsets[:-1], counts)
        ids = self.ids[np.arange(offsets[-1], dtype=np.int64) + shift]
        parents = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
        if len(ids) == 0:
            return Words(parents, np.zeros(0, np.int64), pa.array([], pa.string()), offsets)
        codes = _factorize(ids)
        vocab = self.vocab.take(pa.array(ids[_first_occurrences(codes)]))
        return Words(parents, codes, vocab, offsets)


def _words_of(texts: pa.Array | pa.ChunkedArray, words: Words | None) -> Words:
    """``words`` if given (checked to be of as many texts), else the words of ``texts``."""
    if words is None:
        return Words.of(texts)
    if words.rows != len(texts):
        raise ValueError(f"words of {words.rows} texts given for {len(texts)} texts")
    return words


def split_words(texts: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """The words of a string array as ``str.split()`` sees them: for every word in text order,
    the row it belongs to and its id, and the distinct words (``vocab[id]``) (:class:`Words`)."""
    words = Words.of(texts)
    return words.parents, words.ids, words.vocab


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Elementwise ratio as float64, 0 where the denominator is 0."""
    out = np.zeros(len(numerator), np.float64)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def _factorize(keys: np.ndarray) -> np.ndarray:
    """Number integer keys in order of first appearance (the first distinct key is 0, the next
    new one 1, ...): Arrow's hash-based dictionary encoding, as fast as ``pandas.factorize``
    without importing pandas into every worker."""
    return _np(pa.array(keys).dictionary_encode().indices).astype(np.int64, copy=False)


def _first_occurrences(codes: np.ndarray) -> np.ndarray:
    """For codes numbered in order of first appearance (:func:`_factorize`): True where a code
    appears for the first time (it is then above every code before it)."""
    first = np.ones(len(codes), bool)
    if len(codes) > 1:
        running = np.maximum.accumulate(codes)
        first[1:] = running[1:] > running[:-1]
    return first


def _duplicates(pieces: _Pieces, rows: int) -> tuple[np.ndarray, np.ndarray]:
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
    ids = _np(encoded.indices).astype(np.int64)
    parents = pieces.parents[candidates]
    keys = parents * np.int64(len(encoded.dictionary)) + ids  # exact: (row, piece) pairs
    repeats = np.flatnonzero(~_first_occurrences(_factorize(keys)))
    # Characters of the repeated pieces only (counting code points costs a pass over the text).
    chars = _np(pc.utf8_length(encoded.dictionary.take(pa.array(ids[repeats])))).astype(np.int64)
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
    offsets = _np(lists.offsets)
    first = np.zeros(len(flat), bool)
    first[offsets[:-1][np.diff(offsets) > 0] - offsets[0]] = True
    strip = pc.and_(pc.starts_with(flat, "\n"), pa.array(~first))
    if not pc.any(strip).as_py():  # no run of 3, 5, ... newlines: the common case
        return lists
    flat = pc.if_else(strip, pc.utf8_slice_codeunits(flat, 1), flat)
    return type(lists).from_arrays(pa.array(offsets - offsets[0]), flat)


# --- quality --------------------------------------------------------------------------------------
def quality_measures(
    texts: pa.Array | pa.ChunkedArray,
    spec: QualitySpec | None = None,
    *,
    words: Words | None = None,
) -> dict[str, np.ndarray]:
    """Measure every Gopher quality heuristic of every text, vectorized over the batch.

    Returns arrays with one entry per text: ``words`` and ``stop_words`` (int64 counts; stop
    words as in ``spec.stop_words``), ``mean_word_length``, ``hash_word_ratio``,
    ``ellipsis_word_ratio``, ``bullet_lines_ratio``, ``ellipsis_lines_ratio`` and
    ``alpha_words_ratio`` (float64, 0 for a text without words or lines). Exposed so that
    reports and tests can read the measures behind a decision, not only the decision.
    ``words``: the texts' words, if already split.
    """
    return _quality_measures(texts, spec or QualitySpec(), words, _QUALITY_MEASURES)


_QUALITY_MEASURES = frozenset(
    {
        WORDS,
        MEAN_WORD_LENGTH,
        HASH_WORD_RATIO,
        ELLIPSIS_WORD_RATIO,
        BULLET_LINES_RATIO,
        ELLIPSIS_LINES_RATIO,
        ALPHA_WORDS_RATIO,
        STOP_WORDS,
    }
)


def _quality_measures(
    texts: pa.Array | pa.ChunkedArray,
    spec: QualitySpec,
    words: Words | None,
    wanted: frozenset[str],
) -> dict[str, np.ndarray]:
    """The measures of :func:`quality_measures` named in ``wanted``, and only those: the
    stop-word rule alone (run after language identification) needs no lines, lengths or
    symbols."""
    texts = _text_array(texts)
    rows = len(texts)
    words = _words_of(texts, words)
    ids, vocab = words.ids, words.vocab
    n_words = np.diff(words.offsets)
    out: dict[str, np.ndarray] = {}
    # Per distinct word, then gathered to every occurrence: far fewer strings to look at.
    if WORDS in wanted:
        out[WORDS] = n_words
    if MEAN_WORD_LENGTH in wanted:
        length = _np(pc.utf8_length(vocab)).astype(np.int64)
        out[MEAN_WORD_LENGTH] = _ratio(words.sums(length[ids]), n_words)
    # Words hold no whitespace, so counting in every word counts in the text.
    for name, symbols in ((HASH_WORD_RATIO, (HASH,)), (ELLIPSIS_WORD_RATIO, ELLIPSES)):
        if name in wanted:
            count = sum(_np(pc.count_substring(vocab, s)).astype(np.int64) for s in symbols)
            out[name] = _ratio(words.sums(count[ids]), n_words)
    if wanted & {BULLET_LINES_RATIO, ELLIPSIS_LINES_RATIO}:
        lines = _Pieces(pc.split_pattern(texts, "\n"), rows)
        n_lines = np.diff(lines.offsets)
        for name, pattern in (
            (BULLET_LINES_RATIO, _BULLET_LINE),
            (ELLIPSIS_LINES_RATIO, _ELLIPSIS_LINE),
        ):
            if name in wanted:
                matches = _np(pc.match_substring_regex(lines.flat, pattern)).astype(np.int64)
                out[name] = _ratio(lines.sums(matches), n_lines)
    if ALPHA_WORDS_RATIO in wanted:
        alpha = _np(pc.match_substring_regex(vocab, r"\pL")).astype(np.int64)
        out[ALPHA_WORDS_RATIO] = _ratio(words.sums(alpha[ids]), n_words)
    if STOP_WORDS in wanted:
        bare = pc.utf8_trim(pc.utf8_lower(vocab), PUNCTUATION)
        stop_set = pa.array(sorted({w.lower() for w in spec.stop_words}), pa.string())
        stop = _np(pc.is_in(bare, value_set=stop_set)).astype(np.int64)
        out[STOP_WORDS] = words.sums(stop[ids])
    return out


def _count(value: float) -> str:
    return str(int(value))


def _length(value: float) -> str:
    return f"{value:.2f}"


def _share(value: float) -> str:
    text = f"{value:.3f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


# (reason, measure, bound, fails-when-below, value format) in the order the checks run.
_Check = tuple[str, str, float | None, bool, Callable[[float], str]]


def _quality_checks(spec: QualitySpec) -> list[_Check]:
    return [
        (TOO_FEW_WORDS, WORDS, spec.min_words, True, _count),
        (TOO_MANY_WORDS, WORDS, spec.max_words, False, _count),
        (MEAN_WORD_LENGTH_TOO_SHORT, MEAN_WORD_LENGTH, spec.min_mean_word_length, True, _length),
        (MEAN_WORD_LENGTH_TOO_LONG, MEAN_WORD_LENGTH, spec.max_mean_word_length, False, _length),
        (HASH_WORD_RATIO, HASH_WORD_RATIO, spec.max_symbol_word_ratio, False, _share),
        (ELLIPSIS_WORD_RATIO, ELLIPSIS_WORD_RATIO, spec.max_symbol_word_ratio, False, _share),
        (BULLET_LINES_RATIO, BULLET_LINES_RATIO, spec.max_bullet_lines_ratio, False, _share),
        (ELLIPSIS_LINES_RATIO, ELLIPSIS_LINES_RATIO, spec.max_ellipsis_lines_ratio, False, _share),
        (ALPHA_WORDS_RATIO, ALPHA_WORDS_RATIO, spec.min_alpha_words_ratio, True, _share),
        (TOO_FEW_STOP_WORDS, STOP_WORDS, spec.min_stop_words, True, _count),
    ]


def _drop_first_failure(
    table: pa.Table,
    checks: list[_Check],
    measures: dict[str, np.ndarray],
    applies: dict[str, np.ndarray] | None = None,
) -> StageResult:
    """Drop every row that fails an enabled check, with the first failing check's reason and
    its measure as the value. ``applies``: per reason, the rows its check applies to (bool
    array; a reason not named applies to every row)."""
    # filters.py imports this module at its top: its stage name is read once both are loaded.
    from llm_assets.kernels.filters import FILTER_STAGE

    rows = table.num_rows
    first = np.full(rows, -1, np.int64)
    for i, (reason, measure, bound, below, _fmt) in enumerate(checks):
        if bound is None:
            continue
        values = measures[measure]
        failing = values < bound if below else values > bound
        if applies is not None and reason in applies:
            failing &= applies[reason]
        first[(first < 0) & failing] = i
    dropped = first >= 0
    reasons: list[str] = []
    values_out: list[str | None] = []
    for row in np.flatnonzero(dropped):
        reason, measure, _bound, _below, fmt = checks[first[row]]
        reasons.append(reason)
        values_out.append(fmt(measures[measure][row]))
    return drop_rows(
        table,
        pa.array(dropped, pa.bool_()),
        stage=FILTER_STAGE,
        reasons=reasons,
        values=values_out,
    )


def stop_word_rows(table: pa.Table) -> np.ndarray | None:
    """The rows the stop-word rule applies to: where the ``language`` column is
    :data:`STOP_WORDS_LANGUAGE` or null; ``None`` (every row) when the table has no ``language``
    column, i.e. language identification did not run."""
    if LANGUAGE not in table.column_names:
        return None
    codes = table[LANGUAGE]
    if pa.types.is_dictionary(codes.type):
        codes = codes.cast(pa.string())
    english = pc.fill_null(pc.equal(codes, STOP_WORDS_LANGUAGE), True)
    return _np(english).astype(bool, copy=False)


def quality_filter(table: pa.Table, spec: QualitySpec, words: Words | None = None) -> StageResult:
    """Kernel: drop documents that fail a Gopher quality bound (too short or long, odd word
    lengths, too many hashes or ellipses, mostly bullet or ellipsis lines, mostly non-words, no
    stop words: boilerplate, lists, tables and machine output rather than prose). Adds no
    columns. Only the measures of the checks that are on are computed. ``words``: the words of
    ``table[TEXT]``, if already split (:class:`Words`).

    The stop-word rule (English stop words) applies only to the rows :func:`stop_word_rows`
    names: with a ``language`` column (language identification on), the documents identified as
    English (or with a null language); without one (identification off), every document."""
    checks = _quality_checks(spec)
    wanted = frozenset(
        measure for _reason, measure, bound, _below, _fmt in checks if bound is not None
    )
    measures = _quality_measures(table[TEXT], spec, words, wanted)
    applies = None
    if spec.min_stop_words is not None:
        rows = stop_word_rows(table)
        applies = None if rows is None else {TOO_FEW_STOP_WORDS: rows}
    return _drop_first_failure(table, checks, measures, applies)


# --- repetition -----------------------------------------------------------------------------------
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
    length = _np(pc.utf8_length(vocab)).astype(np.int64)[ids]
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
        codes = _factorize(keys)
        counts = np.bincount(codes)
        first = _first_occurrences(codes)
        if n in top:
            _top_ngram(out[top_ngram_reason(n)], counts, starts[first], parent, cumulative, n)
        if n in dup:
            _dup_ngram(out[dup_ngram_reason(n)], starts[~first], parent, cumulative, n)
        repeated = counts[codes] > 1
        starts, keys = starts[repeated], keys[repeated]
    return {name: _ratio(chars, word_chars) for name, chars in out.items()}


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
    texts = _text_array(texts)
    rows = len(texts)
    chars = _np(pc.utf8_length(texts)).astype(np.int64)
    out: dict[str, np.ndarray] = {}
    for name, lists in (
        ("line", pc.split_pattern(texts, "\n")),
        ("para", _paragraphs(texts)),
    ):
        pieces = _Pieces(lists, rows)
        count, dup_chars = _duplicates(pieces, rows)
        out[f"dup_{name}_ratio"] = _ratio(count, np.diff(pieces.offsets))
        out[f"dup_{name}_char_ratio"] = _ratio(dup_chars, chars)
    words = _words_of(texts, words)
    top, dup = _enabled(spec.top_ngram_char_ratios), _enabled(spec.dup_ngram_char_ratios)
    out.update(_ngram_measures(words, rows, top, dup))
    return out


def _repetition_checks(spec: RepetitionSpec) -> list[_Check]:
    checks: list[_Check] = [
        (DUP_LINE_RATIO, DUP_LINE_RATIO, spec.max_dup_line_ratio, False, _share),
        (DUP_PARA_RATIO, DUP_PARA_RATIO, spec.max_dup_para_ratio, False, _share),
        (DUP_LINE_CHAR_RATIO, DUP_LINE_CHAR_RATIO, spec.max_dup_line_char_ratio, False, _share),
        (DUP_PARA_CHAR_RATIO, DUP_PARA_CHAR_RATIO, spec.max_dup_para_char_ratio, False, _share),
    ]
    for n, bound in spec.top_ngram_char_ratios:
        checks.append((top_ngram_reason(n), top_ngram_reason(n), bound, False, _share))
    for n, bound in spec.dup_ngram_char_ratios:
        checks.append((dup_ngram_reason(n), dup_ngram_reason(n), bound, False, _share))
    return checks


def repetition_filter(
    table: pa.Table, spec: RepetitionSpec, words: Words | None = None
) -> StageResult:
    """Kernel: drop documents that repeat themselves beyond a Gopher bound (repeated lines or
    paragraphs, one phrase dominating, long passages said twice: spam, navigation, templates,
    degenerate generated text). Adds no columns. ``words``: the words of ``table[TEXT]``, if
    already split (:class:`Words`)."""
    measures = repetition_measures(table[TEXT], spec, words=words)
    return _drop_first_failure(table, _repetition_checks(spec), measures)


__all__ = [
    "ALPHA_WORDS_RATIO",
    "BULLETS",
    "BULLET_LINES_RATIO",
    "DUP_LINE_CHAR_RATIO",
    "DUP_LINE_RATIO",
    "DUP_NGRAM_CHAR_RATIO",
    "DUP_PARA_CHAR_RATIO",
    "DUP_PARA_RATIO",
    "ELLIPSES",
    "ELLIPSIS_LINES_RATIO",
    "ELLIPSIS_WORD_RATIO",
    "HASH",
    "HASH_WORD_RATIO",
    "MEAN_WORD_LENGTH",
    "MEAN_WORD_LENGTH_TOO_LONG",
    "MEAN_WORD_LENGTH_TOO_SHORT",
    "QUALITY_REASONS",
    "STOP_WORDS",
    "STOP_WORDS_LANGUAGE",
    "TOO_FEW_STOP_WORDS",
    "TOO_FEW_WORDS",
    "TOO_MANY_WORDS",
    "TOP_NGRAM_CHAR_RATIO",
    "WORDS",
    "QualitySpec",
    "RepetitionSpec",
    "Words",
    "dup_ngram_reason",
    "quality_filter",
    "quality_measures",
    "repetition_filter",
    "repetition_measures",
    "split_words",
    "stop_word_rows",
    "top_ngram_reason",
]

"""Gopher quality heuristics (Rae et al. 2021, "Scaling Language Models"; datatrove's
``GopherQualityFilter``), vectorized over a batch.

Words are as :mod:`llm_assets.kernels.words` splits them; **lines** are the non-empty pieces of
the text split on ``"\\n"``. Every measure is computed for the whole batch at once with Arrow
compute and numpy; no Python code runs per document (except to format the value of a rejected
one). Per-word properties (length, letters, stop word, symbols) are computed once per distinct
word. Differences from datatrove: its word counts and mean length skip punctuation-only words;
its line ratios count blank lines; its bullet lines start with ``•`` or ``-`` only, where the
paper says "a bullet point" and this module also counts the other common bullet glyphs and
Markdown's ``*`` (:data:`BULLETS`). Like datatrove and the paper, the hash and the ellipsis
ratios are two checks that share one bound (``max_symbol_word_ratio``), not one check of their
sum.

A check is off when its bound is ``None``. A dropped document is a reject whose reason names the
first failing check, in the order of the spec's fields, and whose value is the measure.

The stop-word rule is English (its words are English ones): when the table holds the result of
language identification (the ``language`` column the language filter adds; the chain runs the
rule after it, :mod:`llm_assets.kernels.filters.stop_words`), it applies only to the documents
identified as English (:data:`STOP_WORDS_LANGUAGE`) and to those without a result (null); a
German document is not rejected for lacking English stop words, while every other rule still
applies to it. Without that column (language identification off) the rule applies to every
document.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.kernels.filters.base import Filter, SharedWords
from llm_assets.kernels.filters.bounds import (
    Check,
    check_bound,
    check_order,
    drop_first_failure,
    format_count,
    format_length,
    format_share,
)
from llm_assets.kernels.filters.flagged import PUNCTUATION
from llm_assets.kernels.schema import LANGUAGE, TEXT, StageResult
from llm_assets.kernels.words import Pieces, Words, numpy_of, ratio, text_array, words_of

if TYPE_CHECKING:
    from llm_assets.kernels.filters.chain import FilterSpec

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


@dataclass(frozen=True)
class QualitySpec:
    """Gopher quality bounds, datatrove's ``GopherQualityFilter`` defaults; a bound set to
    ``None`` turns its check off. See the module docstring for the definitions."""

    min_words: int | None = field(
        default=50, metadata={"doc": "Drop documents of fewer words (null: no bound)"}
    )
    max_words: int | None = field(
        default=100_000, metadata={"doc": "Drop documents of more words (null: no bound)"}
    )
    min_mean_word_length: float | None = field(
        default=3.0,
        metadata={"doc": "Drop documents whose mean word length (characters) is below this"},
    )
    max_mean_word_length: float | None = field(
        default=10.0,
        metadata={"doc": "Drop documents whose mean word length (characters) is above this"},
    )
    max_symbol_word_ratio: float | None = field(
        default=0.1, metadata={"doc": "Highest count of '#' per word, and of '...'/'…' per word"}
    )
    """Bound of two checks, as in the paper ("for either the hash symbol or the ellipsis"):
    ``#`` count / words (``hash_word_ratio``), and ``...`` and ``…`` count / words
    (``ellipsis_word_ratio``)."""
    max_bullet_lines_ratio: float | None = field(
        default=0.9, metadata={"doc": "Highest share of lines that start with a bullet"}
    )
    """Lines starting with a bullet (:data:`BULLETS`) after optional spaces / lines."""
    max_ellipsis_lines_ratio: float | None = field(
        default=0.3, metadata={"doc": "Highest share of lines that end with '...' or '…'"}
    )
    """Lines ending with ``...`` or ``…`` / lines."""
    min_alpha_words_ratio: float | None = field(
        default=0.8, metadata={"doc": "Lowest share of words with at least one letter"}
    )
    """Words with at least one letter (any script) / words."""
    min_stop_words: int | None = field(
        default=2,
        metadata={
            "doc": "Fewest English stop words ('the', 'be', 'to', ...) a document must hold; "
            "documents identified as another language skip this check"
        },
    )
    """Words that are in ``stop_words`` once lowercased and stripped of surrounding punctuation.
    English only: with a ``language`` column in the table (language identification on), documents
    identified as another language skip this check (see the module docstring); without one,
    every document is checked."""
    stop_words: tuple[str, ...] = field(
        default=("the", "be", "to", "of", "and", "that", "have", "with"),
        metadata={"doc": "The stop words min_stop_words counts"},
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name in ("min_words", "max_words", "min_stop_words"):
            check_bound(owner, name, getattr(self, name), integer=True)
        for name in ("min_mean_word_length", "max_mean_word_length", "max_symbol_word_ratio"):
            check_bound(owner, name, getattr(self, name))
        for name in ("max_bullet_lines_ratio", "max_ellipsis_lines_ratio", "min_alpha_words_ratio"):
            check_bound(owner, name, getattr(self, name), high=1.0)
        check_order(owner, "min_words", self.min_words, "max_words", self.max_words)
        check_order(
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
    texts = text_array(texts)
    rows = len(texts)
    words = words_of(texts, words)
    ids, vocab = words.ids, words.vocab
    n_words = np.diff(words.offsets)
    out: dict[str, np.ndarray] = {}
    # Per distinct word, then gathered to every occurrence: far fewer strings to look at.
    if WORDS in wanted:
        out[WORDS] = n_words
    if MEAN_WORD_LENGTH in wanted:
        length = numpy_of(pc.utf8_length(vocab)).astype(np.int64)
        out[MEAN_WORD_LENGTH] = ratio(words.sums(length[ids]), n_words)
    # Words hold no whitespace, so counting in every word counts in the text.
    for name, symbols in ((HASH_WORD_RATIO, (HASH,)), (ELLIPSIS_WORD_RATIO, ELLIPSES)):
        if name in wanted:
            count = sum(numpy_of(pc.count_substring(vocab, s)).astype(np.int64) for s in symbols)
            out[name] = ratio(words.sums(count[ids]), n_words)
    if wanted & {BULLET_LINES_RATIO, ELLIPSIS_LINES_RATIO}:
        lines = Pieces(pc.split_pattern(texts, "\n"), rows)
        n_lines = np.diff(lines.offsets)
        for name, pattern in (
            (BULLET_LINES_RATIO, _BULLET_LINE),
            (ELLIPSIS_LINES_RATIO, _ELLIPSIS_LINE),
        ):
            if name in wanted:
                matches = numpy_of(pc.match_substring_regex(lines.flat, pattern)).astype(np.int64)
                out[name] = ratio(lines.sums(matches), n_lines)
    if ALPHA_WORDS_RATIO in wanted:
        alpha = numpy_of(pc.match_substring_regex(vocab, r"\pL")).astype(np.int64)
        out[ALPHA_WORDS_RATIO] = ratio(words.sums(alpha[ids]), n_words)
    if STOP_WORDS in wanted:
        bare = pc.utf8_trim(pc.utf8_lower(vocab), PUNCTUATION)
        stop_set = pa.array(sorted({w.lower() for w in spec.stop_words}), pa.string())
        stop = numpy_of(pc.is_in(bare, value_set=stop_set)).astype(np.int64)
        out[STOP_WORDS] = words.sums(stop[ids])
    return out


def _quality_checks(spec: QualitySpec) -> list[Check]:
    return [
        (TOO_FEW_WORDS, WORDS, spec.min_words, True, format_count),
        (TOO_MANY_WORDS, WORDS, spec.max_words, False, format_count),
        (
            MEAN_WORD_LENGTH_TOO_SHORT,
            MEAN_WORD_LENGTH,
            spec.min_mean_word_length,
            True,
            format_length,
        ),
        (
            MEAN_WORD_LENGTH_TOO_LONG,
            MEAN_WORD_LENGTH,
            spec.max_mean_word_length,
            False,
            format_length,
        ),
        (HASH_WORD_RATIO, HASH_WORD_RATIO, spec.max_symbol_word_ratio, False, format_share),
        (ELLIPSIS_WORD_RATIO, ELLIPSIS_WORD_RATIO, spec.max_symbol_word_ratio, False, format_share),
        (BULLET_LINES_RATIO, BULLET_LINES_RATIO, spec.max_bullet_lines_ratio, False, format_share),
        (
            ELLIPSIS_LINES_RATIO,
            ELLIPSIS_LINES_RATIO,
            spec.max_ellipsis_lines_ratio,
            False,
            format_share,
        ),
        (ALPHA_WORDS_RATIO, ALPHA_WORDS_RATIO, spec.min_alpha_words_ratio, True, format_share),
        (TOO_FEW_STOP_WORDS, STOP_WORDS, spec.min_stop_words, True, format_count),
    ]


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
    return numpy_of(english).astype(bool, copy=False)


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
    return drop_first_failure(table, checks, measures, applies)


class GopherQualityFilter(Filter):
    """The Gopher quality rules but the stop-word rule, which runs after language
    identification (:class:`~llm_assets.kernels.filters.stop_words.StopWordsFilter`)."""

    name = "quality"
    config_key = "quality"
    spec_type = QualitySpec
    reasons = QUALITY_REASONS[:-1]
    on_by_default = True
    exclude = ("stop_words",)
    recorded_when_off = True

    @classmethod
    def of(cls, spec: FilterSpec) -> Filter | None:
        quality = spec.get(cls.name)
        return None if quality is None else cls(replace(quality, min_stop_words=None))

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        return quality_filter(table, self.spec, words(table))

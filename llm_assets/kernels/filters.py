"""Document filters: each drop is a reject with its reason and the measured value.

:class:`FilterSpec` is the chain ``filtered_documents`` runs on every shard, in order: token-count
bounds, the class label (labelled SFT data), the Gopher quality heuristics but the stop-word rule,
the Gopher repetition rules, flagged words, language, the stop-word rule, and last
decontamination against eval sets (:mod:`llm_assets.kernels.decontam`). The cheap,
language-neutral rules come first, so the costly language model sees fewer documents; the
English stop-word rule comes after language, so a French paragraph is rejected as
``wrong_language``, not as ``too_few_stop_words``. Each step sees only the rows the previous ones
kept, so every row is rejected once, for the first reason that applies. With deduplication on,
the chain ends by annotating each document with its hashes; the global step
(:mod:`llm_assets.kernels.dedup`) then removes duplicates.

A part set to ``None`` is off. :meth:`FilterSpec.standard` turns on what datatrove's and NeMo
Curator's standard pipelines apply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.kernels.decontam import DecontamSpec, decontam_filter
from llm_assets.kernels.dedup import ExactDedupSpec, NearDedupSpec, dedup_annotate
from llm_assets.kernels.flagged import FlaggedWordsSpec, flagged_filter
from llm_assets.kernels.language import LanguageSpec, language_filter
from llm_assets.kernels.quality import (
    QualitySpec,
    RepetitionSpec,
    Words,
    quality_filter,
    repetition_filter,
)
from llm_assets.kernels.schema import (
    INPUT_IDS,
    LABEL,
    METADATA,
    N_TOKENS,
    PROMPT,
    TEXT,
    StageResult,
    drop_rows,
    empty_rejects,
)

FILTER_STAGE = "filter"
TOO_FEW_TOKENS = "too_few_tokens"
TOO_MANY_TOKENS = "too_many_tokens"
MISSING_LABEL = "missing_label"
UNMAPPED_LABEL = "unmapped_label"


@dataclass(frozen=True)
class LengthFilterSpec:
    """Token-count bounds; the study dropped texts under 10 tokens. ``max_tokens`` None = no cap."""

    min_tokens: int = 10
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.min_tokens < 0:
            raise ValueError(f"min_tokens must be >= 0, got {self.min_tokens}")
        if self.max_tokens is not None and self.max_tokens < self.min_tokens:
            raise ValueError(
                f"max_tokens ({self.max_tokens}) must be >= min_tokens ({self.min_tokens})"
            )


@dataclass(frozen=True)
class LabelSpec:
    """A class label taken from the input record (a field of ``metadata``), optionally mapped,
    e.g. review ratings to sentiments: ``{"1": "negative", ..., "5": "positive"}``.

    A row without a label is rejected (``missing_label``): the field absent, JSON ``null``, or a
    string that is empty or only whitespace (an empty CSV cell: ``t,b,``), which would otherwise
    become a class ``""`` nobody chose; a mapping that names that exact string (e.g. ``{"":
    "neutral"}``) maps it instead. With a mapping, a value outside it is rejected too
    (``unmapped_label``), so no example reaches training with a label nobody chose. Other
    values are kept as they are (not stripped).
    """

    field: str
    mapping: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.field:
            raise ValueError("label field must be a non-empty field name")


def filter_length(table: pa.Table, spec: LengthFilterSpec) -> StageResult:
    """Keep documents whose ``n_tokens`` lies within the bounds; reject the rest with the count."""
    counts = table[N_TOKENS]
    too_few = pc.less(counts, spec.min_tokens)
    dropped = (
        pc.or_(too_few, pc.greater(counts, spec.max_tokens))
        if spec.max_tokens is not None
        else too_few
    )
    counts_gone = table.filter(dropped)[N_TOKENS].to_pylist()
    return drop_rows(
        table,
        dropped,
        stage=FILTER_STAGE,
        reasons=[TOO_FEW_TOKENS if n < spec.min_tokens else TOO_MANY_TOKENS for n in counts_gone],
        values=[str(n) for n in counts_gone],
    )


def attach_label(table: pa.Table, spec: LabelSpec) -> StageResult:
    """Add a string ``label`` column from ``metadata[spec.field]`` (mapped); reject rows without
    one (absent, null, or an empty or whitespace-only string: :class:`LabelSpec`). Numbers are
    matched by their JSON text (``5`` and ``"5"`` both map through ``"5"``)."""
    mapping = dict(spec.mapping)
    labels: list[str | None] = []
    reasons: list[str] = []
    values: list[str | None] = []
    dropped: list[bool] = []
    for raw in table[METADATA].to_pylist() if METADATA in table.column_names else []:
        record = json.loads(raw) if raw else {}
        value = record.get(spec.field) if isinstance(record, dict) else None
        text = None if value is None else value if isinstance(value, str) else json.dumps(value)
        if text is None or (not text.strip() and text not in mapping):
            reason = MISSING_LABEL
        elif mapping and text not in mapping:
            reason = UNMAPPED_LABEL
        else:
            labels.append(mapping.get(text, text))
            dropped.append(False)
            continue
        dropped.append(True)
        reasons.append(reason)
        values.append(
            spec.field if text is None else f"{spec.field}={text if text.strip() else repr(text)}"
        )
    if len(dropped) != table.num_rows:  # no metadata column at all: every label is missing
        dropped = [True] * table.num_rows
        reasons, values = [MISSING_LABEL] * table.num_rows, [spec.field] * table.num_rows
    result = drop_rows(table, dropped, stage=FILTER_STAGE, reasons=reasons, values=values)
    kept = result.kept.append_column(pa.field(LABEL, pa.string()), pa.array(labels, pa.string()))
    return StageResult(kept, result.rejects)


@dataclass(frozen=True)
class FilterSpec:
    """Everything ``filtered_documents`` applies, in order; each part can be left out."""

    length: LengthFilterSpec = field(default_factory=LengthFilterSpec)
    label: LabelSpec | None = None
    quality: QualitySpec | None = None
    repetition: RepetitionSpec | None = None
    flagged: FlaggedWordsSpec | None = None
    language: LanguageSpec | None = None
    decontam: DecontamSpec | None = None
    exact_dedup: ExactDedupSpec | None = None
    near_dedup: NearDedupSpec | None = None

    @classmethod
    def standard(cls, **overrides: object) -> FilterSpec:
        """Every filter on with datatrove's defaults (English, Gopher rules, both dedups)."""
        parts: dict[str, object] = {
            "quality": QualitySpec(),
            "repetition": RepetitionSpec(),
            "flagged": FlaggedWordsSpec(),
            "language": LanguageSpec(),
            "exact_dedup": ExactDedupSpec(),
            "near_dedup": NearDedupSpec(),
        }
        parts.update(overrides)
        return cls(**parts)  # type: ignore[arg-type]

    @property
    def dedup(self) -> bool:
        """Whether the global deduplication step runs after the per-shard chain."""
        return bool(
            (self.exact_dedup and self.exact_dedup.enabled)
            or (self.near_dedup and self.near_dedup.enabled)
        )


def _split_stop_words(
    quality: QualitySpec | None,
) -> tuple[QualitySpec | None, QualitySpec | None]:
    """The Gopher rules without the stop-word rule, and the stop-word rule alone (or None).

    The stop-word rule is English-specific: run before language identification it would reject a
    French paragraph as ``too_few_stop_words``; after it, the paragraph is ``wrong_language``.
    With other languages kept (``languages: [en, de]``) or only annotated (``[]``), the rule
    checks only the documents identified as English
    (:func:`~llm_assets.kernels.quality.stop_word_rows`).
    The other rules are cheap and language-neutral, so they run first and the costly language
    model sees only the documents they kept."""
    if quality is None or quality.min_stop_words is None:
        return quality, None
    only: dict[str, object] = {f.name: None for f in fields(QualitySpec)}
    only.update(min_stop_words=quality.min_stop_words, stop_words=quality.stop_words)
    return replace(quality, min_stop_words=None), QualitySpec(**only)  # type: ignore[arg-type]


_ROW = "__filter_row"


class _SharedWords:
    """The words of the batch, split once for every step that reads words (Gopher quality,
    Gopher repetition, the stop-word rule, MinHash): splitting and encoding them was a quarter
    of the chain's time when each step did it again. Built at the first step that asks, on the
    rows it sees; a later step, which sees fewer rows, gets the words of its rows
    (:meth:`Words.take`), found by the ``_ROW`` number each row carries through the chain."""

    def __init__(self) -> None:
        self.words: Words | None = None
        self.rows = np.zeros(0, np.int64)

    def __call__(self, table: pa.Table) -> Words:
        rows = table[_ROW].to_numpy()
        if self.words is None:
            self.words = Words.of(table[TEXT])
        elif len(rows) != len(self.rows):  # steps only drop rows, in order: same count, same rows
            self.words = self.words.take(np.searchsorted(self.rows, rows))
        self.rows = rows
        return self.words


def filter_table(table: pa.Table, spec: FilterSpec | LengthFilterSpec) -> StageResult:
    """Kernel of ``filtered_documents``: run the filter chain, collecting every step's rejects.

    The steps that read words share one split of the text (:class:`_SharedWords`); each gives
    what it gives when run alone on the table."""
    if isinstance(spec, LengthFilterSpec):
        spec = FilterSpec(length=spec)
    words = _SharedWords()
    steps = [lambda t: filter_length(t, spec.length)]
    if spec.label is not None:
        label = spec.label
        steps.append(lambda t: attach_label(t, label))
    quality, stop_words = _split_stop_words(spec.quality)
    if quality is not None:
        steps.append(lambda t: quality_filter(t, quality, words(t)))
    if spec.repetition is not None:
        steps.append(lambda t: repetition_filter(t, spec.repetition, words(t)))
    if spec.flagged is not None and spec.flagged.enabled:
        steps.append(lambda t: flagged_filter(t, spec.flagged))
    if spec.language is not None and spec.language.enabled:
        steps.append(lambda t: language_filter(t, spec.language))
    if stop_words is not None:
        steps.append(lambda t: quality_filter(t, stop_words, words(t)))
    if spec.decontam is not None:
        decontam = spec.decontam
        steps.append(
            lambda t: decontam_filter(t, decontam, None if PROMPT in t.column_names else words(t))
        )
    if spec.dedup:
        exact = spec.exact_dedup or ExactDedupSpec(enabled=False)
        near = spec.near_dedup or NearDedupSpec(enabled=False)
        steps.append(lambda t: dedup_annotate(t, exact, near, words(t) if near.enabled else None))
    rejects = [empty_rejects()]
    # With more than one step, every row carries its number (_ROW) through the chain: it finds
    # the shared words of the rows a step sees, and the token ids. The token ids are the widest
    # column and no filter reads them: set them aside and take the survivors' ids once at the
    # end, instead of copying them at every step that drops rows.
    numbered = len(steps) > 1
    ids = table[INPUT_IDS] if INPUT_IDS in table.column_names and numbered else None
    if ids is not None:
        position, ids_field = table.schema.get_field_index(INPUT_IDS), table.schema.field(INPUT_IDS)
        table = table.drop_columns([INPUT_IDS])
    if numbered:
        table = table.append_column(_ROW, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    for step in steps:
        result = step(table)
        table = result.kept
        rejects.append(result.rejects)
    if numbered:
        rows = table[_ROW]
        table = table.drop_columns([_ROW])
        if ids is not None:
            table = table.add_column(position, ids_field, ids.take(rows))
    return StageResult(table, pa.concat_tables(rejects))

"""The class label of labelled SFT data, taken from a field of the input record."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from llm_assets.kernels.filters.base import FILTER_STAGE, Build, Filter, Inputs, SharedWords
from llm_assets.kernels.schema import LABEL, METADATA, StageResult, drop_rows
from llm_assets.kernels.settings import Form

MISSING_LABEL = "missing_label"
UNMAPPED_LABEL = "unmapped_label"


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

    field: str = dataclasses.field(
        metadata={"doc": "Record field to carry as the class label (e.g. rating)"}
    )
    mapping: tuple[tuple[str, str], ...] = dataclasses.field(
        default=(), metadata={"doc": "Map label values, e.g. {'1': 'negative', '5': 'positive'}"}
    )

    def __post_init__(self) -> None:
        if not self.field:
            raise ValueError("label field must be a non-empty field name")


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


class LabelFilter(Filter):
    """``label_field`` and ``label_mapping`` at the top of ``filtered_documents.config``; on
    when a field is named."""

    name = "label"
    config_key = None
    spec_type = LabelSpec
    reasons = (MISSING_LABEL, UNMAPPED_LABEL)
    switch = False
    recorded_when_off = True
    keys: ClassVar[Mapping[str, str]] = {"field": "label_field", "mapping": "label_mapping"}
    forms: ClassVar[Mapping[str, Form]] = {
        "field": Form(type=str | None, default=None),
        "mapping": Form(
            type=dict[str, str] | None,
            default=None,
            to_spec=lambda mapping: tuple(sorted((mapping or {}).items())),
        ),
    }

    @classmethod
    def from_config(cls, config: Any, build: Build, inputs: Inputs) -> dict[str, Any]:
        if not config.label_field:
            if config.label_mapping:
                raise ValueError(
                    "label_mapping is set but label_field is not: name the field to map"
                )
            return {cls.name: None}
        return {cls.name: build(config)}

    @classmethod
    def setting_of(cls, reason: str) -> str:
        return "label_field" if reason == MISSING_LABEL else "label_mapping"

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        return attach_label(table, self.spec)

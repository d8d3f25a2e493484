"""The token-length filter: what passes, what is rejected and with which reason and value."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_assets.lib.filters import (
    TOO_FEW_TOKENS,
    TOO_MANY_TOKENS,
    LengthFilterSpec,
    filter_table,
)
from llm_assets.lib.schema import REJECT_SCHEMA


def _table(counts):
    n = len(counts)
    return pa.table(
        {
            "doc_id": pa.array([f"d{i}" for i in range(n)], pa.string()),
            "source_file": pa.array(["f.jsonl"] * n, pa.string()),
            "source_line": pa.array(list(range(1, n + 1)), pa.int64()),
            "text": pa.array(["word " * c for c in counts], pa.string()),
            "metadata": pa.array([None] * n, pa.string()),
            "n_tokens": pa.array(counts, pa.int32()),
        }
    )


def test_bounds_are_inclusive_and_each_drop_has_reason_and_value():
    result = filter_table(_table([9, 10, 11, 50, 51]), LengthFilterSpec(10, 50))
    assert result.kept["n_tokens"].to_pylist() == [10, 11, 50]
    assert result.rejects.schema == REJECT_SCHEMA
    assert result.rejects["reason"].to_pylist() == [TOO_FEW_TOKENS, TOO_MANY_TOKENS]
    assert result.rejects["value"].to_pylist() == ["9", "51"]
    assert result.rejects["source_line"].to_pylist() == [1, 5]
    assert set(result.rejects["stage"].to_pylist()) == {"filter"}
    assert result.rejects["sample"][0].as_py().startswith("word")


def test_default_is_the_study_rule_without_upper_bound():
    result = filter_table(_table([0, 9, 10, 100_000]), LengthFilterSpec())
    assert result.kept["n_tokens"].to_pylist() == [10, 100_000]


def test_empty_table():
    result = filter_table(_table([]), LengthFilterSpec())
    assert result.kept.num_rows == 0 and result.rejects.num_rows == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"min_tokens": -1}, "min_tokens"), ({"min_tokens": 10, "max_tokens": 5}, "max_tokens")],
)
def test_inconsistent_bounds_are_refused_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LengthFilterSpec(**kwargs)


@given(st.lists(st.integers(0, 200), max_size=50), st.integers(0, 100), st.integers(0, 100))
def test_nothing_lost(counts, low, extra):
    result = filter_table(_table(counts), LengthFilterSpec(low, low + extra))
    assert result.kept.num_rows + result.rejects.num_rows == len(counts)
    assert all(low <= c <= low + extra for c in result.kept["n_tokens"].to_pylist())


def _labelled(metadata: list[str | None]) -> pa.Table:
    n = len(metadata)
    return pa.table(
        {
            "doc_id": [f"d{i}" for i in range(n)],
            "source_file": ["reviews.csv"] * n,
            "source_line": list(range(1, n + 1)),
            "text": [f"review {i}" for i in range(n)],
            "metadata": metadata,
            "n_tokens": [20] * n,
        }
    )


def test_label_column_is_mapped_and_rows_without_a_usable_label_are_rejects():
    from llm_assets.lib.filters import (
        MISSING_LABEL,
        UNMAPPED_LABEL,
        FilterSpec,
        LabelSpec,
    )

    mapping = (("1", "negative"), ("2", "negative"), ("4", "positive"), ("5", "positive"))
    spec = FilterSpec(label=LabelSpec(field="rating", mapping=mapping))
    table = _labelled(['{"rating": 5}', '{"rating": "1"}', '{"rating": 3}', '{"title": "x"}', None])
    result = filter_table(table, spec)
    assert result.kept["label"].to_pylist() == ["positive", "negative"]
    assert result.rejects["reason"].to_pylist() == [UNMAPPED_LABEL, MISSING_LABEL, MISSING_LABEL]
    assert result.rejects["value"].to_pylist() == ["rating=3", "rating", "rating"]
    assert result.rejects["source_line"].to_pylist() == [3, 4, 5]


def test_label_without_mapping_passes_values_through_and_length_rejects_come_first():
    from llm_assets.lib.filters import FilterSpec, LabelSpec, LengthFilterSpec

    table = _labelled(['{"topic": "science"}', '{"topic": "art"}'])
    table = table.set_column(5, "n_tokens", pa.array([3, 30], pa.int32()))
    result = filter_table(
        table, FilterSpec(length=LengthFilterSpec(min_tokens=10), label=LabelSpec("topic"))
    )
    assert result.kept["label"].to_pylist() == ["art"]
    assert result.rejects["reason"].to_pylist() == ["too_few_tokens"]


def test_standard_chain_names_the_most_telling_reason():
    """Cheap language-neutral rules first, language next, the English stop-word rule last: a
    French paragraph is ``wrong_language`` (not ``too_few_stop_words``), English without stop
    words is ``too_few_stop_words``, a short note is ``too_few_words`` before any model runs."""
    import pyarrow as pa

    from llm_assets.lib.filters import FilterSpec, filter_table
    from llm_assets_tests.conftest import docs_table

    french = (
        "Le conseil municipal a voté hier soir un nouveau budget pour la rénovation des écoles "
        "primaires du quartier nord, après plusieurs mois de débats entre les élus de la majorité "
        "et ceux de l'opposition, qui réclamaient davantage de moyens pour les cantines scolaires "
        "et pour l'entretien des gymnases construits dans les années soixante-dix dans la ville."
    )
    telegraphic = " ".join(["council votes budget school repairs north district"] * 8)
    texts = [french, telegraphic, "A short note."]
    table = docs_table(texts)
    table = table.append_column("n_tokens", pa.array([100, 100, 100], pa.int32()))
    spec = FilterSpec.standard(exact_dedup=None, near_dedup=None, repetition=None)
    result = filter_table(table, spec)
    assert dict(
        zip(result.rejects["doc_id"].to_pylist(), result.rejects["reason"].to_pylist(), strict=True)
    ) == {"d0": "wrong_language", "d1": "too_few_stop_words", "d2": "too_few_words"}

"""The token-length filter: what passes, what is rejected and with which reason and value."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_assets.kernels.filters.chain import FilterSpec, filter_table
from llm_assets.kernels.filters.length import TOO_FEW_TOKENS, TOO_MANY_TOKENS, LengthFilterSpec
from llm_assets.kernels.schema import REJECT_SCHEMA


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
    from llm_assets.kernels.filters.chain import FilterSpec
    from llm_assets.kernels.filters.label import MISSING_LABEL, UNMAPPED_LABEL, LabelSpec

    mapping = (("1", "negative"), ("2", "negative"), ("4", "positive"), ("5", "positive"))
    spec = FilterSpec(label=LabelSpec(field="rating", mapping=mapping))
    table = _labelled(['{"rating": 5}', '{"rating": "1"}', '{"rating": 3}', '{"title": "x"}', None])
    result = filter_table(table, spec)
    assert result.kept["label"].to_pylist() == ["positive", "negative"]
    assert result.rejects["reason"].to_pylist() == [UNMAPPED_LABEL, MISSING_LABEL, MISSING_LABEL]
    assert result.rejects["value"].to_pylist() == ["rating=3", "rating", "rating"]
    assert result.rejects["source_line"].to_pylist() == [3, 4, 5]


def test_label_without_mapping_passes_values_through_and_length_rejects_come_first():
    from llm_assets.kernels.filters.chain import FilterSpec
    from llm_assets.kernels.filters.label import LabelSpec
    from llm_assets.kernels.filters.length import LengthFilterSpec

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

    from llm_assets.kernels.filters.chain import FilterSpec, filter_table
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


def _each_kernel_alone(table: pa.Table, spec: FilterSpec) -> tuple[pa.Table, pa.Table]:
    """The chain of :func:`filter_table` spelled out, each kernel splitting the text itself."""
    from llm_assets.kernels.dedup import dedup_annotate
    from llm_assets.kernels.filters.flagged import flagged_filter
    from llm_assets.kernels.filters.gopher_quality import GopherQualityFilter, quality_filter
    from llm_assets.kernels.filters.gopher_repetition import repetition_filter
    from llm_assets.kernels.filters.language import language_filter
    from llm_assets.kernels.filters.length import filter_length
    from llm_assets.kernels.filters.stop_words import StopWordsFilter
    from llm_assets.kernels.schema import empty_rejects

    quality, stop_words = GopherQualityFilter.of(spec).spec, StopWordsFilter.of(spec).spec
    steps = [
        lambda t: filter_length(t, spec.length),
        lambda t: quality_filter(t, quality),
        lambda t: repetition_filter(t, spec.repetition),
        lambda t: flagged_filter(t, spec.flagged),
        lambda t: language_filter(t, spec.language),
        lambda t: quality_filter(t, stop_words),
        lambda t: dedup_annotate(t, spec.exact_dedup, spec.near_dedup),
    ]
    rejects = [empty_rejects()]
    for step in steps:
        result = step(table)
        table = result.kept
        rejects.append(result.rejects)
    return table, pa.concat_tables(rejects)


def _crafted_texts() -> list[str]:
    """One document per reason of the standard chain (its position in ``reasons`` below), then
    generated prose, mixed case and Unicode whitespace among it."""
    import random

    prose = (
        "The committee met on Tuesday to review the budget of the library and to decide which "
        "of the proposals would have the support of the members, and the chair said that the "
        "work on the roof would begin with the spring. Several residents spoke about the "
        "opening hours, which had been cut last year, and asked whether the reading room could "
        "stay open later during the exams; the treasurer promised to bring figures to the next "
        "meeting in March."
    )
    telegraphic = (
        "council votes budget school repairs north district mayor approves funding plan city "
        "schools roofs windows heating contractors start work april finish autumn parents "
        "welcome decision teachers ask more classrooms library hours extended evenings weekends "
        "students exams reading rooms open later treasurer presents figures march meeting "
        "residents debate parking fees market square traffic lights bridge closed repairs"
    )
    french = (
        "Le conseil municipal a voté hier soir un nouveau budget pour la rénovation des écoles "
        "primaires du quartier nord, après plusieurs mois de débats entre les élus de la majorité "
        "et ceux de l'opposition, qui réclamaient davantage de moyens pour les cantines scolaires "
        "et pour l'entretien des gymnases construits dans les années soixante-dix dans la ville."
    )
    words = prose.lower().replace(",", "").replace(".", "").replace(";", "").split()
    crafted = [
        "tiny",  # too_few_tokens (n_tokens 3)
        "A short note of the day.",  # too_few_words
        " ".join(["the river and the hill"] * 90),  # too_many_words (max 400)
        " ".join(["a b of to c d"] * 12),  # mean_word_length_too_short
        " ".join(["the extraordinarilylongwordofthecommittee and"] * 30),  # ..._too_long
        prose + " #tag #tag #tag #tag #tag #tag #tag #tag #tag #tag #tag #tag",  # hash_word_ratio
        "\n".join(f"- {w} reports about the library budget" for w in words[:12]),  # bullets
        "\n".join(
            f"{w} and the story of the library went on and on and then..." for w in words[:12]
        ),
        # ^ ellipsis_lines_ratio
        prose + " " + " ".join(str(i) for i in range(300, 360)),  # alpha_words_ratio
        "\n".join([prose] * 2 + ["And the end."] * 4),  # dup_line_ratio
        "\n\n".join(["The meeting was long.", "The meeting was long.", prose.replace(", ", "\n")]),
        # ^ dup_para_ratio
        prose + " " + " ".join(["of the"] * 25),  # top_2gram_char_ratio
        prose + " " + prose.replace("The committee", "A board"),  # dup_5gram_char_ratio
        prose + (" fuck" * 6),  # flagged words
        french,  # wrong_language
        telegraphic,  # too_few_stop_words
        prose,  # kept, then an exact duplicate of it and a near duplicate
        prose,
        prose.replace("Tuesday", "Monday"),
        prose.replace("the library", "THE\u00a0Library").replace(" and ", "\u3000And ", 1),
    ]
    rnd = random.Random(4)
    generated = [
        " ".join(
            rnd.choice(words).capitalize() if rnd.random() < 0.1 else rnd.choice(words)
            for _ in range(rnd.randint(20, 120))
        )
        for _ in range(60)
    ]
    mixed = crafted[:]
    for i, text in enumerate(generated):  # interleaved: dropped rows between kept ones
        mixed.insert(rnd.randint(0, len(mixed)), text if i % 3 else crafted[i % len(crafted)])
    return crafted + mixed


def test_shared_words_give_what_each_kernel_gives_alone():
    """filter_table splits the words once and hands each step the words of its rows: the kept
    table (MinHash signatures included) and the rejects are those of each kernel run alone."""
    from llm_assets.kernels.filters.gopher_quality import QualitySpec
    from llm_assets_tests.conftest import docs_table

    texts = _crafted_texts()
    table = docs_table(texts)
    n_tokens = [3 if t == "tiny" else 10 + len(t) // 5 for t in texts]
    table = table.append_column("n_tokens", pa.array(n_tokens, pa.int32()))
    ids = pa.array([[i] * (i % 4) for i in range(len(texts))], pa.list_(pa.int32()))
    table = table.add_column(table.num_columns - 1, "input_ids", ids)
    spec = FilterSpec.standard(quality=QualitySpec(max_words=400))
    shared = filter_table(table, spec)
    kept, rejects = _each_kernel_alone(table, spec)
    assert shared.kept.equals(kept)
    assert shared.rejects.equals(rejects)
    reasons = set(rejects["reason"].to_pylist())
    assert {
        "too_few_tokens",
        "too_few_words",
        "too_many_words",
        "mean_word_length_too_short",
        "mean_word_length_too_long",
        "hash_word_ratio",
        "bullet_lines_ratio",
        "ellipsis_lines_ratio",
        "alpha_words_ratio",
        "dup_line_ratio",
        "dup_para_ratio",
        "top_2gram_char_ratio",
        "dup_5gram_char_ratio",
        "wrong_language",
        "too_few_stop_words",
    } <= reasons
    assert any("flagged" in r for r in reasons)
    assert kept.num_rows > 10 and "minhash" in kept.column_names


def test_words_taken_for_some_rows_are_those_split_from_those_rows():
    from llm_assets.kernels.words import Words

    texts = pa.array(_crafted_texts(), pa.string())
    words = Words.of(texts)
    for rows in ([], [0], [3, 5, 19], list(range(1, len(texts), 2)), [len(texts) - 1]):
        taken = words.take(np.array(rows, np.int64))
        fresh = Words.of(texts.take(pa.array(rows, pa.int64())))
        assert taken.parents.tolist() == fresh.parents.tolist()
        assert taken.ids.tolist() == fresh.ids.tolist()
        assert taken.vocab.equals(fresh.vocab)
        assert taken.offsets.tolist() == fresh.offsets.tolist()


def test_an_empty_or_blank_label_is_missing_not_a_class_of_its_own():
    """An empty CSV cell (``t,b,``) or a label of spaces was kept as the class ``""`` (or
    ``"  "``); it is a ``missing_label`` reject, as an absent field or JSON null is. A mapping
    that names the exact empty string maps it on purpose."""
    from llm_assets.kernels.filters.chain import FilterSpec
    from llm_assets.kernels.filters.label import MISSING_LABEL, LabelSpec

    table = _labelled(
        ['{"label": ""}', '{"label": "  "}', '{"label": null}', '{"label": "ok"}', '{"x": 1}']
    )
    result = filter_table(table, FilterSpec(label=LabelSpec("label")))
    assert result.kept["label"].to_pylist() == ["ok"]
    assert result.rejects["reason"].to_pylist() == [MISSING_LABEL] * 4
    assert result.rejects["value"].to_pylist() == ["label=''", "label='  '", "label", "label"]
    mapped = filter_table(
        table, FilterSpec(label=LabelSpec("label", mapping=(("", "none"), ("ok", "fine"))))
    )
    assert mapped.kept["label"].to_pylist() == ["none", "fine"]
    assert mapped.rejects["reason"].to_pylist() == [MISSING_LABEL] * 3

"""The mixture kernel: which source a file belongs to, the spec's checks, and the targets."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.mixing.balance import spread_quotas
from llm_assets.kernels.mixing.mixture import (
    MixtureSource,
    MixtureSpec,
    file_matches,
    mixture_targets,
)


def _spec(weights: dict[str, float], **kwargs) -> MixtureSpec:
    return MixtureSpec(
        sources=tuple(MixtureSource(n, (f"{n}/",), w) for n, w in weights.items()), **kwargs
    )


@pytest.mark.parametrize(
    ("pattern", "path", "held"),
    [
        ("wiki/a.jsonl", "wiki/a.jsonl", True),  # the file itself
        ("wiki", "wiki/a.jsonl", True),  # a folder: every file below
        ("wiki/", "wiki/deep/b.jsonl.gz", True),
        ("./wiki/", "wiki/a.jsonl", True),  # a leading ./ is ignored
        ("wiki", "wikipedia/a.jsonl", False),  # a folder is a whole path part
        ("wiki/a", "wiki/a.jsonl", False),  # no prefix of a name
        ("*.jsonl", "wiki/deep/a.jsonl", True),  # * matches / too
        ("code/*", "code/python/x.jsonl", True),
        ("code/*.py.jsonl", "code/x.jsonl", False),
        ("Wiki/", "wiki/a.jsonl", False),  # case-sensitive, as the file names are
        ("*", "anything/at/all.txt", True),
        ("**/*.jsonl", "a.jsonl", False),  # ** is two *: the / needs a folder (README says so)
        ("././/wiki", "wiki/a.jsonl", True),
        ("data_[0-9].csv", "data_7.csv", True),
    ],
)
def test_a_file_belongs_to_a_pattern_by_its_path_a_folder_or_a_shell_pattern(pattern, path, held):
    assert file_matches(pattern, path) is held


def test_a_file_belongs_to_the_first_source_that_names_it_and_none_to_no_source():
    spec = MixtureSpec(
        sources=(
            MixtureSource("code", ("code/", "*.py.jsonl"), 1.0),
            MixtureSource("rest", ("*",), 3.0),
        )
    )
    assert spec.sources_of(["code/a.jsonl", "x.py.jsonl", "wiki/a.jsonl", "code/a.jsonl"]) == [
        "code",
        "code",
        "rest",
        "code",
    ]
    narrow = MixtureSpec(
        sources=(MixtureSource("a", ("a/",), 1.0), MixtureSource("b", ("b.jsonl",), 1.0))
    )
    assert narrow.source_of("c/x.jsonl") is None
    assert spec.shares == {"code": 0.25, "rest": 0.75}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sources": (MixtureSource("a", ("a/",), 1.0),)}, "at least two"),
        (
            {"sources": (MixtureSource("a", ("a/",), 1.0), MixtureSource("a", ("b/",), 1.0))},
            "given twice",
        ),
        (
            {"sources": (MixtureSource(" ", ("a/",), 1.0), MixtureSource("b", ("b/",), 1.0))},
            "needs a name",
        ),
        (
            {"sources": (MixtureSource("a", (), 1.0), MixtureSource("b", ("b/",), 1.0))},
            "files must list",
        ),
        (
            {"sources": (MixtureSource("a", ("/",), 1.0), MixtureSource("b", ("b/",), 1.0))},
            "files must list",
        ),
        (
            {"sources": (MixtureSource("a", ("./",), 1.0), MixtureSource("b", ("b/",), 1.0))},
            "files must list",  # the input folder itself: '*' says every file
        ),
        (
            {"sources": (MixtureSource("a", (".",), 1.0), MixtureSource("b", ("b/",), 1.0))},
            "files must list",
        ),
        ({"by": "bytes"}, "mixture.by"),
        ({"mode": "evenly"}, "mixture.mode"),
        ({"max_copies": 3}, "caps the copies of mode 'oversample'"),
        ({"mode": "oversample", "max_copies": 0}, ">= 1"),
        ({"mode": "oversample", "max_copies": 2.5}, ">= 1"),
    ],
)
def test_a_bad_mixture_is_refused_naming_the_setting(kwargs, message):
    base = {"sources": (MixtureSource("a", ("a/",), 1.0), MixtureSource("b", ("b/",), 2.0))}
    with pytest.raises(ValueError, match=message):
        MixtureSpec(**{**base, **kwargs})


@pytest.mark.parametrize("weight", [0, -1.0, math.nan, math.inf, True, "0.5", None])
def test_a_weight_must_be_a_positive_finite_number(weight):
    with pytest.raises(ValueError, match="weight must be a number > 0"):
        MixtureSpec(sources=(MixtureSource("a", ("a/",), weight), MixtureSource("b", ("b/",), 1)))


def test_undersample_keeps_the_source_shortest_of_its_share_whole_and_cuts_the_others():
    spec = _spec({"big": 1, "small": 1})
    # By documents: 300 and 100 documents, equal weights: 100 of each.
    assert mixture_targets({"big": 300, "small": 100}, {"big": 300, "small": 100}, spec) == {
        "big": 100,
        "small": 100,
    }
    # By tokens: "small" has fewer documents but longer ones (100 x 50 tokens = 5,000) than
    # "big" (300 x 10 = 3,000): "big" is the one short of its share, kept whole, and "small" is
    # cut to 3,000 tokens, 60 documents.
    assert mixture_targets({"big": 300, "small": 100}, {"big": 3000, "small": 5000}, spec) == {
        "big": 300,
        "small": 60,
    }
    # 3:1 weights by documents: 300 of big allow 100 of small, all of them.
    assert mixture_targets(
        {"big": 300, "small": 100}, {"big": 300, "small": 100}, _spec({"big": 3, "small": 1})
    ) == {"big": 300, "small": 100}


def test_oversample_keeps_every_document_and_repeats_the_others_capped_by_max_copies():
    spec = _spec({"big": 1, "small": 1}, mode="oversample")
    assert mixture_targets({"big": 300, "small": 100}, {"big": 300, "small": 100}, spec) == {
        "big": 300,
        "small": 300,
    }
    capped = _spec({"big": 1, "small": 1}, mode="oversample", max_copies=2)
    assert mixture_targets({"big": 300, "small": 100}, {"big": 300, "small": 100}, capped) == {
        "big": 300,
        "small": 200,  # 3 copies needed, 2 allowed: below its share
    }


def test_a_source_without_train_documents_has_no_target():
    with pytest.raises(ValueError, match="no train document"):
        mixture_targets(
            {"big": 300, "small": 0}, {"big": 300, "small": 0}, _spec({"big": 1, "small": 1})
        )


@settings(max_examples=200, deadline=None)
@given(
    sources=st.lists(
        st.tuples(
            st.integers(1, 5_000),  # documents
            st.integers(1, 400),  # mean tokens per document
            st.floats(0.01, 100, allow_nan=False),  # weight
        ),
        min_size=2,
        max_size=5,
    ),
    mode=st.sampled_from(["undersample", "oversample"]),
    by=st.sampled_from(["tokens", "documents"]),
)
def test_targets_meet_the_shares_within_one_document_each(sources, mode, by):
    """Whatever the sizes and weights: undersample never repeats and keeps one source whole;
    oversample never drops and keeps one source as it is; each source's expected amount
    (its amount scaled by target / documents) is its share of the total, to within the rounding
    of one document per source."""
    names = [f"s{i}" for i in range(len(sources))]
    spec = _spec({n: w for n, (_, _, w) in zip(names, sources, strict=True)}, mode=mode, by=by)
    documents = {n: d for n, (d, _, _) in zip(names, sources, strict=True)}
    tokens = {n: d * t for n, (d, t, _) in zip(names, sources, strict=True)}
    amounts = tokens if by == "tokens" else documents
    targets = mixture_targets(documents, amounts, spec)
    if mode == "undersample":
        assert all(targets[n] <= documents[n] for n in names)
        assert any(targets[n] == documents[n] for n in names)
    else:
        assert all(targets[n] >= documents[n] for n in names)
        assert any(targets[n] == documents[n] for n in names)
    expected = {n: amounts[n] * targets[n] / documents[n] for n in names}
    total = sum(expected.values())
    per_document = {n: amounts[n] / documents[n] for n in names}
    slack = sum(per_document.values())  # half a document of each source, twice
    for n in names:
        assert abs(expected[n] - spec.shares[n] * total) <= slack + 1e-6 * total


def test_spread_quotas_gives_each_bucket_its_part_and_the_exact_total():
    counts = {0: {"a": 5, "b": 1}, 1: {"a": 3}, 2: {"b": 4}}
    quotas = spread_quotas(counts, {"a": 4, "b": 12})
    assert sum(q.copies * counts[b][q.label] + q.extra for b, qs in quotas.items() for q in qs
               if q.label == "a") == 4  # fmt: skip
    assert sum(q.copies * counts[b][q.label] + q.extra for b, qs in quotas.items() for q in qs
               if q.label == "b") == 12  # fmt: skip
    assert {q.label: (q.documents, q.target) for qs in quotas.values() for q in qs} == {
        "a": (8, 4),
        "b": (5, 12),
    }


def test_the_batch_spec_refuses_mixture_with_balance_and_lets_augment_vary_its_copies():
    mixture = _spec({"a": 1, "b": 1}, mode="oversample")
    with pytest.raises(ValueError, match="mixture and balance 'oversample'"):
        BatchSpec(layout="padded", balance="oversample", mixture=mixture)
    BatchSpec(layout="padded", augment="eda", mixture=mixture)  # its copies are varied
    with pytest.raises(ValueError, match=r"set mixture\.max_copies instead"):
        BatchSpec(layout="padded", max_copies=3, mixture=mixture)
    with pytest.raises(ValueError, match=r"mixture\.mode: oversample"):
        BatchSpec(layout="padded", augment="eda", mixture=_spec({"a": 1, "b": 1}))

"""The EDA kernel (:mod:`llm_assets.kernels.mixing.augment`) and the copies the balance makes
for it."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.mixing.augment import EDA_EDITS, augment_key, eda_variant, eda_variants
from llm_assets.kernels.mixing.balance import balance_order, balance_quotas

TEXT = (
    "the quick brown fox jumps over the lazy dog\n\nand then it sat down to rest for a while "
    "under an old oak tree near the river bank"
)


def _words(text: str) -> list[str]:
    return re.findall(r"\S+", text)


def _gaps(text: str) -> list[str]:
    return re.split(r"\S+", text)


def _by_edit(text: str = TEXT, rate: float = 0.1, n: int = 300) -> dict[str, list[str]]:
    """Variants of ``text`` for ``n`` copy numbers, grouped by the edit that made them."""
    out: dict[str, list[str]] = {}
    for v in eda_variants([text] * n, ["doc"] * n, range(1, n + 1), seed=3, rate=rate):
        out.setdefault(v.edit, []).append(v.text)
    return out


def test_each_edit_does_what_it_says_and_keeps_the_lines():
    """28 words at rate 0.1: a swap trades 3 pairs (the words and every gap stay, the blank line
    included), an insertion adds 3 of the document's own words with single spaces, a deletion
    leaves out at least one word and never all; each edit is about a third of the copies."""
    by_edit = _by_edit()
    assert set(by_edit) == set(EDA_EDITS)
    assert all(80 <= len(v) <= 120 for v in by_edit.values()), {
        k: len(v) for k, v in by_edit.items()
    }
    words = _words(TEXT)
    for text in by_edit["swap"]:
        assert Counter(_words(text)) == Counter(words) and _words(text) != words
        assert _gaps(text) == _gaps(TEXT)
    for text in by_edit["insertion"]:
        added = Counter(_words(text)) - Counter(words)
        assert sum(added.values()) == 3 and set(added) <= set(words)
        assert not Counter(words) - Counter(_words(text))
        assert "\n\n" in text
    for text in by_edit["deletion"]:
        kept = _words(text)
        assert 0 < len(kept) < len(words)
        assert not Counter(kept) - Counter(words)
        # What stays keeps its order.
        it = iter(words)
        assert all(word in it for word in kept)


def test_variants_depend_only_on_seed_document_and_copy_number():
    a = eda_variants([TEXT] * 3, ["x", "x", "y"], [1, 2, 1], seed=0, rate=0.1)
    b = eda_variants([TEXT] * 3, ["x", "x", "y"], [1, 2, 1], seed=0, rate=0.1)
    c = eda_variants([TEXT] * 3, ["x", "x", "y"], [1, 2, 1], seed=1, rate=0.1)
    assert a == b
    assert len({v.text for v in a}) == 3  # each copy of each document its own variant
    assert [v.text for v in a] != [v.text for v in c]
    # BLAKE2b keys are at most 64 bytes: a long doc_id is hashed down, still per copy.
    long_id = "d" * 200
    assert len(augment_key(0, long_id, 1)) == 64
    assert augment_key(0, long_id, 1) != augment_key(0, long_id, 2)


def test_a_higher_rate_edits_more_words():
    deleted = {
        rate: np.mean([len(_words(TEXT)) - len(_words(t)) for t in _by_edit(rate=rate)["deletion"]])
        for rate in (0.1, 0.4)
    }
    assert 1 <= deleted[0.1] < 5 < deleted[0.4]


@pytest.mark.parametrize(
    ("text", "edits"),
    [
        ("", {None}),  # no word: nothing to edit
        ("   \n ", {None}),
        ("word", {None, "insertion"}),  # one word: only an insertion can vary it
        ("你好世界，今天天气很好", {None, "insertion"}),  # no spaces: one word
    ],
)
def test_texts_with_too_few_words_come_back_as_they_are(text, edits):
    variants = eda_variants([text] * 60, ["d"] * 60, range(1, 61), seed=0, rate=0.1)
    assert {v.edit for v in variants} == edits
    for v in variants:
        if v.edit is None:
            assert v.text == text
        else:
            assert _words(v.text) == _words(text) * 2


def test_leading_and_trailing_whitespace_stay():
    for v in eda_variants(["  a b c d e\n"] * 40, ["d"] * 40, range(1, 41), seed=0, rate=0.2):
        assert v.text.startswith("  ") and not v.text[2].isspace()
        assert v.text.endswith("\n") and not v.text[-2].isspace()
        assert v.text.count("\n") == 1


def test_a_deletion_keeps_the_line_breaks_of_the_words_it_deletes():
    """A deleted word at a line's end takes not its line break with it: the lines stay, and
    only a line whose every word goes disappears (found by review: deleting a title's last
    word joined the title to the body)."""
    lines = [" ".join(f"w{row}{col}" for col in range(8)) for row in range(10)]
    text = "\n".join(lines) + "\n"
    variants = eda_variants([text] * 200, ["d"] * 200, range(1, 201), seed=0, rate=0.1)
    deletions = [v.text for v in variants if v.edit == "deletion"]
    assert len(deletions) > 40
    for variant in deletions:
        assert variant.count("\n") == 10
        # Each line holds only words of its own line.
        for row, line in enumerate(variant.splitlines()):
            assert {w[1] for w in line.split()} <= {str(row)}
    title = "Title line\n\nBody of the review goes here."
    for v in eda_variants([title] * 60, ["d"] * 60, range(1, 61), seed=0, rate=0.4):
        if v.edit == "deletion" and "Title" in v.text and "Body" in v.text:
            assert "\n\n" in v.text


def test_an_edit_that_changes_nothing_is_no_edit():
    """A swap of two equal words gives the document back: counted as unchanged, not a swap."""
    variants = eda_variants(["good good"] * 60, ["d"] * 60, range(1, 61), seed=0, rate=0.1)
    assert {v.edit for v in variants if v.text == "good good"} == {None}
    assert {v.edit for v in variants} == {None, "deletion", "insertion"}


def test_insertions_after_the_last_word_keep_the_trailing_whitespace_last():
    variants = eda_variants(["a b\n"] * 80, ["d"] * 80, range(1, 81), seed=0, rate=0.5)
    inserted = [v.text for v in variants if v.edit == "insertion"]
    assert any(t.startswith("a b ") for t in inserted)  # some land after the last word
    assert all(t.endswith("\n") and t.count("\n") == 1 and "  " not in t for t in inserted)


@pytest.mark.parametrize("rate", [0, -0.1, 0.51, True, "0.1", None])
def test_a_rate_outside_0_to_half_is_refused(rate):
    with pytest.raises(ValueError, match=r"augment_rate must be a number in \(0, 0.5\]"):
        eda_variant(TEXT, rate, b"k")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"augment": "synonyms"}, r"augment must be one of \('none', 'eda'\)"),
        ({"augment": "eda", "augment_copies": -1}, "augment_copies must be an int >= 0"),
        ({"augment": "eda", "augment_copies": 1.5}, "augment_copies must be an int >= 0"),
        ({"augment_copies": 2}, "augment_copies is 2 but augment is 'none'"),
        ({"augment": "eda"}, "makes no copy to vary: set augment_copies"),
        ({"augment": "eda", "balance": "undersample"}, "makes no copy to vary"),
        ({"augment": "eda", "augment_copies": 1, "augment_rate": 0.9}, "augment_rate must be"),
    ],
)
def test_batch_spec_refuses_augment_settings_that_cannot_work(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BatchSpec(layout="padded", **kwargs)


def test_augment_settings_that_make_copies_are_accepted():
    BatchSpec(layout="padded", augment="eda", balance="oversample")
    BatchSpec(layout="padded", augment="eda", augment_copies=2, balance="undersample")
    BatchSpec(augment="eda", augment_copies=1)  # packed, unlabelled: no augmented column


def _ids(n: int) -> list[str]:
    return [f"doc{i:03d}" for i in range(n)]


def test_repeat_gives_every_document_its_copies_numbered_and_spread():
    order = np.random.default_rng(2).permutation(30)
    new, left_out, copy = balance_order(order, None, (), _ids(30), seed=1, repeat=3)
    assert len(left_out) == 0
    assert Counter(new.tolist()) == dict.fromkeys(range(30), 3)
    numbers: dict[int, list[int]] = {}
    for doc, j in zip(new.tolist(), copy.tolist(), strict=True):
        numbers.setdefault(doc, []).append(j)
    assert all(sorted(js) == [0, 1, 2] for js in numbers.values())
    # The documents themselves (copy 0) keep their shuffle order.
    assert new[copy == 0].tolist() == order.tolist()
    same = balance_order(order, None, (), _ids(30), seed=1, repeat=3)
    assert same.order.tolist() == new.tolist() and same.copy.tolist() == copy.tolist()
    with pytest.raises(ValueError, match="repeat must be an int >= 1"):
        balance_order(order, None, (), _ids(30), seed=1, repeat=0)


def test_repeat_multiplies_the_balance_so_the_classes_stay_even():
    labels = ["a"] * 12 + ["b"] * 4
    order = np.arange(16)
    for balance, each in (("oversample", 12), ("undersample", 4)):
        quotas = balance_quotas({0: {"a": 12, "b": 4}}, balance)[0]
        new, _, copy = balance_order(order, labels, quotas, _ids(16), seed=0, repeat=2)
        assert Counter(labels[i] for i in new) == {"a": 2 * each, "b": 2 * each}
        assert (copy > 0).sum() == len(new) - len(set(new.tolist()))
    with pytest.raises(ValueError, match="balance quotas need the documents' labels"):
        balance_order(order, None, quotas, _ids(16), seed=0)

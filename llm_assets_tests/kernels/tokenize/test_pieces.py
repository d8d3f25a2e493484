"""Runs of one character class longer than the bound are cut before BPE; other text is not."""

from __future__ import annotations

import random

import pytest
import regex

from llm_assets.kernels.tokenize import pieces
from llm_assets.kernels.tokenize.pieces import MAX_RUN_CHARS, cut_points, encode_bounded, segments
from llm_assets.kernels.tokenize.spec import TokenizerSpec


def _reference(text: str, bound: int) -> list[int]:
    """Cut every ``bound`` characters into each maximal run of one class (the definition)."""
    cuts = []
    for run in regex.finditer(r"\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+|\s+", text):
        cuts.extend(range(run.start() + bound, run.end(), bound))
    return cuts


def test_cuts_fall_every_bound_characters_into_each_long_run_of_one_class():
    text = "hi " + "ab" * 3000 + "  " + "1" * 5000 + " " + "." * 9000 + " " * 5000 + "end"
    cuts = cut_points(text)
    assert cuts == _reference(text, MAX_RUN_CHARS) == [4099, 10101, 15102, 19198, 24102]
    parts = segments(text, cuts)
    assert "".join(parts) == text
    assert cut_points("x" * MAX_RUN_CHARS) == [] and cut_points("x" * 4097) == [4096]
    assert cut_points("\u3000" * 5000) == [4096]  # ideographic spaces are whitespace
    assert cut_points("世界" * 3000) == [4096]  # CJK characters are letters


def test_ordinary_long_text_is_not_cut():
    rng = random.Random(1)
    words = ["the", "of", "Hello,", "мир", "世界和平", "3.14", "\n\n", "—"]
    text = " ".join(rng.choice(words) for _ in range(300_000))
    assert len(text) > 1_000_000 and cut_points(text) == []


def test_the_quick_check_agrees_with_the_definition_across_windows(monkeypatch):
    monkeypatch.setattr(pieces, "_WINDOW_CHARS", 7)  # runs straddle many windows
    rng = random.Random(2)
    alphabet = "ab12.,  \n\u3000é世"
    for _ in range(2000):
        text = "".join(
            rng.choice(alphabet) if rng.random() < 0.3 else rng.choice("aaaa    ...1111")
            for _ in range(rng.randint(0, 60))
        )
        for bound in (2, 3, 5):
            assert cut_points(text, bound) == _reference(text, bound), (text, bound)


@pytest.mark.parametrize("engine", ["tiktoken", "hf"])
def test_a_document_without_spaces_encodes_in_parts_and_decodes_back(engine):
    tok = TokenizerSpec(engine=engine).build()
    rng = random.Random(3)
    spaceless = "".join(rng.choice("abcdefghij") for _ in range(3 * MAX_RUN_CHARS + 100))
    ordinary = "an ordinary document, with words and 42 numbers. " * 200
    ids = tok.encode_batch([ordinary, spaceless])
    assert ids[0] == tok.encoder([ordinary])[0]  # no run to cut: the tokenizer's own ids
    parts = segments(spaceless, cut_points(spaceless))
    assert len(parts) == 4 and max(map(len, parts)) == MAX_RUN_CHARS
    assert ids[1] == [i for part in tok.encoder(parts) for i in part]
    assert tok.decode(ids[1]) == spaceless


def test_encode_bounded_keeps_the_order_and_leaves_short_batches_alone():
    calls = []

    def encode(texts):
        calls.append(list(texts))
        return [[len(t)] for t in texts]

    assert encode_bounded(encode, ["a", "bb"]) == [[1], [2]] and calls == [["a", "bb"]]
    calls.clear()
    long_run = "z" * (MAX_RUN_CHARS + 5)
    assert encode_bounded(encode, ["a", long_run, "c"]) == [[1], [MAX_RUN_CHARS, 5], [1]]
    assert calls == [["a", "", "c"], ["z" * MAX_RUN_CHARS, "zzzzz"]]

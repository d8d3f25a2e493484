"""A built tokenizer (:class:`Tokenizer`): its identity and its batch encoders, whatever the
engine behind them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from llm_assets.kernels.schema import string_array
from llm_assets.kernels.tokenize.ids import _encode_by_words, ids_to_arrow
from llm_assets.kernels.tokenize.pieces import encode_bounded

_HASH_CHUNK = 1 << 20


class TokenizerError(ValueError):
    """A tokenizer that cannot be built: unknown name, missing files, empty vocabulary."""


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
        """Token ids of every text, in order, without truncation or special tokens; a run of one
        character class longer than ``MAX_RUN_CHARS`` (4,096) is encoded in parts of that many
        characters (:func:`encode_bounded`), so that time grows with a text's length alone."""
        return encode_bounded(self.encoder, texts)

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

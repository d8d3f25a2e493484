"""Training batches: seeded shuffle, train/validation split, and packed or padded sequences.

The batching stage runs in two phases over many shards, and this module holds the pure functions
of both (no Dagster, no file I/O):

1. scatter, per input shard: :func:`shuffle_keys`, :func:`assign_splits` and
   :func:`assign_buckets` give each document its split and shuffle bucket;
2. gather, per (split, bucket): :func:`shuffle_order` sorts the bucket's documents by shuffle key,
   then :func:`pack_sequences` or :func:`pad_sequences` builds the sequences.

Every decision about a document depends only on the seed and its ``doc_id`` (keyed hashes), never
on which shard it came in or where in that shard, so the output is byte-identical whatever the
number or order of input shards. Buckets are contiguous ranges of the key space, so the buckets in
order, each sorted by key, are the whole corpus sorted by key: the global shuffle is exact, and the
memory of one gather is bounded by one bucket.

Sequences are Arrow ``list<...>`` columns built from one flat numpy buffer and int32 offsets (no
Python object per token); every row of a column has the same length. ``list`` rather than
``fixed_size_list`` because it is what every Parquet reader (DuckDB, Polars, Hugging Face
``datasets``) maps to a plain sequence.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from llm_assets.kernels.augment import AUGMENTS, check_augment_rate
from llm_assets.kernels.mixture import MixtureSpec
from llm_assets.kernels.schema import DOC_ID, INPUT_IDS, N_TOKENS, learned_span_arrays

LAYOUTS = ("packed", "padded", "bucketed")
OVERFLOWS = ("split", "truncate")
PAD_TO = ("seq_len", "longest")
BALANCES = ("none", "oversample", "undersample")
LENGTH_BUCKET = "length_bucket"
BATCH = "batch"
"""Column of the layouts that pad per batch (``bucketed``; ``padded`` with ``pad_to="longest"``):
the row's batch number within its file; consecutive rows with one number are one batch."""

ATTENTION_MASK = "attention_mask"
POSITION_IDS = "position_ids"
LABELS = "labels"
AUGMENTED = "augmented"
"""Batch column of a folder written with ``augment``: True for a row that is a variant of its
document (:mod:`llm_assets.kernels.augment`), False for the document itself."""
DOC_IDS = "doc_ids"
"""Column of the ``packed`` layout: the ``doc_id`` of every document with tokens in the block (its
EOS counts), in order; a document continued from the block before comes first. The block's
lineage: joinable to ``filtered_documents`` and, through it, to the source file and line."""
IGNORE_INDEX = -100
"""Label of padding positions: the index PyTorch's cross-entropy ignores by default."""
FORMAT_VERSION = "1"
META_PREFIX = "llm_assets."

_SEED_BYTES = 8
_SHUFFLE_PERSON = b"llm-assets/shuf"
_SPLIT_PERSON = b"llm-assets/split"
_BATCH_PERSON = b"llm-assets/batch"
_COPY_PERSON = b"llm-assets/copy"
"""blake2b personalisations: the shuffle key and the split draw are independent hashes of the
same (seed, doc_id), so a document's split says nothing about its place in the shuffle."""
_MAX_BUCKETS = 2**31 - 1
_MAX_LIST_VALUES = 2**31 - 1
"""Values one Arrow ``list`` array can address with int32 offsets; longer columns get chunks."""


@dataclass(frozen=True)
class BatchSpec:
    """How documents become training sequences. Frozen and picklable: it travels to workers.

    Layouts:

    ``packed``
        Documents joined with EOS into blocks of exactly ``seq_len`` tokens, padding-free except
        the last block of each file. ``overflow="split"`` (default) lets a long document continue
        in the next block; ``"truncate"`` cuts every document to ``seq_len - 1`` tokens (plus its
        EOS) so none spans more than two blocks and none is longer than a block.
        ``drop_remainder`` drops the final partial block instead of padding it.
    ``padded``
        One document per sequence, truncated to ``seq_len`` and padded to ``seq_len``
        (``pad_to="seq_len"``) or to the longest document of its group of ``batch_size``
        consecutive sequences (``pad_to="longest"``).
    ``bucketed``
        One document per sequence, grouped by length: each document goes to the first length
        bucket whose upper bound holds it (``bucket_boundaries``, or boundaries derived from the
        length distribution by the stage), batches of ``batch_size`` are formed inside a bucket
        and padded to their longest document, and the batches are put in a seeded random order.
    """

    layout: str = field(
        default="packed",
        metadata={
            "choices": LAYOUTS,
            "doc": "packed: EOS-joined fixed blocks, padding-free; padded: one document per "
            "sequence with attention mask and labels; bucketed: padded within length buckets",
        },
    )
    seq_len: int = field(
        default=1024, metadata={"doc": "Tokens per sequence (the maximum for padded layouts)"}
    )
    seed: int = field(
        default=0, metadata={"doc": "Seed of the shuffle, the split and the batch order"}
    )
    validation_fraction: float = field(
        default=0.05, metadata={"doc": "Share of documents in validation"}
    )
    shuffle_buckets: int = field(
        default=1,
        metadata={
            "doc": "Minimum shuffle buckets (files per split); more when one would hold "
            "over 8 MB of token ids"
        },
    )
    drop_remainder: bool = field(
        default=False, metadata={"doc": "packed: drop the last partial block"}
    )
    overflow: str = field(
        default="split",
        metadata={
            "choices": OVERFLOWS,
            "doc": "packed: long documents continue in the next block, or are cut",
        },
    )
    pad_to: str = field(
        default="seq_len",
        metadata={
            "choices": PAD_TO,
            "doc": "padded: pad to seq_len or to the longest of each batch",
        },
    )
    batch_size: int = field(
        default=8, metadata={"doc": "Sequences per batch (pad_to=longest, bucketed)"}
    )
    bucket_boundaries: tuple[int, ...] | None = field(
        default=None,
        metadata={"doc": "bucketed: upper token bounds of the length buckets (default: derived)"},
    )
    """Upper bounds (tokens) of the length buckets for ``bucketed``; ``seq_len`` closes the last."""
    length_buckets: int = field(
        default=16, metadata={"doc": "bucketed: buckets derived from the lengths"}
    )
    """How many length buckets to derive from the length distribution (evenly spaced quantiles)
    when ``bucket_boundaries`` is not given."""
    balance: str = field(
        default="none",
        metadata={
            "choices": BALANCES,
            "doc": "Labelled data (filtered_documents' label_field): even out the classes of "
            "the train split. oversample: repeat documents of the smaller classes up to the "
            "largest; undersample: keep as many of each class as the smallest has (the rest are "
            "rejects, 'undersampled'). Validation is left as it is",
        },
    )
    """Labelled documents only: even out the classes of the train split (:func:`balance_quotas`).
    ``oversample`` repeats documents of the smaller classes up to the largest class;
    ``undersample`` keeps of every class as many documents as the smallest class has. The
    validation split is left as it is, so it measures the data as it comes."""
    max_copies: int | None = field(
        default=None,
        metadata={
            "doc": "oversample: at most this many times each document (itself included; "
            "times augment_copies + 1 with augment); a class that would need more stays "
            "smaller. Null: no cap"
        },
    )
    """``oversample``: at most this many times each document (itself included; ``augment_copies``
    multiplies it); a class that would need more stays smaller. None: as many as the largest
    class needs."""
    augment: str = field(
        default="none",
        metadata={
            "choices": AUGMENTS,
            "doc": "eda: every copy of a train document (balance: oversample, "
            "augment_copies) is a variant of it, one seeded word edit (deletion, swap or "
            "insertion of about augment_rate of its words), not the same tokens again. Plain "
            "documents only (not SFT or chat rows); validation is never augmented",
        },
    )
    """``eda``: every copy of a train document the batches make (``balance: oversample``,
    ``augment_copies``) is a variant of it, a seeded word edit (:mod:`llm_assets.kernels.augment`),
    rather than the same tokens again. The document itself is never changed."""
    augment_copies: int = field(
        default=0,
        metadata={
            "doc": "augment: eda: this many variants of every train document besides "
            "itself (after the balance, whose counts they multiply)"
        },
    )
    """``augment: eda``: this many more variants of every train document (after the balance,
    whose counts it multiplies by ``augment_copies + 1``: the classes stay as even)."""
    augment_rate: float = field(
        default=0.1,
        metadata={"doc": "augment: eda: share of a copy's words its edit changes (0-0.5]"},
    )
    """``augment: eda``: the share of a copy's words one edit changes (EDA's alpha)."""
    mixture: MixtureSpec | None = field(
        default=None,
        metadata={
            "doc": "The train split made of several sources in given proportions (by tokens "
            "or documents), its documents kept, left out or repeated; validation is left as it "
            "is"
        },
    )
    """The sources of the train split and their weights (:mod:`llm_assets.kernels.mixture`): each
    source's documents kept, left out or repeated until the sources stand in those proportions.
    None: every document once. Not with ``balance`` (both choose each document's copies)."""

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        _check_seq_len(self.seq_len)
        _check_seed(self.seed)
        _check_fraction(self.validation_fraction)
        _check_buckets(self.shuffle_buckets, "shuffle_buckets")
        if not isinstance(self.drop_remainder, bool):
            raise ValueError(f"drop_remainder must be a bool, got {self.drop_remainder!r}")
        if self.overflow not in OVERFLOWS:
            raise ValueError(f"overflow must be one of {OVERFLOWS}, got {self.overflow!r}")
        if self.pad_to not in PAD_TO:
            raise ValueError(f"pad_to must be one of {PAD_TO}, got {self.pad_to!r}")
        if not _is_int(self.batch_size) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if not _is_int(self.length_buckets) or not 1 <= self.length_buckets <= 256:
            raise ValueError(
                f"length_buckets must be an int in [1, 256], got {self.length_buckets}"
            )
        if self.bucket_boundaries == ():
            raise ValueError(
                "bucket_boundaries must hold at least one bound, or be null to derive them"
            )
        if self.bucket_boundaries is not None:
            check_boundaries(self.bucket_boundaries, self.seq_len)
        if self.balance not in BALANCES:
            raise ValueError(f"balance must be one of {BALANCES}, got {self.balance!r}")
        if self.max_copies is not None:
            if not _is_int(self.max_copies) or self.max_copies < 1:
                raise ValueError(f"max_copies must be an int >= 1, got {self.max_copies!r}")
            if self.balance != "oversample" and self.mixture is not None:
                raise ValueError(
                    "max_copies caps the copies of balance 'oversample', and balance is "
                    f"{self.balance!r}: to cap the copies of a mixture, set mixture.max_copies "
                    "instead"
                )
            if self.balance != "oversample":
                raise ValueError(
                    f"max_copies caps the copies of balance 'oversample', but balance is "
                    f"{self.balance!r}: unset max_copies or set balance: oversample"
                )
        if self.augment not in AUGMENTS:
            raise ValueError(f"augment must be one of {AUGMENTS}, got {self.augment!r}")
        if not _is_int(self.augment_copies) or self.augment_copies < 0:
            raise ValueError(f"augment_copies must be an int >= 0, got {self.augment_copies!r}")
        check_augment_rate(self.augment_rate)
        if self.augment == "none" and self.augment_copies:
            raise ValueError(
                f"augment_copies is {self.augment_copies} but augment is 'none': the copies "
                "would be the same tokens again, which is reading the batches for another "
                "epoch. Set augment: eda for varied copies, or unset augment_copies"
            )
        if self.mixture is not None and not isinstance(self.mixture, MixtureSpec):
            raise ValueError(f"mixture must be a MixtureSpec or None, got {self.mixture!r}")
        if self.mixture is not None and self.balance != "none":
            raise ValueError(
                f"mixture and balance {self.balance!r} both choose how many times each train "
                "document is held (the sources' shares, the classes' counts), and one would undo "
                "the other: set balance: none, or leave mixture.sources empty"
            )
        oversampled = self.balance == "oversample" or (
            self.mixture is not None and self.mixture.mode == "oversample"
        )
        if self.augment != "none" and not self.augment_copies and not oversampled:
            raise ValueError(
                f"augment is {self.augment!r}, but this config makes no copy to vary: set "
                "augment_copies (variants of every train document), balance: oversample "
                "(variants of the smaller classes' copies) or mixture.mode: oversample "
                "(variants of the smaller sources' copies)"
            )


@dataclass
class PackStats:
    """Additive counts of one packing or padding run (per file; :meth:`merge` sums them).

    ``tokens`` are the real tokens in the output, separators included; ``tokens + padding_tokens
    == sequences * seq_len`` always holds. ``truncated_tokens`` (padded layout) and
    ``dropped_tokens`` (packed with ``drop_remainder``) were given but are not in the output.
    """

    documents: int = 0
    sequences: int = 0
    tokens: int = 0
    padding_tokens: int = 0
    truncated_tokens: int = 0
    dropped_tokens: int = 0

    def merge(self, other: PackStats) -> PackStats:
        """A new PackStats with every count summed."""
        return PackStats(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def padding_fraction(self) -> float:
        """Share of output positions that are padding: ``padding / (sequences * seq_len)``,
        computed as ``padding / (tokens + padding)`` (the same number); 0 when empty."""
        total = self.tokens + self.padding_tokens
        return self.padding_tokens / total if total else 0.0

    def as_dict(self) -> dict[str, int]:
        """The counts as plain ints (JSON-ready and additive, for the shard footer)."""
        return {k: int(v) for k, v in asdict(self).items()}


# --- scatter: keys, splits, buckets ---------------------------------------------------------------
def shuffle_keys(doc_ids: pa.Array | pa.ChunkedArray | Sequence[str], seed: int) -> np.ndarray:
    """The uint64 shuffle key of each document: keyed blake2b of its ``doc_id`` (seed as key),
    first 8 bytes little endian. Depends on nothing but (seed, doc_id)."""
    return _keyed_hashes(doc_ids, seed, _SHUFFLE_PERSON)


def assign_splits(
    doc_ids: pa.Array | pa.ChunkedArray | Sequence[str], seed: int, validation_fraction: float
) -> np.ndarray:
    """True where a document goes to validation: ``h / 2**64 < validation_fraction`` for an
    independent keyed hash ``h`` of (seed, doc_id), so the same document always lands in the same
    split, whatever shard it is in."""
    _check_fraction(validation_fraction)
    # fraction * 2**64 is exact in floating point; as an int the comparison is exact too.
    threshold = int(validation_fraction * 2.0**64)
    return _keyed_hashes(doc_ids, seed, _SPLIT_PERSON) < np.uint64(threshold)


def assign_buckets(keys: np.ndarray, n_buckets: int) -> np.ndarray:
    """The int32 bucket of each key: ``floor(key * n_buckets / 2**64)``, from the key's high bits.

    Each bucket is a contiguous range of the key space, so keys stay uniform inside a bucket and
    the buckets in order, each sorted, are all keys sorted. Computed exactly in 64-bit halves:
    with ``key = hi * 2**32 + lo``, ``key * n >> 64 == (hi * n + (lo * n >> 32)) >> 32``, and
    neither term overflows for ``n < 2**32``.
    """
    _check_buckets(n_buckets, "n_buckets")
    keys = np.asarray(keys, dtype=np.uint64)
    n = np.uint64(n_buckets)
    hi = keys >> np.uint64(32)
    lo = keys & np.uint64(0xFFFFFFFF)
    return ((hi * n + ((lo * n) >> np.uint64(32))) >> np.uint64(32)).astype(np.int32)


# --- gather: order, pack, pad ---------------------------------------------------------------------
def shuffle_order(keys: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
    """The permutation that sorts documents by (shuffle key, doc_id).

    Equal keys (64-bit collisions, vanishingly rare) are ordered by ``doc_id`` so the result does
    not depend on input order. Only documents with the same key *and* the same ``doc_id`` keep
    their input order: ids are unique upstream.
    """
    keys = np.asarray(keys, dtype=np.uint64)
    if len(doc_ids) != len(keys):
        raise ValueError(f"{len(keys)} keys but {len(doc_ids)} doc_ids")
    order = np.argsort(keys, kind="stable")
    ranked = keys[order]
    for key in np.unique(ranked[1:][ranked[1:] == ranked[:-1]]):
        lo, hi = np.searchsorted(ranked, key, "left"), np.searchsorted(ranked, key, "right")
        order[lo:hi] = sorted(order[lo:hi], key=lambda i: doc_ids[i])
    return order


def pack_sequences(
    token_lists: Sequence[np.ndarray],
    seq_len: int,
    eos_id: int,
    pad_id: int,
    drop_remainder: bool,
    token_type: pa.DataType,
    *,
    truncate: bool = False,
    prompt_tokens: Sequence[int] | np.ndarray | None = None,
    doc_ids: pa.Array | pa.ChunkedArray | Sequence[str] | None = None,
    learned_spans: pa.Array | pa.ChunkedArray | None = None,
) -> tuple[pa.Table, PackStats]:
    """Concatenate documents in the given order, each followed by ``eos_id``, and cut the stream
    into blocks of exactly ``seq_len`` tokens (documents may span blocks).

    The final partial block is padded with ``pad_id`` (attention mask 0), or dropped with
    ``drop_remainder`` (its tokens counted in ``dropped_tokens``). ``position_ids`` restart at 0 at
    every document start and at every block start (a document continued from the previous block
    restarts there); the padding run counts from 0 as a segment of its own, so tools that derive
    segments from ``position_ids == 0`` never join padding to the last document.

    With ``truncate`` every document is first cut to ``seq_len - 1`` tokens (``truncated_tokens``
    counts the cut; the EOS after a cut SFT document is not learned). With ``prompt_tokens`` (SFT
    rows) a ``labels`` column is added: the input ids, with -100 on each document's leading prompt
    tokens and on padding, so the loss covers responses and separators only; ``learned_spans`` (one
    list per document, :data:`~llm_assets.kernels.schema.LEARNED_SPANS`) are learned even inside the
    prompt (a chat's earlier answers). With ``doc_ids`` (one per document, in the given order) a
    :data:`DOC_IDS` column lists each block's documents.

    Token arrays must cast safely to ``token_type`` (e.g. uint16 or uint32 into uint32); the whole
    build is numpy over one flat buffer.
    """
    _check_seq_len(seq_len)
    dtype = _token_dtype(token_type, eos_id=eos_id, pad_id=pad_id)
    position_type = pa.uint16() if seq_len <= 0xFFFF else pa.uint32()
    fields_ = [
        pa.field(INPUT_IDS, pa.list_(token_type), nullable=False),
        pa.field(ATTENTION_MASK, pa.list_(pa.uint8()), nullable=False),
        pa.field(POSITION_IDS, pa.list_(position_type), nullable=False),
    ]
    if prompt_tokens is not None:
        fields_.append(pa.field(LABELS, pa.list_(pa.int32()), nullable=False))
    if doc_ids is not None:
        fields_.append(pa.field(DOC_IDS, pa.list_(pa.string()), nullable=False))
    schema = pa.schema(fields_)
    n_docs = len(token_lists)
    if doc_ids is not None and len(doc_ids) != n_docs:
        raise ValueError(f"{len(doc_ids)} doc_ids for {n_docs} documents")
    if n_docs == 0:
        return schema.empty_table(), PackStats()

    truncated = 0
    was_cut = np.zeros(n_docs, dtype=bool)
    if truncate:
        cut = [t[: seq_len - 1] for t in token_lists]
        was_cut = np.fromiter((len(t) >= seq_len for t in token_lists), dtype=bool, count=n_docs)
        truncated = sum(map(len, token_lists)) - sum(map(len, cut))
        token_lists = cut
    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=n_docs)
    doc_starts = np.cumsum(lengths + 1) - (lengths + 1)
    total = int(lengths.sum()) + n_docs
    n_full, remainder = divmod(total, seq_len)
    if remainder and drop_remainder:
        n_seq, padding, dropped = n_full, 0, remainder
    else:
        n_seq, padding, dropped = n_full + (remainder > 0), (seq_len - remainder) % seq_len, 0
    size = n_seq * seq_len

    stream = np.empty(total + padding, dtype=dtype)
    parts: list[np.ndarray] = [np.array([eos_id], dtype=dtype)] * (2 * n_docs)
    parts[0::2] = token_lists
    try:
        np.concatenate(parts, out=stream[:total], casting="safe")
    except TypeError as err:
        raise ValueError(f"token arrays must cast safely to {token_type}: {err}") from None
    stream[total:] = pad_id
    input_ids = stream[:size]

    attention = np.ones(size, dtype=np.uint8)
    attention[total:] = 0

    # Positions: column index in the block minus the column of the last segment start at or before
    # it. Mark each segment start with its column, then a running max per block row finds it.
    np_position = position_type.to_pandas_dtype()
    positions = np.zeros(size, dtype=np_position)
    segment_starts = doc_starts[doc_starts < size]
    if padding:
        segment_starts = np.append(segment_starts, total)
    positions[segment_starts] = segment_starts % seq_len
    grid = positions.reshape(n_seq, seq_len)
    np.maximum.accumulate(grid, axis=1, out=grid)
    np.subtract(np.arange(seq_len, dtype=np_position), grid, out=grid)

    columns = [
        _list_column(input_ids, seq_len, token_type),
        _list_column(attention, seq_len, pa.uint8()),
        _list_column(positions, seq_len, position_type),
    ]
    if prompt_tokens is not None:
        labels = input_ids.astype(np.int32)
        labels[total:] = IGNORE_INDEX
        prompt = np.minimum(np.asarray(prompt_tokens, dtype=np.int64), lengths)
        masked = _ranges(doc_starts, prompt)
        labels[masked[masked < size]] = IGNORE_INDEX
        if learned_spans is not None:
            learned = _span_positions(learned_spans, doc_starts, lengths)
            learned = learned[learned < size]
            labels[learned] = input_ids[learned]
        # A cut document did not end where its EOS follows the cut: the EOS separates it from
        # the next but is not learned (it would teach to stop mid-answer, or mid-question).
        ends = (doc_starts + lengths)[was_cut]
        labels[ends[ends < size]] = IGNORE_INDEX
        columns.append(_list_column(labels, seq_len, pa.int32()))
    if doc_ids is not None:
        columns.append(_block_documents(doc_ids, doc_starts, lengths + 1, n_seq, seq_len))
    table = pa.Table.from_arrays(columns, schema=schema)
    stats = PackStats(
        documents=n_docs,
        sequences=n_seq,
        tokens=total - dropped,
        padding_tokens=padding,
        truncated_tokens=truncated,
        dropped_tokens=dropped,
    )
    return table, stats


def _block_documents(
    doc_ids: pa.Array | pa.ChunkedArray | Sequence[str],
    starts: np.ndarray,
    spans: np.ndarray,
    n_seq: int,
    seq_len: int,
) -> pa.Array:
    """The :data:`DOC_IDS` column: for each of ``n_seq`` blocks, the documents whose stream span
    ``[start, start + span)`` (tokens and EOS) meets it. Documents are contiguous in the stream,
    so a block's documents are one run of them: the first whose span ends after the block starts
    to the last that starts before it ends."""
    block_starts = np.arange(n_seq, dtype=np.int64) * seq_len
    first = np.searchsorted(starts + spans, block_starts, side="right")
    last = np.searchsorted(starts, block_starts + seq_len, side="left")
    counts = last - first
    offsets = np.zeros(n_seq + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if isinstance(doc_ids, pa.ChunkedArray):
        doc_ids = doc_ids.combine_chunks()
    names = doc_ids if isinstance(doc_ids, pa.Array) else pa.array(doc_ids, pa.string())
    values = names.cast(pa.string()).take(pa.array(_ranges(first, counts)))
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)


def pad_sequences(
    token_lists: Sequence[np.ndarray],
    doc_ids: Sequence[str],
    seq_len: int,
    pad_id: int,
    token_type: pa.DataType,
    *,
    targets: Sequence[int] | np.ndarray | None = None,
    prompt_tokens: Sequence[int] | np.ndarray | None = None,
    extra_columns: dict[str, pa.Array] | None = None,
    eos_id: int | None = None,
    learned_spans: pa.Array | pa.ChunkedArray | None = None,
) -> tuple[pa.Table, PackStats]:
    """One document per sequence: truncated to ``seq_len`` (``truncated_tokens`` counts the cut),
    padded with ``pad_id`` to ``seq_len`` or, when given, to each row's ``targets`` length (which
    must be at least the row's kept tokens and at most ``seq_len``). ``labels`` are the input ids
    with -100 on padding and on the first ``prompt_tokens`` of each row (SFT: the loss covers the
    response only) but for its ``learned_spans`` (a chat's earlier answers, as in
    :func:`pack_sequences`); ``n_tokens`` counts the real tokens kept. With ``eos_id`` every
    document is followed by it before the cut, a real and learned token (SFT: the model learns where
    a response ends; a response cut by ``seq_len`` loses it, as it did not end there); without, no
    separator is added. ``extra_columns`` (e.g. ``label``, ``length_bucket``) are appended as they
    are."""
    _check_seq_len(seq_len)
    dtype = _token_dtype(
        token_type, pad_id=pad_id, **({} if eos_id is None else {"eos_id": eos_id})
    )
    if eos_id is not None:
        eos = np.array([eos_id], dtype=dtype)
        token_lists = [np.concatenate((t, eos.astype(t.dtype, copy=False))) for t in token_lists]
    fields_ = [
        pa.field(DOC_ID, pa.string(), nullable=False),
        pa.field(INPUT_IDS, pa.list_(token_type), nullable=False),
        pa.field(ATTENTION_MASK, pa.list_(pa.uint8()), nullable=False),
        pa.field(LABELS, pa.list_(pa.int32()), nullable=False),
        pa.field(N_TOKENS, pa.int32(), nullable=False),
    ]
    extra_columns = extra_columns or {}
    fields_ += [pa.field(name, column.type) for name, column in extra_columns.items()]
    schema = pa.schema(fields_)
    n_docs = len(token_lists)
    if len(doc_ids) != n_docs:
        raise ValueError(f"{n_docs} token lists but {len(doc_ids)} doc_ids")
    if n_docs == 0:
        return schema.empty_table(), PackStats()

    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=n_docs)
    kept = np.minimum(lengths, seq_len)
    if targets is None:
        widths = np.full(n_docs, seq_len, dtype=np.int64)
    else:
        widths = np.asarray(targets, dtype=np.int64)
        if len(widths) != n_docs or (widths < kept).any() or (widths > seq_len).any():
            raise ValueError("targets must give each row a length in [its tokens, seq_len]")
    row_starts = np.concatenate([[0], np.cumsum(widths)])
    size = int(row_starts[-1])
    real_positions = _ranges(row_starts[:-1], kept)
    input_ids = np.full(size, pad_id, dtype=dtype)
    try:
        input_ids[real_positions] = np.concatenate(
            [t[:seq_len] for t in token_lists], dtype=dtype, casting="safe"
        )
    except TypeError as err:
        raise ValueError(f"token arrays must cast safely to {token_type}: {err}") from None
    attention = np.zeros(size, dtype=np.uint8)
    attention[real_positions] = 1
    labels = np.full(size, IGNORE_INDEX, dtype=np.int32)
    labels[real_positions] = input_ids[real_positions]
    if prompt_tokens is not None:
        prompt = np.minimum(np.asarray(prompt_tokens, dtype=np.int64), kept)
        labels[_ranges(row_starts[:-1], prompt)] = IGNORE_INDEX
        if learned_spans is not None:
            learned = _span_positions(learned_spans, row_starts[:-1], kept)
            labels[learned] = input_ids[learned]

    offsets = row_starts.astype(np.int64)
    columns = [
        pa.array(doc_ids, pa.string()),
        _ragged_column(input_ids, offsets, token_type),
        _ragged_column(attention, offsets, pa.uint8()),
        _ragged_column(labels, offsets, pa.int32()),
        pa.array(kept.astype(np.int32), pa.int32()),
        *extra_columns.values(),
    ]
    table = pa.Table.from_arrays(columns, schema=schema)
    n_kept = int(kept.sum())
    stats = PackStats(
        documents=n_docs,
        sequences=n_docs,
        tokens=n_kept,
        padding_tokens=size - n_kept,
        truncated_tokens=int(lengths.sum()) - n_kept,
    )
    return table, stats


UNDERSAMPLED = "undersampled"
"""Reject reason of a train document left out to even out the classes (``balance:
undersample``): its class has more documents than the smallest class."""


@dataclass(frozen=True)
class LabelQuota:
    """What the gather of one train bucket does with the documents of one class ``label``: each
    document ``copies`` times, and the first ``extra`` of them (in shuffle order, so a seeded
    random choice) once more. ``(1, 0)`` keeps them as they are, ``(0, k)`` keeps k of them.

    ``documents`` and ``target`` are the class's train documents in every bucket, before and
    after balancing: what a reject's value and the logs report."""

    label: str
    copies: int
    extra: int
    documents: int
    target: int


def balance_quotas(
    counts: Mapping[int, Mapping[str, int]], balance: str, max_copies: int | None = None
) -> dict[int, tuple[LabelQuota, ...]]:
    """The :class:`LabelQuota` of every class in every bucket of the train split, from the
    documents per class in each bucket (``counts[bucket][label]``).

    ``oversample`` brings every class to the largest class's count (capped at ``max_copies``
    times its own count); ``undersample`` brings every class down to the smallest's. A class of
    ``n`` documents brought to ``t`` gives each document ``t // n`` copies and one more copy to
    ``t % n`` of them, shared between the buckets in proportion to the class's documents there
    (largest remainders; ties to the lower bucket): the totals are exact, and each bucket decides
    alone. ``none``: every document once."""
    if balance not in BALANCES:
        raise ValueError(f"balance must be one of {BALANCES}, got {balance!r}")
    totals = group_totals(counts)
    if not totals:
        return {}
    if balance == "oversample":
        largest = max(totals.values())
        targets = {
            label: largest if max_copies is None else min(largest, n * max_copies)
            for label, n in totals.items()
        }
    elif balance == "undersample":
        smallest = min(totals.values())
        targets = dict.fromkeys(totals, smallest)
    else:
        targets = dict(totals)
    return spread_quotas(counts, targets)


def spread_quotas(
    counts: Mapping[int, Mapping[str, int]], targets: Mapping[str, int]
) -> dict[int, tuple[LabelQuota, ...]]:
    """The :class:`LabelQuota` of every group (a class, or a source of a mixture) in every train
    bucket, bringing the group's documents (``counts[bucket][group]``, summed over the buckets)
    to ``targets[group]`` in all. A group of ``n`` documents brought to ``t`` gives each document
    ``t // n`` copies and one more copy to ``t % n`` of them, shared between the buckets in
    proportion to the group's documents there (largest remainders; ties to the lower bucket): the
    totals are exact, and each bucket decides alone. Groups without documents are left out."""
    totals = group_totals(counts)
    quotas: dict[int, list[LabelQuota]] = {bucket: [] for bucket in sorted(counts)}
    for label in sorted(totals):
        n, target = totals[label], int(targets[label])
        copies, rest = divmod(target, n)
        buckets = sorted(b for b in counts if counts[b].get(label, 0) > 0)
        shares = {b: rest * int(counts[b][label]) for b in buckets}
        extra = {b: share // n for b, share in shares.items()}
        left = rest - sum(extra.values())
        for b in sorted(buckets, key=lambda b: (-(shares[b] % n), b))[:left]:
            extra[b] += 1
        for b in buckets:
            quotas[b].append(LabelQuota(label, copies, extra[b], n, target))
    return {bucket: tuple(q) for bucket, q in quotas.items() if q}


def group_totals(counts: Mapping[int, Mapping[str, int]]) -> dict[str, int]:
    """Each group's documents summed over the buckets (``counts[bucket][group]``), the groups
    with none left out."""
    totals: dict[str, int] = {}
    for per_group in counts.values():
        for group, n in per_group.items():
            totals[group] = totals.get(group, 0) + int(n)
    return {group: n for group, n in totals.items() if n > 0}


class BalancedOrder(NamedTuple):
    """:func:`balance_order`'s result."""

    order: np.ndarray
    """Indices of the documents in the new order; a repeated document appears several times."""
    left_out: np.ndarray
    """Indices of the documents left out (undersampled), in shuffle order."""
    copy: np.ndarray
    """Per place of ``order``: 0 for the document itself, ``j`` for its ``j``-th copy."""


def balance_order(
    order: np.ndarray,
    labels: Sequence[str] | None,
    quotas: Sequence[LabelQuota],
    doc_ids: Sequence[str],
    seed: int,
    repeat: int = 1,
) -> BalancedOrder:
    """Shuffle ``order`` (indices into ``labels`` and ``doc_ids``) with the classes evened out
    by ``quotas`` (:func:`balance_quotas`; none: every document once, ``labels`` unused), and
    every document kept ``repeat`` times as often (``augment_copies + 1``).

    Each document keeps its place; its copies are spread through the sequence at seeded random
    places, as a document of their own would be (copy ``j`` of a document is placed by a keyed
    hash of its ``doc_id`` and ``j``): two copies of a document seldom meet in a batch. Depends
    only on the seed, the ids, the quotas and ``repeat``, like every decision of the shuffle."""
    order = np.asarray(order, dtype=np.int64)
    if not _is_int(repeat) or repeat < 1:
        raise ValueError(f"repeat must be an int >= 1, got {repeat!r}")
    times = np.ones(len(order), np.int64)
    if quotas:
        if labels is None:
            raise ValueError("balance quotas need the documents' labels")
        by_label = {q.label: q for q in quotas}
        ordered_labels = [labels[i] for i in order]
        missing = sorted(set(ordered_labels) - set(by_label), key=str)
        if missing:
            raise ValueError(f"no balance quota for the label(s) {missing}")
        ordered = np.array(ordered_labels, dtype=object)
        for label, quota in by_label.items():
            where = np.flatnonzero(ordered == label)
            times[where] = quota.copies
            times[where[: quota.extra]] += 1
    kept = order[times > 0]
    left_out = order[times == 0]
    times = times[times > 0] * repeat
    repeats = times - 1
    if not repeats.any():
        return BalancedOrder(kept, left_out, np.zeros(len(kept), np.int64))
    copied = np.repeat(np.arange(len(kept)), repeats)
    # The copy number of each copy: 1..times-1 within its document.
    starts = np.cumsum(repeats) - repeats
    number = np.arange(len(copied)) - np.repeat(starts, repeats) + 1
    pairs = zip(kept[copied].tolist(), number.tolist(), strict=True)
    copy_ids = [f"{doc_ids[i]}\0{j}" for i, j in pairs]
    hashes = _keyed_hashes(copy_ids, seed, _COPY_PERSON)
    places = np.concatenate([np.arange(len(kept), dtype=np.uint64), hashes % np.uint64(len(kept))])
    is_copy = np.concatenate([np.zeros(len(kept), np.uint8), np.ones(len(copied), np.uint8)])
    tie = np.concatenate([np.zeros(len(kept), np.uint64), hashes])
    items = np.concatenate([kept, kept[copied]])
    numbers = np.concatenate([np.zeros(len(kept), np.int64), number])
    placed = np.lexsort((tie, is_copy, places))
    return BalancedOrder(items[placed], left_out, numbers[placed])


PROMPT_FILLS_SEQUENCE = "prompt_fills_sequence"
"""Reject reason of an SFT document left with no response token once cut to fit (the padded and
bucketed layouts, and the packed one with ``overflow="truncate"``): its only learned label would
be the EOS (packed) or none at all (padded: every label -100, and a batch of only such rows gives
a NaN mean loss); the EOS right after a cut-off prompt would teach the model to stop mid-prompt."""


def prompt_fills_sequence(
    lengths: Sequence[int] | np.ndarray, prompt_tokens: Sequence[int] | np.ndarray, limit: int
) -> np.ndarray:
    """Per document cut to its first ``limit`` tokens: does its prompt cover every token kept?

    True when ``prompt_tokens >= min(length, limit)``: a prompt as long as the cut, or a response
    of no tokens. ``lengths`` count what the layout keeps of a document (its EOS included when
    the layout appends one: SFT rows of the padded layouts); ``limit`` is ``seq_len`` there and
    ``seq_len - 1`` for packed documents with ``overflow="truncate"`` (their EOS follows the cut).
    Packed documents that continue in the next block lose nothing, so none is without a label."""
    if not _is_int(limit) or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")
    kept = np.minimum(np.asarray(lengths, dtype=np.int64), limit)
    return np.asarray(prompt_tokens, dtype=np.int64) >= kept


def masked_lead(
    prompt_tokens: Sequence[int] | np.ndarray, learned_spans: pa.Array | pa.ChunkedArray | None
) -> np.ndarray:
    """Per document, how many leading ids the loss masks: its prompt, or less when one of its
    ``learned_spans`` starts inside it (a chat's earlier answer)."""
    lead = np.array(prompt_tokens, dtype=np.int64)
    if learned_spans is not None:
        rows, starts, _ = learned_span_arrays(learned_spans)
        np.minimum.at(lead, rows, starts)
    return lead


def longest_in_batch(lengths: np.ndarray, seq_len: int, batch_size: int) -> np.ndarray:
    """Per row, the padded length for ``pad_to="longest"``: the longest (truncated) row of its
    group of ``batch_size`` consecutive rows."""
    kept = np.minimum(np.asarray(lengths, dtype=np.int64), seq_len)
    if len(kept) == 0:
        return kept
    groups = np.arange(len(kept)) // batch_size
    longest = np.maximum.reduceat(kept, np.arange(0, len(kept), batch_size))
    return np.maximum(longest[groups], 1)


def check_boundaries(boundaries: Sequence[int], seq_len: int) -> None:
    """Length-bucket bounds must be strictly increasing positive ints no larger than seq_len."""
    values = list(boundaries)
    if not values or any(not _is_int(b) or b < 1 or b > seq_len for b in values):
        raise ValueError(
            f"bucket_boundaries must be ints in [1, seq_len={seq_len}], got {tuple(values)!r}"
        )
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"bucket_boundaries must be strictly increasing, got {tuple(values)!r}")


def derive_boundaries(quantile_lengths: Sequence[float], seq_len: int, multiple: int = 8) -> tuple:
    """Bucket bounds from the length distribution: the given quantiles of document length,
    rounded up to a multiple of ``multiple`` (friendly to kernels), capped at and closed by
    ``seq_len``, duplicates removed."""
    bounds = sorted(
        {
            min(seq_len, max(multiple, -(-math.ceil(q) // multiple) * multiple))
            for q in quantile_lengths
        }
        | {seq_len}
    )
    return tuple(bounds)


def bucket_layout(
    lengths: np.ndarray,
    boundaries: Sequence[int],
    seq_len: int,
    batch_size: int,
    seed: int,
    salt: str = "",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Order and pad lengths of the ``bucketed`` layout, for rows given in shuffle order.

    Each row goes to the first bucket whose bound holds its (truncated) length; inside a bucket,
    rows keep their shuffle order and are cut into batches of ``batch_size``; each batch is padded
    to its longest row; the batches are ordered by a seeded hash of (``salt``, bucket, batch
    number), so a trainer reading in order sees lengths mixed across batches but uniform inside
    one. Each file's ``salt`` (its split and shuffle bucket) gives it its own order of lengths:
    without it every file repeated the first one's sequence of length buckets.
    Returns ``(order, targets, bucket_of_row, batch_of_row)``, the last three in output order;
    ``batch_of_row`` numbers the batches from 0 in output order (consecutive rows with one number
    are one batch, padded to one length), so a reader can take them back whole.
    """
    bounds = np.asarray(sorted(set(boundaries) | {seq_len}), dtype=np.int64)
    kept = np.minimum(np.asarray(lengths, dtype=np.int64), seq_len)
    bucket = np.searchsorted(bounds, kept, side="left").astype(np.int32)
    batches: list[tuple[bytes, np.ndarray]] = []
    key = int(seed).to_bytes(_SEED_BYTES, "little")
    for b in np.unique(bucket):
        rows = np.flatnonzero(bucket == b)
        for number, start in enumerate(range(0, len(rows), batch_size)):
            tag = hashlib.blake2b(
                f"{salt}:{b}:{number}".encode(), digest_size=8, key=key, person=_BATCH_PERSON
            ).digest()
            batches.append((tag, rows[start : start + batch_size]))
    batches.sort(key=lambda item: item[0])
    if not batches:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty.astype(np.int32), empty.astype(np.int32)
    order = np.concatenate([rows for _, rows in batches])
    targets = np.concatenate([np.full(len(rows), max(kept[rows].max(), 1)) for _, rows in batches])
    numbers = np.repeat(np.arange(len(batches), dtype=np.int32), [len(rows) for _, rows in batches])
    return order, targets, bucket[order], numbers


def length_histogram(
    lengths: np.ndarray, seq_len: int, bins: int = 16, weights: np.ndarray | None = None
) -> dict[str, int]:
    """Document-length histogram with power-of-two edges up to ``seq_len`` (and one bin above),
    for the asset's metadata. ``weights``: how many documents have each of ``lengths`` (for
    counts summed from the scatter manifests); one each when None."""
    lengths = np.asarray(lengths, dtype=np.int64)
    edges = [0]
    while edges[-1] < seq_len and len(edges) < bins:
        edges.append(max(1, edges[-1] * 2) if edges[-1] else 8)
    edges = sorted(set(min(e, seq_len) for e in edges))
    counts = np.histogram(
        lengths, bins=[*edges, max(seq_len + 1, edges[-1] + 1), np.inf], weights=weights
    )[0]
    labels = [f"{a}-{b - 1}" for a, b in itertools.pairwise(edges)]
    labels += [f"{edges[-1]}-{seq_len}", f">{seq_len}"]
    return {label: int(c) for label, c in zip(labels, counts, strict=True)}


# --- metadata -------------------------------------------------------------------------------------
def batch_schema_metadata(
    *,
    spec: BatchSpec,
    tokenizer_name: str,
    tokenizer_fingerprint: str,
    vocab_size: int,
    split: str,
    input_fingerprint: str,
    created_at: str = "",
) -> dict[bytes, bytes]:
    """Parquet schema metadata of a batch file: what a training job needs to trust it.

    Only inputs, so equal inputs give byte-identical files: ``created_at`` is the caller's
    reproducible creation time (``SOURCE_DATE_EPOCH`` or the newest input's mtime, ISO 8601),
    never the clock of the run that happened to write the file. The input fingerprint
    is stored as ``llm_assets.source_fingerprint``, not ``llm_assets.input_fingerprint``: that key
    is the warehouse's completion marker, added to the footer when a file is committed.
    """
    values = {
        "format_version": FORMAT_VERSION,
        "layout": spec.layout,
        "seq_len": str(spec.seq_len),
        "seed": str(spec.seed),
        "validation_fraction": repr(float(spec.validation_fraction)),
        "drop_remainder": str(spec.drop_remainder).lower(),
        "split": split,
        "tokenizer.name": tokenizer_name,
        "tokenizer.fingerprint": tokenizer_fingerprint,
        "tokenizer.vocab_size": str(int(vocab_size)),
        "source_fingerprint": input_fingerprint,
        "created_at": created_at,
        "overflow": spec.overflow,
        "pad_to": spec.pad_to,
        "batch_size": str(spec.batch_size),
        "bucket_boundaries": ",".join(map(str, spec.bucket_boundaries or ())),
    }
    if spec.balance != "none" and split == "train":  # validation is never balanced; absent
        # otherwise, so the files of runs without it are unchanged
        values["balance"] = spec.balance
        values["max_copies"] = "" if spec.max_copies is None else str(spec.max_copies)
    if spec.mixture is not None and split == "train":  # likewise: only train is mixed
        values["mixture"] = json.dumps(asdict(spec.mixture), sort_keys=True)
    if spec.augment != "none" and split == "train":  # likewise: only train is augmented
        values["augment"] = spec.augment
        values["augment_copies"] = str(spec.augment_copies)
        values["augment_rate"] = repr(float(spec.augment_rate))
    return {f"{META_PREFIX}{k}".encode(): v.encode() for k, v in sorted(values.items())}


# --- helpers --------------------------------------------------------------------------------------
def _span_positions(
    learned_spans: pa.Array | pa.ChunkedArray, row_starts: np.ndarray, kept: np.ndarray
) -> np.ndarray:
    """Flat positions of every document's learned spans, each document's starting at
    ``row_starts`` and cut to its first ``kept`` ids."""
    rows, starts, ends = learned_span_arrays(learned_spans)
    if len(rows) and rows[-1] >= len(row_starts):
        raise ValueError(f"learned spans for {rows[-1] + 1} documents, not {len(row_starts)}")
    ends = np.minimum(ends, kept[rows])
    starts = np.minimum(starts, ends)
    return _ranges(row_starts[rows] + starts, ends - starts)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(start, start + count)`` for every pair, without a Python loop."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    begins = np.repeat(np.asarray(starts, dtype=np.int64) - (np.cumsum(counts) - counts), counts)
    return begins + np.arange(total, dtype=np.int64)


def _ragged_column(values: np.ndarray, offsets: np.ndarray, value_type: pa.DataType) -> pa.Array:
    """A list column with the given int64 row offsets (rows of different lengths)."""
    if offsets[-1] <= _MAX_LIST_VALUES:
        return pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32)), pa.array(values, value_type)
        )
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values, value_type)).cast(
        pa.list_(value_type)
    )


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


MAX_SEQ_LEN = 2**24
"""Longest sequence accepted (16,777,216 tokens, far past any context in use): a typo such as
10**12 fails at once instead of as a MemoryError deep in the gather."""


def _check_seq_len(seq_len: int) -> None:
    if not _is_int(seq_len) or not 2 <= seq_len <= MAX_SEQ_LEN:
        raise ValueError(f"seq_len must be an int in [2, {MAX_SEQ_LEN}], got {seq_len!r}")


def _check_seed(seed: int) -> None:
    if not _is_int(seed) or not 0 <= seed < 2 ** (8 * _SEED_BYTES):
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")


def _check_buckets(n_buckets: int, name: str) -> None:
    if not _is_int(n_buckets) or not 1 <= n_buckets <= _MAX_BUCKETS:
        raise ValueError(f"{name} must be an int in [1, {_MAX_BUCKETS}], got {n_buckets!r}")


def _check_fraction(fraction: float) -> None:
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not 0 <= fraction < 1
    ):
        raise ValueError(f"validation_fraction must be in [0, 1), got {fraction!r}")


def _keyed_hashes(
    doc_ids: pa.Array | pa.ChunkedArray | Sequence[str], seed: int, person: bytes
) -> np.ndarray:
    """uint64 from the first 8 bytes (little endian) of blake2b(doc_id, key=seed, person)."""
    _check_seed(seed)
    ids = doc_ids.to_pylist() if isinstance(doc_ids, (pa.Array, pa.ChunkedArray)) else doc_ids
    if any(not isinstance(i, str) for i in ids):
        raise ValueError("doc_ids must all be strings (no nulls)")
    key = int(seed).to_bytes(_SEED_BYTES, "little")
    # A keyed blake2b compresses the key block when it is made: copy one made once (same digest,
    # ~40 % less time than a new keyed hash per document).
    keyed = hashlib.blake2b(digest_size=8, key=key, person=person)

    def digest(doc_id: str) -> bytes:
        h = keyed.copy()
        h.update(doc_id.encode())
        return h.digest()

    digests = b"".join(map(digest, ids))
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


def _token_dtype(token_type: pa.DataType, **ids: int) -> np.dtype:
    """The numpy dtype of ``token_type``, after checking it is an integer type that can hold
    every special id given (by name, for the error message)."""
    if not pa.types.is_integer(token_type):
        raise ValueError(f"token_type must be an Arrow integer type, got {token_type}")
    dtype = np.dtype(token_type.to_pandas_dtype())
    bounds = np.iinfo(dtype)
    for name, value in ids.items():
        if not _is_int(value) or not bounds.min <= value <= bounds.max:
            raise ValueError(f"{name} must be an int that fits {token_type}, got {value!r}")
    return dtype


def _list_column(values: np.ndarray, width: int, value_type: pa.DataType) -> pa.ChunkedArray:
    """Rows of ``width`` consecutive values as ``list<value_type>``: a zero-copy view of
    ``values`` plus int32 offsets, in as many chunks as int32 offsets need."""
    rows_per_chunk = _MAX_LIST_VALUES // width
    n_rows = len(values) // width
    chunks = []
    for first in range(0, n_rows, rows_per_chunk):
        rows = min(rows_per_chunk, n_rows - first)
        offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * np.int32(width))
        flat = pa.array(values[first * width : (first + rows) * width], type=value_type)
        chunks.append(pa.ListArray.from_arrays(offsets, flat))
    return pa.chunked_array(chunks, type=pa.list_(value_type))

"""What a batch file says about itself: its Parquet schema metadata, and the length histogram
of the asset's metadata."""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from llm_assets.kernels.batching.spec import BatchSpec


FORMAT_VERSION = "1"
META_PREFIX = "llm_assets."


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

"""Names of the warehouse's shared folders and files that stages write and the prune reads:
the scatter folders of ``training_batches`` and the dedup memo of ``filtered_documents``."""

from __future__ import annotations

from typing import Any

from llm_assets.warehouse.shards import fingerprint

DEDUP_MEMO = "last.json"
"""``<filtered folder>/dedup/last.json``: the last global dedup step's inputs (as a key) and
outcome, so that a run whose inputs are the same reuses the outcome instead of deciding again."""

SCATTER_FOLDER = "_scatter"
"""``training_batches/_scatter/``: the shuffle's intermediate files, one folder per filtered shard
and scatter input (``<shard>-<input fingerprint>``), shared by every batch folder that needs them.
Not a batches folder (no ``part-*.parquet``); safe to delete, it is rebuilt when missing."""

SCATTER_FORMAT = "ipc-5"
"""Part of every scatter fingerprint: a folder written in another layout is scattered again.
(``ipc-5``: a (split, bucket) may have several batches, one per chunk of the shard.)"""


def scatter_folder_name(
    shard: str,
    checksum: str,
    seed: int,
    validation_fraction: float,
    n_buckets: int,
    text: bool = False,
    sources: bool = False,
) -> str:
    """The name of a filtered shard's scatter folder (``training_batches/_scatter/<name>``): its
    key and the input of its scatter (its checksum, the split and shuffle settings, the scatter
    format, and whether it holds the text and the sources: ``augment`` and ``mixture`` runs have
    folders of their own), so every batches folder with these settings shares it."""
    scatter_fp = fingerprint(
        checksum, *scatter_settings(seed, validation_fraction, n_buckets, text, sources)
    )
    return f"{shard}-{scatter_fp}"


def scatter_settings(
    seed: int, validation_fraction: float, n_buckets: int, text: bool, sources: bool = False
) -> tuple[Any, ...]:
    """What a scatter depends on besides its shard's bytes (with every shard's checksum, what
    every batch file does: the files' ``source_fingerprint``). ``text`` and ``sources`` only when
    set, so the folders of runs without ``augment`` or ``mixture`` keep their names."""
    return (
        (seed, validation_fraction, n_buckets, SCATTER_FORMAT)
        + (("text",) if text else ())
        + (("sources",) if sources else ())
    )

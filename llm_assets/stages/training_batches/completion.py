"""The completion marker of a batches folder, and the reuse of a folder that is complete."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_assets import storage
from llm_assets.constants import TRAINING_BATCHES
from llm_assets.stages.engine import StageContext, _remote_sizes, _unchanged
from llm_assets.stages.training_batches.megatron import megatron_done
from llm_assets.stages.training_batches.scatter import SPLITS
from llm_assets.storage import location_path
from llm_assets.warehouse.catalog import ShardRecord
from llm_assets.warehouse.shards import completed_input_fingerprint

COMPLETE_MARKER = "_COMPLETE.json"
"""Written in a batches folder as the last step of a run that wrote and recorded all of it, and
removed before a run changes any of its files (as ``llm_assets.reader.COMPLETE_MARKER``, which
refuses a folder without it): so a folder a run stopped in the middle of, with only some of its
files, is never read as a whole set. Its content (:func:`_completion_marker`) is a function of the
folder's files, so a re-run writes the same bytes. Named with ``_`` like Spark's ``_SUCCESS``:
no reader takes it for a batch file, and input listings skip it."""


_RECORDED_BATCH_EXTRAS = (
    "length_histogram",
    "bucket_boundaries",
    "megatron",
    "label_documents_in",
    "mixture_planned",
)
"""What a reuse of a complete batches folder reports from the catalog's record of the run that
wrote it (computed from the shuffle's files, which the reuse does not read)."""


def _complete_batches(
    ctx: StageContext, stage_fp: str, folder: Path, megatron: bool, input_fp: str
) -> tuple[list[ShardRecord], dict[str, Any]] | None:
    """The shards and recorded extras of the last materialization of this batches folder, when
    every file it recorded is still there as written (input fingerprint, :func:`_unchanged`) and,
    with ``megatron``, the export is complete; else None (the stage runs its phases)."""
    rows = ctx.catalog.query(
        "SELECT shards, extra FROM materializations WHERE asset = ? AND fingerprint = ? "
        "ORDER BY finished_at DESC LIMIT 1",
        [TRAINING_BATCHES, stage_fp],
    )
    if not rows:
        return None
    shards, extra = rows[0]
    records = ctx.catalog.stage_shards(TRAINING_BATCHES, stage_fp)
    if len(records) != shards:
        return None
    sizes = _remote_sizes(records)
    for record in records:
        if completed_input_fingerprint(record.path) != record.input_fingerprint:
            return None
        if not _unchanged(record, record.path, sizes):
            return None
    recorded = json.loads(extra) if extra else {}
    if megatron and not all(
        megatron_done(prefix, input_fp) for prefix in recorded.get("megatron", {}).values()
    ):
        return None
    if megatron and not recorded.get("megatron"):
        return None
    return sorted(records, key=lambda r: _split_bucket(r.shard)), recorded


def _completion_marker(
    folder: Path, stage_fp: str, source_fp: str, records: Sequence[ShardRecord]
) -> dict[str, Any]:
    """What :data:`COMPLETE_MARKER` holds (the reader's ``COMPLETE_MARKER`` says how it is read):
    every batch file with its rows, bytes and checksum (from the catalog's records of files
    checked or just written), and each complete Megatron export (:func:`megatron_done`) with its
    files' sizes. No run id or time: a re-run that writes the same files writes the same marker
    (the catalog's materializations say which run wrote the folder)."""
    files = {}
    sizes = storage.file_sizes(record.path for record in records)
    for record in records:
        files[location_path(record.path).name] = {
            "rows": record.rows_out,
            "bytes": sizes[record.path],
            "checksum": record.checksum,
        }
    exports = {}
    for split in SPLITS:
        relative = f"megatron/{split}_text_document"
        prefix = storage.join(folder, relative)
        if megatron_done(prefix, source_fp):
            sidecar = json.loads(storage.read_text(f"{prefix}.json"))
            exports[split] = {
                "prefix": relative,
                "bin_bytes": storage.file_size(f"{prefix}.bin"),
                "idx_bytes": storage.file_size(f"{prefix}.idx"),
                "documents": sidecar.get("documents"),
                "tokens": sidecar.get("tokens"),
            }
    return {
        "format": 1,
        "asset": TRAINING_BATCHES,
        "fingerprint": stage_fp,
        "source_fingerprint": source_fp,
        "files": files,
        "megatron": exports,
    }


def _mark_complete(
    folder: Path, stage_fp: str, source_fp: str, records: Sequence[ShardRecord]
) -> bool:
    """Write the folder's :data:`COMPLETE_MARKER` unless it is there with this content (a reused
    folder keeps its marker as it is); True when written. Atomic as the shards are
    (:func:`~llm_assets.storage.write_bytes`: locally a temporary name, which
    ``remove_stale_temporaries`` clears after a kill, fsync and rename; in object storage one
    PUT)."""
    marker = _completion_marker(folder, stage_fp, source_fp, records)
    path = storage.join(folder, COMPLETE_MARKER)
    try:
        if json.loads(storage.read_text(path)) == marker:
            return False
    except (OSError, ValueError):
        pass  # missing or unreadable: written below
    storage.write_bytes(path, (json.dumps(marker, indent=1, sort_keys=True) + "\n").encode())
    return True


def _unmark_complete(folder: Path) -> bool:
    """Remove the folder's :data:`COMPLETE_MARKER` (before a run writes any of its files); True
    when there was one."""
    path = storage.join(folder, COMPLETE_MARKER)
    if not storage.exists(path):
        return False
    storage.remove(path)
    return True


def _split_bucket(key: str) -> tuple[int, int]:
    """(split index, bucket) of a gather shard key
    (:func:`~llm_assets.stages.training_batches.scatter.scatter_key`)."""
    split, _, bucket = key.rpartition("-")
    return SPLITS.index(split), int(bucket)

"""Read ``training_batches`` Parquet output as a dataset: map-style or iterable, memory-mapped.

    from llm_assets.reader import TokenBatchDataset
    ds = TokenBatchDataset.from_warehouse("data/warehouse", split="train")
    ds[0]  # {"input_ids": np.ndarray, "attention_mask": ..., "position_ids": ...}

``from_warehouse`` reads the warehouse's current batches (:func:`current_batches`); a batches
folder or a list of files is read the same way (``TokenBatchDataset(folder, split="train")``).

With PyTorch installed (the ``torch`` extra) the classes are ``torch.utils.data.Dataset`` /
``IterableDataset`` and work with ``DataLoader``; without it they return numpy arrays all the same.

Files are read in split, then numeric bucket order (``part-train-99999`` before
``part-train-100000``). A folder that holds batch files, but none of the requested split (e.g.
``validation_fraction: 0``, or every document drawn into the other split), is an empty split:
the dataset has length 0, as it has when that split's files hold no rows. A folder with no batch
file at all raises ``FileNotFoundError``.

Sharding: the sequences (in file order) are cut into ``world_size`` contiguous ranges, one per
rank, each cut again per DataLoader worker; range ``k`` of ``K`` over ``N`` rows is
``[k * N // K, (k + 1) * N // K)``, so the parts cover every row exactly once (uneven remainders
are spread, nothing is dropped). Ranks default to ``torch.distributed`` when it is initialized.

Pre-formed batches (``batches=True``): the layouts that pad per batch (``bucketed``, and
``padded`` with ``pad_to: longest``) write a ``batch`` column, and their rows are only of equal
length within one batch, so batching rows anew (``DataLoader(ds, batch_size=B)``) would stack
rows of different lengths. With ``batches=True`` an item is one whole batch as the pipeline
formed it (2-D arrays, ``doc_id`` a list), ``len`` counts batches, and the rank and worker shares
are the same ``k * N // K`` ranges over whole batches; use ``DataLoader(ds, batch_size=None)``.

Datasets pickle without their open files (reopened on first use), so ``DataLoader`` workers
started with ``spawn`` (the default on macOS and Windows) work after the dataset was used.

Complete folders only: ``training_batches`` writes ``_COMPLETE.json`` (:data:`COMPLETE_MARKER`) in
a batches folder as its last step, once every file is written and recorded, listing each batch
file with its row count, size and checksum (and the ``megatron/`` export, if any). Given a folder,
the reader refuses it (:class:`IncompleteBatchesError`) when the marker is missing (a run stopped
while writing the folder, or a release from before the markers wrote it: materialize
``training_batches`` again, which completes the folder, or marks it without recomputing when it is
complete) or when the folder's ``part-*.parquet`` differ from the marker's list (a file missing,
one more, or another size). That costs one small JSON read and a ``stat`` per file. Explicit file
paths (a list, or one file) skip the check: the caller vouches for them.
:func:`megatron_prefixes` checks the same marker for the Megatron export.

One dataset is one set of batch files: every file read, and in a folder the other split's files
too, must carry the same ``llm_assets.source_fingerprint`` (the upstream state they were computed
from), or the reader refuses them (:class:`MixedSourcesError`). The pipeline writes each upstream
state to its own folder, so that holds for its folders; the check is there for folders filled
some other way (copies, older warehouses whose batch folder several upstream states shared).

A folder in object storage (``s3://bucket/.../training_batches/<fingerprint>``) is checked the
same way (one listing and the marker's read); the batch files of the split read are downloaded
whole to a local cache, checked against the marker's checksums, and memory-mapped from there (see
:mod:`llm_assets.batch_folders`).

Files are opened memory-mapped and decoded one row group at a time (the writer sizes row groups
for random access); list columns become numpy views over the group's flat buffer, with no Python
object per token.

Every column is read by default except ``doc_ids`` (the ``packed`` layout's lineage: the documents
in each block), which training does not need and ``DataLoader``'s default collate mangles (blocks
hold different numbers of documents: it fails on unequal lists and transposes equal ones): name it
in ``columns`` to get it, a list of strings per block, and batch with ``collate_fn=collate``. A
column named in ``columns`` that a file lacks is refused (``KeyError``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets import storage

# Folders are checked by batch_folders; its errors and checks are the reader's API too.
from llm_assets.batch_folders import (
    COMPLETE_MARKER,
    SPLITS,
    IncompleteBatchesError,  # noqa: F401
    cached_copies,
    check_complete,  # noqa: F401
    check_marker,
    listed_batch_files,
    megatron_prefixes,  # noqa: F401
)
from llm_assets.batch_folders import file_order as _file_order
from llm_assets.constants import CATALOG_FILE, DEFAULT_WAREHOUSE_DIR, TRAINING_BATCHES
from llm_assets.kernels.batching.metadata import META_PREFIX
from llm_assets.kernels.batching.sequences import BATCH, DOC_IDS
from llm_assets.kernels.schema import DOC_ID
from llm_assets.warehouse.catalog import Catalog, CatalogLockedError
from llm_assets.warehouse.shards import stage_dir

try:  # optional: torch is an extra, the reader works without it
    import torch
    from torch.utils.data import Dataset as _MapBase
    from torch.utils.data import IterableDataset as _IterBase
except ImportError:  # pragma: no cover - depends on the environment
    torch = None
    _MapBase = object  # type: ignore[assignment,misc]
    _IterBase = object  # type: ignore[assignment,misc]


SOURCE_FINGERPRINT = f"{META_PREFIX}source_fingerprint"
"""Schema metadata key of a batch file: the fingerprint of the upstream shards (and shuffle
settings) it was computed from; equal in every file of one consistent set."""


class MetadataMismatchError(ValueError):
    """A file whose schema metadata does not match what the caller expects."""


class NoPreformedBatchesError(ValueError):
    """``batches=True`` over files without a ``batch`` column: their layout has no pre-formed
    batches (every row is padded to ``seq_len``, or packed), so any rows batch together."""


class MixedSourcesError(MetadataMismatchError):
    """Batch files computed from different upstream states (their ``llm_assets.source_fingerprint``
    differ) given as one dataset: stale files of an earlier run beside the current ones, which
    would add sequences that are not in the current batches and may put a document in train and
    validation both."""


class NoBatchesError(FileNotFoundError):
    """A warehouse without a catalog, or whose catalog records no ``training_batches``."""


def current_batches(
    warehouse: str | Path = DEFAULT_WAREHOUSE_DIR,
    *,
    catalog_path: str | Path | None = None,
    lock_timeout_s: float = 10.0,
) -> Path:
    """The absolute folder of the current training batches of ``warehouse`` (the warehouse
    root of a pipeline run, relative to the working directory, or its object-storage URL), as
    its catalog records them: ``catalog_path`` (the warehouse resource's), by default
    ``catalog.duckdb`` in a local ``warehouse``; required for one in object storage. The folder
    of a warehouse in object storage is a ``UPath`` (``str()`` gives its URL).

    Read-only; DuckDB lets no process open it while a run writes it: after ``lock_timeout_s``,
    :class:`CatalogLockedError`. :class:`NoBatchesError`: no catalog, or no batches in it."""
    remote = storage.is_remote(str(warehouse))
    if remote and catalog_path is None:
        raise NoBatchesError(
            f"the warehouse {str(warehouse)!r} is in object storage: name its catalog too "
            "(catalog_path=..., the warehouse resource's catalog_path)"
        )
    root = storage.location_path(warehouse) if remote else Path(warehouse).expanduser().resolve()
    path = Path(catalog_path).expanduser().resolve() if catalog_path else root / CATALOG_FILE
    if not path.is_file():
        raise NoBatchesError(
            f"no warehouse catalog {path} (warehouse {str(warehouse)!r}, resolved against "
            f"{Path.cwd()}): run the pipeline first (bash scripts/run_pipeline.sh), or name the "
            "warehouse root it wrote (the warehouse resource's root)"
        )
    try:
        current = Catalog(path, lock_timeout_s=lock_timeout_s).current_fingerprint(
            TRAINING_BATCHES, read_only=True
        )
    except CatalogLockedError as error:
        raise CatalogLockedError(
            f"{error}. A pipeline run holds it while it writes: read the batches when it ends, "
            "or open the folder its Run summary printed with TokenBatchDataset(folder)"
        ) from error
    if current is None:
        raise NoBatchesError(
            f"the warehouse {root} holds no current {TRAINING_BATCHES}: materialize it (bash "
            "scripts/run_pipeline.sh runs the whole pipeline)"
        )
    return stage_dir(root, TRAINING_BATCHES, current)


def batch_files(source: str | Path | Sequence[str | Path], split: str | None = None) -> list[Path]:
    """The Parquet files of a batches folder (optionally one split), or an explicit list.

    Only the folder's own ``part-*.parquet``: its ``megatron/`` export is not batch files. Files
    are in split, then numeric bucket order (the shuffle's order; not name order, which puts
    ``part-train-100000`` before ``part-train-99999``). A folder without any batch file raises
    ``FileNotFoundError``; one with batch files but none of ``split`` gives ``[]`` (an empty
    split: ``validation_fraction: 0``, or every document drawn into the other split) when
    ``split`` is one of :data:`SPLITS`, and ``ValueError`` for another name. A folder that is not
    marked complete, or whose files differ from its marker's list, raises
    :class:`IncompleteBatchesError` (:func:`check_complete`). Explicit files (a list, or one
    file's path) are returned as given, unchecked. A folder in object storage gives its files'
    URLs (as ``UPath`` objects), nothing downloaded."""
    return _resolve(source, split)[0]


def _resolve(
    source: str | Path | Sequence[str | Path], split: str | None
) -> tuple[list[Path], list[Path] | None, dict[str, Any] | None]:
    """(the files to read, every batch file of the folder, its completion marker) for a folder
    (local, or ``UPath`` objects in object storage), checked against its completion marker once;
    (the files as given, None, None) for explicit files."""
    if not storage.is_location(source):
        return [Path(p) for p in source], None, None
    root = storage.location_path(source)
    if not storage.is_remote(str(source)) and root.is_file():
        return [root], None, None
    listed = listed_batch_files(root)
    every = sorted((root / name for name in listed), key=_file_order)
    marked = storage.exists(root / COMPLETE_MARKER)
    marker = check_marker(root, listed) if every or marked else None
    if not every and marked:
        # Complete and empty: read as empty splits, training would run zero steps unnoticed.
        raise FileNotFoundError(
            f"no batch files (part-*.parquet) under {root}: the run that wrote it kept no "
            "document (its completion marker lists no file); see why in the warehouse "
            "catalog: SELECT stage, reason, count(*) FROM rejects GROUP BY ALL ORDER BY 3 DESC"
        )
    if not every:
        raise FileNotFoundError(f"no batch files (part-*.parquet) under {root}")
    if split is None:
        return every, every, marker
    files = [p for p in every if _file_order(p)[0] == split]
    if not files and split not in SPLITS:
        present = sorted({_file_order(p)[0] for p in every})
        raise ValueError(
            f"{root} has no split {split!r}: its batch files are of {', '.join(present)} "
            f"(the pipeline writes {', '.join(SPLITS)})"
        )
    return files, every, marker


def _local(
    files: list[Path], marker: dict[str, Any] | None, cache_dir: str | Path | None
) -> list[Path]:
    """``files``, those in object storage replaced by their local copies (downloaded to the
    cache when it lacks them: :func:`~llm_assets.batch_folders.cached_copies`)."""
    remote = [p for p in files if storage.is_remote(str(p))]
    if not remote or marker is None:
        return files
    copies = dict(zip(remote, cached_copies(remote, marker, cache_dir), strict=True))
    return [copies.get(p, p) for p in files]


def _schema_metadata(path: Path) -> dict[str, str]:
    raw = storage.parquet_schema(str(path)).metadata or {}
    return {k.decode(): v.decode() for k, v in raw.items()}


def _check_metadata(path: Path, expected: dict[str, str | None]) -> dict[str, str]:
    meta = _schema_metadata(path)
    if f"{META_PREFIX}format_version" not in meta:
        raise MetadataMismatchError(f"{path} is not an llm_assets batch file (no format metadata)")
    for key, want in expected.items():
        if want is None:
            continue
        found = meta.get(f"{META_PREFIX}{key}")
        if found != str(want):
            raise MetadataMismatchError(
                f"{path}: metadata {META_PREFIX}{key} is {found!r}, expected {want!r}"
            )
    return meta


def _check_one_source(
    files: Sequence[Path],
    metadata: Sequence[dict[str, str]],
    folder_files: Sequence[Path] | None,
) -> None:
    """Refuse files of more than one upstream state (:class:`MixedSourcesError`), naming each
    source fingerprint with its files. Given a folder (``folder_files``, all its batch files),
    its other split's files count too: train and validation of two states split the documents
    differently."""
    found = {path: meta.get(SOURCE_FINGERPRINT) for path, meta in zip(files, metadata, strict=True)}
    for path in folder_files or ():
        if path not in found:
            found[path] = _schema_metadata(path).get(SOURCE_FINGERPRINT)
    by_source: dict[str | None, list[Path]] = {}
    for path, value in sorted(found.items(), key=lambda item: _file_order(item[0])):
        by_source.setdefault(value, []).append(path)
    if len(by_source) < 2:
        return
    parents = {path.parent for path in found}
    one_folder = len(parents) == 1
    where = str(next(iter(parents))) if one_folder else "the batch files"
    groups = "; ".join(
        f"{value!r} in {', '.join(p.name if one_folder else str(p) for p in paths)}"
        for value, paths in by_source.items()
    )
    raise MixedSourcesError(
        f"{where}: batch files of {len(by_source)} different upstream states "
        f"({SOURCE_FINGERPRINT} differs): {groups}. One dataset is one set of batch files: read "
        "the current folder (the training_batches materialization's 'folder' metadata, or "
        "current_shards in the warehouse catalog)"
    )


def _shard_range(n: int, part: int, parts: int) -> tuple[int, int]:
    return part * n // parts, (part + 1) * n // parts


def _default_rank() -> tuple[int, int]:
    if (
        torch is not None
        and torch.distributed.is_available()
        and torch.distributed.is_initialized()
    ):
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _worker() -> tuple[int, int]:
    if torch is None:
        return 0, 1
    info = torch.utils.data.get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)


class _Files:
    """Row-group index over the files: global row -> (file, row group, row in group).

    Open ``ParquetFile`` handles and the last decoded row group are per process: they are left
    out when pickled (a ``spawn`` DataLoader worker gets the dataset pickled, and a
    ``ParquetFile`` cannot be) and reopened on first use."""

    def __init__(
        self,
        files: list[Path],
        expected: dict[str, str | None],
        columns: Sequence[str] | None = None,
    ) -> None:
        self.files = files
        self.columns = list(columns) if columns is not None else None
        self.metadata = [_check_metadata(p, expected) for p in files]
        if self.columns is not None:
            for path in files:
                _check_columns(path, self.columns)
        starts: list[int] = []
        groups: list[tuple[int, int]] = []
        file_starts: list[int] = []
        total = 0
        for f, path in enumerate(files):
            file_starts.append(total)
            meta = pq.read_metadata(path)
            for g in range(meta.num_row_groups):
                starts.append(total)
                groups.append((f, g))
                total += meta.row_group(g).num_rows
        self.starts = np.array([*starts, total], dtype=np.int64)
        self.file_starts = np.array([*file_starts, total], dtype=np.int64)
        self.groups = groups
        self.total = total
        self._cache: tuple[int, dict[str, Any]] | None = None
        self._handles: dict[int, pq.ParquetFile] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the open files and the decoded group, which cannot (or need not) be
        pickled: the copy reopens what it reads."""
        state = self.__dict__.copy()
        state["_cache"] = None
        state["_handles"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = None
        self._handles = {}

    def _handle(self, f: int) -> pq.ParquetFile:
        handle = self._handles.get(f)
        if handle is None:
            handle = self._handles[f] = pq.ParquetFile(self.files[f], memory_map=True)
        return handle

    def group(self, index: int) -> dict[str, Any]:
        """The decoded columns of row group ``index`` (the last one is cached)."""
        if self._cache is not None and self._cache[0] == index:
            return self._cache[1]
        f, g = self.groups[index]
        handle = self._handle(f)
        columns = self.columns
        if columns is None:
            columns = [name for name in handle.schema_arrow.names if name != DOC_IDS]
        table = handle.read_row_group(g, columns=columns)
        decoded = {name: _decode(table.column(name)) for name in table.column_names}
        self._cache = (index, decoded)
        return decoded

    def locate(self, row: int) -> tuple[int, int]:
        g = int(np.searchsorted(self.starts, row, side="right")) - 1
        return g, row - int(self.starts[g])

    def batch_starts(self) -> np.ndarray:
        """Global first row of every pre-formed batch, then the total: consecutive rows of one
        file with one ``batch`` value are one batch (a batch never spans files). Raises
        :class:`NoPreformedBatchesError` naming a file without the column."""
        bounds: list[np.ndarray] = []
        for f, path in enumerate(self.files):
            if BATCH not in pq.read_schema(path).names:
                layout = self.metadata[f].get(f"{META_PREFIX}layout", "?")
                pad_to = self.metadata[f].get(f"{META_PREFIX}pad_to", "?")
                if layout == "bucketed" or (layout == "padded" and pad_to == "longest"):
                    why = (
                        "it was written before batch files recorded their batches: "
                        "re-materialize training_batches to read whole batches"
                    )
                else:
                    why = (
                        "only the layouts 'bucketed' and 'padded' with pad_to 'longest' have "
                        "pre-formed batches; read its rows (batches=False) and batch them with "
                        "DataLoader(batch_size=...)"
                    )
                raise NoPreformedBatchesError(
                    f"{path} has no {BATCH!r} column (layout {layout!r}, pad_to {pad_to!r}): {why}"
                )
            if self.file_starts[f] == self.file_starts[f + 1]:
                continue  # a file of no rows has no batch
            column = self._handle(f).read(columns=[BATCH]).column(BATCH)
            if column.null_count:
                raise ValueError(f"{path}: column {BATCH!r} has {column.null_count} nulls")
            numbers = column.to_numpy()
            changes = np.flatnonzero(numbers[1:] != numbers[:-1]) + 1
            bounds.append(int(self.file_starts[f]) + np.concatenate([[0], changes]))
        return np.concatenate([*bounds, [self.total]]).astype(np.int64)

    def rows(self, start: int, stop: int, tensors: bool) -> dict[str, Any]:
        """Rows ``[start, stop)`` (of one file) as one batch: list columns as 2-D arrays (int64
        tensors with ``tensors``), which needs rows of one length (else ``ValueError`` naming
        the file); strings (``doc_id``) as a list; other scalars as 1-D arrays or tensors (int64,
        bool for a bool column)."""
        lists: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        scalars: dict[str, list[np.ndarray]] = {}
        names: list[str] = []
        row = start
        while row < stop:
            group, first = self.locate(row)
            decoded = self.group(group)
            last = min(stop, int(self.starts[group + 1])) - int(self.starts[group])
            for name, column in decoded.items():
                if name not in names:
                    names.append(name)
                if isinstance(column, tuple):
                    values, offsets = column
                    piece = values[offsets[first] : offsets[last]]
                    lists.setdefault(name, []).append((piece, np.diff(offsets[first : last + 1])))
                else:
                    scalars.setdefault(name, []).append(column[first:last])
            row += last - first
        out: dict[str, Any] = {}
        for name in names:
            if name in lists:
                values = np.concatenate([v for v, _ in lists[name]])
                widths = np.unique(np.concatenate([w for _, w in lists[name]]))
                if len(widths) > 1:
                    f = self.groups[self.locate(start)[0]][0]
                    first_row = start - int(self.file_starts[f])
                    raise ValueError(
                        f"{self.files[f]}: rows {first_row}-{first_row + stop - start - 1} share "
                        f"one {BATCH!r} number but {name!r} has lengths {widths.tolist()}: not "
                        "one pre-formed batch"
                    )
                width = int(widths[0]) if len(widths) else 0
                matrix = values.reshape(stop - start, width)
                out[name] = torch.from_numpy(matrix.astype(np.int64)) if tensors else matrix
                continue
            column = np.concatenate(scalars[name])
            if name == DOC_ID or column.dtype == object:
                out[name] = column.tolist()
            elif tensors:
                # Integers become int64 (what embeddings and losses take); a bool column (the
                # ``augmented`` flag) stays bool, so it masks rows rather than indexing them.
                kept = column if column.dtype == np.bool_ else column.astype(np.int64)
                out[name] = torch.from_numpy(kept)
            else:
                out[name] = column
        return out


def _check_columns(path: Path, columns: Sequence[str]) -> None:
    """Refuse ``columns`` naming one the file lacks (pyarrow would skip it, and the items would
    silently lack it: a ``KeyError`` far away in the training loop)."""
    names = pq.read_schema(path).names
    missing = [name for name in columns if name not in names]
    if not missing:
        return
    why = ""
    if DOC_IDS in missing:
        why = (
            f"; {DOC_IDS!r} is in the packed layout's files only, written since training_batches "
            "code version 4 (materialize training_batches again for it)"
        )
    raise KeyError(
        f"{path} has no column {', '.join(map(repr, missing))} (its columns: "
        f"{', '.join(names)}){why}"
    )


def collate(items: Sequence[dict[str, Any]] | dict[str, Any]) -> dict[str, Any]:
    """A ``DataLoader`` ``collate_fn`` for items that hold ``doc_ids``: each block's list stays
    one list (``batch["doc_ids"][i]`` is row ``i``'s), where the default collate would transpose
    lists of equal length (the first ids of every row together) or fail on unequal ones. Every
    other key is collated by torch's ``default_collate`` (tensors; strings as a list), or, without
    torch, stacked as numpy arrays (strings as a list). An item that is already a batch
    (``batches=True`` with ``batch_size=None``) is returned as it is."""
    if isinstance(items, dict):
        return items
    out: dict[str, Any] = {}
    for key in items[0] if items else []:
        values = [item[key] for item in items]
        if isinstance(values[0], list):
            out[key] = values
        elif torch is not None and isinstance(values[0], np.ndarray) and values[0].dtype != object:
            # What default_collate gives, without wrapping each read-only Arrow view in a tensor
            # first (PyTorch warns that it is not writable): one copy, then the tensor.
            out[key] = torch.as_tensor(np.stack(values))
        elif torch is not None:
            out[key] = torch.utils.data.default_collate(values)
        elif isinstance(values[0], str):
            out[key] = values
        else:
            out[key] = np.stack(values)
    return out


def _decode(column: pa.ChunkedArray) -> Any:
    """A list column of numbers as (flat values, offsets); a list column of strings as an object
    array of Python lists (one per row); any other column as a numpy array."""
    array = column.combine_chunks()
    is_list = pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
    if is_list and not pa.types.is_integer(array.type.value_type):
        rows = np.empty(len(array), dtype=object)
        for i, row in enumerate(array.to_pylist()):
            rows[i] = row  # one by one: equal-length rows would otherwise make a 2-D array
        return rows
    if is_list:
        values = array.values.to_numpy(zero_copy_only=False)
        offsets = array.offsets.to_numpy()
        return values, offsets
    return array.to_numpy(zero_copy_only=False)


def _item(column: tuple[np.ndarray, np.ndarray], i: int, tensors: bool) -> Any:
    values, offsets = column
    item = values[offsets[i] : offsets[i + 1]]
    return torch.from_numpy(item.astype(np.int64)) if tensors else item


def _row(decoded: dict[str, Any], i: int, tensors: bool) -> dict[str, Any]:
    return {
        name: _item(column, i, tensors) if isinstance(column, tuple) else column[i]
        for name, column in decoded.items()
    }


class TokenBatchDataset(_MapBase):  # type: ignore[misc,valid-type]
    """Map-style dataset over batch files: ``len`` is this rank's share, items are dicts of numpy
    arrays (or int64 tensors with ``return_tensors="pt"``). ``columns`` limits what is decoded
    (e.g. ``["input_ids", "position_ids"]``): fewer columns, less decompression.

    ``batches=True`` (layouts ``bucketed`` and ``padded`` with ``pad_to: longest``, whose rows
    are padded per batch): an item is one pre-formed batch, list columns as 2-D arrays (tensors),
    ``doc_id`` as a list and other scalar columns as 1-D arrays; ``len`` counts this rank's
    batches, and ranks (and, in :class:`IterableTokenBatches`, workers) get contiguous ranges of
    whole batches, together every batch once. Load with ``DataLoader(ds, batch_size=None)``.
    Files without a ``batch`` column (``packed``; ``padded`` to ``seq_len``) are refused with
    :class:`NoPreformedBatchesError`: batch their rows with ``DataLoader(batch_size=...)``.

    A split with no file in a folder of batch files (see :func:`batch_files`) is empty: length
    0, ``metadata`` ``{}``; the expected metadata is then checked on the other split's files.

    A folder must be marked complete by ``training_batches`` (:class:`IncompleteBatchesError`
    otherwise; see :func:`check_complete`); a list of files is read as given. A folder in object
    storage (``s3://...``) is checked the same way, and the files read are downloaded to a local
    cache (``cache_dir``; see :mod:`llm_assets.batch_folders`) and memory-mapped from there."""

    def __init__(
        self,
        source: str | Path | Sequence[str | Path],
        split: str | None = "train",
        *,
        expected_tokenizer_fingerprint: str | None = None,
        expected_layout: str | None = None,
        expected_seq_len: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        return_tensors: str = "np",
        columns: Sequence[str] | None = None,
        batches: bool = False,
        cache_dir: str | Path | None = None,
    ) -> None:
        if return_tensors not in ("np", "pt"):
            raise ValueError(f"return_tensors must be 'np' or 'pt', got {return_tensors!r}")
        if return_tensors == "pt" and torch is None:
            raise ImportError("return_tensors='pt' needs torch: pip install 'llm-assets[torch]'")
        expected = {
            "tokenizer.fingerprint": expected_tokenizer_fingerprint,
            "layout": expected_layout,
            "seq_len": None if expected_seq_len is None else str(expected_seq_len),
            "split": split,
        }
        # A folder is checked against its completion marker once, here (explicit files are not).
        files, folder_files, marker = _resolve(source, split)
        files = _local(files, marker, cache_dir)
        if not files:  # an empty split: still refuse a folder of the wrong tokenizer or layout
            others = folder_files or []
            if batches:
                others = _local(others, marker, cache_dir)
            for path in others:
                _check_metadata(path, {**expected, "split": None})
            if batches and others:  # and batches=True where the folder has no pre-formed batches
                _Files(others, {**expected, "split": None}, columns).batch_starts()
        self._files = _Files(files, expected, columns)
        _check_one_source(files, self._files.metadata, folder_files)
        default_rank, default_world = _default_rank()
        self.rank = default_rank if rank is None else rank
        self.world_size = default_world if world_size is None else world_size
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world size {self.world_size}")
        self.batches = batches
        # Row mode: [start, stop) are rows; batch mode: indices into _batch_starts.
        self._batch_starts = self._files.batch_starts() if batches else None
        units = len(self._batch_starts) - 1 if self._batch_starts is not None else self._files.total
        self.start, self.stop = _shard_range(units, self.rank, self.world_size)
        self.tensors = return_tensors == "pt"

    @classmethod
    def from_warehouse(
        cls,
        warehouse: str | Path = DEFAULT_WAREHOUSE_DIR,
        split: str | None = "train",
        *,
        catalog_path: str | Path | None = None,
        **kwargs: Any,
    ) -> TokenBatchDataset:
        """The current batches of ``warehouse`` (:func:`current_batches`, with its
        ``catalog_path``): no fingerprint to look up. ``kwargs`` are those of the constructor."""
        return cls(current_batches(warehouse, catalog_path=catalog_path), split, **kwargs)

    @property
    def metadata(self) -> dict[str, str]:
        """The schema metadata of the first file (tokenizer, layout, seq_len, ...)."""
        return self._files.metadata[0] if self._files.metadata else {}

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: int) -> dict[str, Any]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            what = "batches" if self.batches else "sequences"
            raise IndexError(f"index {index} out of range for {len(self)} {what}")
        if self._batch_starts is not None:
            first, last = self._batch_starts[self.start + index : self.start + index + 2]
            return self._files.rows(int(first), int(last), self.tensors)
        group, row = self._files.locate(self.start + index)
        return _row(self._files.group(group), row, self.tensors)

    def get_batch(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Several sequences stacked (fixed-length layouts; ragged ones, and ``doc_ids``, as
        lists). Row mode only: with ``batches=True`` every item is already a batch."""
        if self.batches:
            raise TypeError("get_batch stacks rows: with batches=True, ds[i] is already a batch")
        rows = [self[i] for i in indices]
        out: dict[str, Any] = {}
        for key in rows[0] if rows else []:
            items = [r[key] for r in rows]
            if isinstance(items[0], list):  # a block's doc_ids: strings, not a tensor
                out[key] = items
                continue
            try:
                out[key] = np.stack(items)
            except ValueError:
                out[key] = items
        return out


class IterableTokenBatches(_IterBase):  # type: ignore[misc,valid-type]
    """Iterable dataset: yields this (rank, DataLoader worker)'s contiguous share, row group by row
    group, in file order. Takes the arguments of :class:`TokenBatchDataset`; with
    ``batches=True`` it yields whole pre-formed batches, each worker a contiguous range of them."""

    def __init__(
        self, source: str | Path | Sequence[str | Path], split: str | None = "train", **kwargs: Any
    ) -> None:
        self._map = TokenBatchDataset(source, split, **kwargs)

    @classmethod
    def from_warehouse(
        cls,
        warehouse: str | Path = DEFAULT_WAREHOUSE_DIR,
        split: str | None = "train",
        *,
        catalog_path: str | Path | None = None,
        **kwargs: Any,
    ) -> IterableTokenBatches:
        """The current batches of ``warehouse``, as :meth:`TokenBatchDataset.from_warehouse`."""
        return cls(current_batches(warehouse, catalog_path=catalog_path), split, **kwargs)

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        worker, workers = _worker()
        start, stop = _shard_range(len(self._map), worker, workers)
        if self._map.batches:
            for index in range(start, stop):
                yield self._map[index]
            return
        files, tensors = self._map._files, self._map.tensors
        row = self._map.start + start
        end = self._map.start + stop
        while row < end:
            # Decode one row group, then yield numpy views into it (no per-item lookups).
            group, first = files.locate(row)
            decoded = files.group(group)
            last = min(end, int(files.starts[group + 1])) - int(files.starts[group])
            columns = [(name, col) for name, col in decoded.items()]
            for i in range(first, last):
                yield {
                    name: (_item(col, i, tensors) if isinstance(col, tuple) else col[i])
                    for name, col in columns
                }
            row += last - first

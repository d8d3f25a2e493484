"""Read ``training_batches`` Parquet output as a dataset: map-style or iterable, memory-mapped.

    from llm_assets.reader import TokenBatchDataset
    ds = TokenBatchDataset("data/warehouse/training_batches/<fingerprint>", split="train",
                           expected_tokenizer_fingerprint=fp, expected_layout="packed")
    ds[0]  # {"input_ids": np.ndarray, "attention_mask": ..., "position_ids": ...}

With PyTorch installed (the ``torch`` extra) the classes are ``torch.utils.data.Dataset`` /
``IterableDataset`` and work with ``DataLoader``; without it they return numpy arrays all the same.

Sharding: the sequences (in file order) are cut into ``world_size`` contiguous ranges, one per
rank, each cut again per DataLoader worker; range ``k`` of ``K`` over ``N`` rows is
``[k * N // K, (k + 1) * N // K)``, so the parts cover every row exactly once (uneven remainders
are spread, nothing is dropped). Ranks default to ``torch.distributed`` when it is initialized.

One dataset is one set of batch files: every file read, and in a folder the other split's files
too, must carry the same ``llm_assets.source_fingerprint`` (the upstream state they were computed
from), or the reader refuses them (:class:`MixedSourcesError`). The pipeline writes each upstream
state to its own folder, so that holds for its folders; the check is there for folders filled
some other way (copies, older warehouses whose batch folder several upstream states shared).

Files are opened memory-mapped and decoded one row group at a time (the writer sizes row groups
for random access); list columns become numpy views over the group's flat buffer, with no Python
object per token.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.lib.batching import META_PREFIX

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


class MixedSourcesError(MetadataMismatchError):
    """Batch files computed from different upstream states (their ``llm_assets.source_fingerprint``
    differ) given as one dataset: stale files of an earlier run beside the current ones, which
    would add sequences that are not in the current batches and may put a document in train and
    validation both."""


def batch_files(source: str | Path | Sequence[str | Path], split: str | None = None) -> list[Path]:
    """The Parquet files of a batches folder (optionally one split), or an explicit list.

    Only the folder's own ``part-*.parquet``: its ``megatron/`` export is not batch files."""
    if isinstance(source, (str, Path)):
        root = Path(source)
        if root.is_file():
            return [root]
        pattern = f"part-{split}-*.parquet" if split else "part-*.parquet"
        files = sorted(root.glob(pattern))
        if not files:
            raise FileNotFoundError(f"no batch files matching {pattern} under {root}")
        return files
    return [Path(p) for p in source]


def _schema_metadata(path: Path) -> dict[str, str]:
    raw = pq.read_schema(path).metadata or {}
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
    source: str | Path | Sequence[str | Path],
    files: Sequence[Path],
    metadata: Sequence[dict[str, str]],
) -> None:
    """Refuse files of more than one upstream state (:class:`MixedSourcesError`), naming each
    source fingerprint with its files. Given a folder, its other split's files count too: train
    and validation of two states split the documents differently."""
    found = {path: meta.get(SOURCE_FINGERPRINT) for path, meta in zip(files, metadata, strict=True)}
    if isinstance(source, (str, Path)) and Path(source).is_dir():
        for path in batch_files(source):
            if path not in found:
                found[path] = _schema_metadata(path).get(SOURCE_FINGERPRINT)
    by_source: dict[str | None, list[Path]] = {}
    for path, value in sorted(found.items()):  # file name order, whichever split was read
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
    """Row-group index over the files: global row -> (file, row group, row in group)."""

    def __init__(
        self,
        files: list[Path],
        expected: dict[str, str | None],
        columns: Sequence[str] | None = None,
    ) -> None:
        self.files = files
        self.columns = list(columns) if columns is not None else None
        self.metadata = [_check_metadata(p, expected) for p in files]
        starts: list[int] = []
        groups: list[tuple[int, int]] = []
        total = 0
        for f, path in enumerate(files):
            meta = pq.read_metadata(path)
            for g in range(meta.num_row_groups):
                starts.append(total)
                groups.append((f, g))
                total += meta.row_group(g).num_rows
        self.starts = np.array([*starts, total], dtype=np.int64)
        self.groups = groups
        self.total = total
        self._cache: tuple[int, dict[str, Any]] | None = None
        self._handles: dict[int, pq.ParquetFile] = {}

    def group(self, index: int) -> dict[str, Any]:
        """The decoded columns of row group ``index`` (the last one is cached)."""
        if self._cache is not None and self._cache[0] == index:
            return self._cache[1]
        f, g = self.groups[index]
        handle = self._handles.get(f)
        if handle is None:
            handle = self._handles[f] = pq.ParquetFile(self.files[f], memory_map=True)
        table = handle.read_row_group(g, columns=self.columns)
        decoded = {name: _decode(table.column(name)) for name in table.column_names}
        self._cache = (index, decoded)
        return decoded

    def locate(self, row: int) -> tuple[int, int]:
        g = int(np.searchsorted(self.starts, row, side="right")) - 1
        return g, row - int(self.starts[g])


def _decode(column: pa.ChunkedArray) -> Any:
    array = column.combine_chunks()
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
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
    (e.g. ``["input_ids", "position_ids"]``): fewer columns, less decompression."""

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
        files = batch_files(source, split)
        self._files = _Files(files, expected, columns)
        _check_one_source(source, files, self._files.metadata)
        default_rank, default_world = _default_rank()
        self.rank = default_rank if rank is None else rank
        self.world_size = default_world if world_size is None else world_size
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world size {self.world_size}")
        self.start, self.stop = _shard_range(self._files.total, self.rank, self.world_size)
        self.tensors = return_tensors == "pt"

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
            raise IndexError(f"index {index} out of range for {len(self)} sequences")
        group, row = self._files.locate(self.start + index)
        return _row(self._files.group(group), row, self.tensors)

    def get_batch(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Several sequences stacked (fixed-length layouts; ragged ones as lists)."""
        rows = [self[i] for i in indices]
        out: dict[str, Any] = {}
        for key in rows[0] if rows else []:
            items = [r[key] for r in rows]
            try:
                out[key] = np.stack(items)
            except ValueError:
                out[key] = items
        return out


class IterableTokenBatches(_IterBase):  # type: ignore[misc,valid-type]
    """Iterable dataset: yields this (rank, DataLoader worker)'s contiguous share, row group by row
    group, in file order."""

    def __init__(
        self, source: str | Path | Sequence[str | Path], split: str | None = "train", **kwargs: Any
    ) -> None:
        self._map = TokenBatchDataset(source, split, **kwargs)

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        worker, workers = _worker()
        start, stop = _shard_range(len(self._map), worker, workers)
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

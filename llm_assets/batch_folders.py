"""Batches folders as :mod:`llm_assets.reader` finds them: their batch files, the completion
marker that vouches for them, and, for a folder in object storage, a local cache of the files.

A folder is a local path or an object-storage URL (``s3://bucket/.../training_batches/<fp>``).
Both are checked the same way: the marker is read, and the folder's ``part-*.parquet`` (a
listing: names and sizes) must be exactly the files it lists, with their sizes.

In object storage the batch files a dataset reads are downloaded once, whole, to a local cache
(``$LLM_ASSETS_CACHE_DIR``, else ``<temp dir>/llm_assets-cache``; or the datasets' ``cache_dir``),
at ``<cache>/<bucket>/<key>``, and checked against the marker's checksum; the datasets then
memory-map them like local files. A file already in the cache with the listed size and checksum
is not downloaded again. Files of the other split are not downloaded: their footers are read in
place (two ranged GETs each) for the reader's metadata checks.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llm_assets import storage
from llm_assets.storage import is_remote, location_path
from llm_assets.warehouse.shards import CHECKSUM_ALGORITHM, file_checksum

SPLITS = ("train", "validation")
"""The splits the pipeline writes (as ``llm_assets.stages.training_batches.scatter.SPLITS``): one
of them with no file in a batches folder is empty; any other name is refused as unknown."""

_PART = re.compile(r"^part-(?P<split>.+)-(?P<bucket>\d+)\.parquet$")

COMPLETE_MARKER = "_COMPLETE.json"
"""The completion marker of a batches folder (as
``llm_assets.stages.training_batches.completion.COMPLETE_MARKER``), written last, atomically, by
the run that wrote and recorded the whole folder, and removed before a run changes any of its
files. A JSON object: ``files`` maps each batch file's name to its ``rows``, ``bytes`` and
``checksum``; ``megatron`` maps each split of the export to its ``prefix`` (relative
to the folder), ``bin_bytes`` and ``idx_bytes``; also ``fingerprint`` (the folder's name) and
``source_fingerprint``. Its name starts with ``_``, so nothing takes it for a batch file."""

CACHE_ENV = "LLM_ASSETS_CACHE_DIR"
"""Where batch files read from object storage are cached (default:
``<temp dir>/llm_assets-cache``)."""


class IncompleteBatchesError(ValueError):
    """A batches folder that is not known to be one complete set of batch files: it has no
    completion marker (:data:`COMPLETE_MARKER`; a run stopped while writing it, or it was written
    by a release before the markers), or its files differ from the ones the marker lists. Reading
    it could train on part of the data without a word."""


_AGAIN = (
    "Materialize training_batches again (it completes the folder, or only marks it when it is "
    "complete), or read the current folder (the training_batches materialization's 'folder' "
    "metadata, or current_shards in the warehouse catalog)"
)


def file_order(path: Path) -> tuple[str, int, str]:
    """Sort key of a batch file: (split, bucket number), so that files past bucket 99,999, whose
    numbers have more than five digits, still follow bucket order; other names sort by name."""
    match = _PART.match(path.name)
    if match is None:
        return path.name, -1, path.name
    return match["split"], int(match["bucket"]), path.name


def listed_batch_files(root: Path) -> dict[str, int]:
    """The folder's own batch files (``part-*.parquet``, not those of ``megatron/``) by name,
    with their sizes: a ``stat`` each locally, one listing in object storage."""
    if not is_remote(str(root)):
        return {p.name: p.stat().st_size for p in root.glob("part-*.parquet")}
    return {
        name: size
        for name, (size, _) in storage.list_tree(root).items()
        if "/" not in name and name.startswith("part-") and name.endswith(".parquet")
    }


def check_complete(folder: str | Path) -> dict[str, Any]:
    """The completion marker of a batches folder, after checking that the folder's batch files
    are exactly the ones it lists, with their sizes; :class:`IncompleteBatchesError` if there is
    no marker or the files differ. What the datasets do for a folder (see the reader's module
    docstring)."""
    root = location_path(folder)
    return check_marker(root, listed_batch_files(root))


def check_marker(root: Path, present: Mapping[str, int]) -> dict[str, Any]:
    """The marker of the folder ``root``, checked against the batch files ``present`` there
    (name -> size)."""
    path = root / COMPLETE_MARKER
    try:
        text = storage.read_text(path)
    except FileNotFoundError:
        raise IncompleteBatchesError(
            f"{root} is incomplete: it has no completion marker {COMPLETE_MARKER}, which "
            "training_batches writes last, once every batch file of the folder is written. A run "
            "stopped while writing it (it may hold only some of its files), or a release from "
            f"before the markers wrote it. {_AGAIN}"
        ) from None
    except OSError as error:
        raise IncompleteBatchesError(f"{path} cannot be read ({error}). {_AGAIN}") from error
    try:
        marker = json.loads(text)
        listed = marker["files"]
        sizes = {str(name): int(entry["bytes"]) for name, entry in listed.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise IncompleteBatchesError(
            f"{path} is not a completion marker of training_batches ({error!r}). {_AGAIN}"
        ) from None

    def order(name: str) -> tuple[str, int, str]:
        return file_order(Path(name))

    missing = sorted(set(sizes) - set(present), key=order)
    unlisted = sorted(set(present) - set(sizes), key=order)
    resized = [
        name
        for name in sorted(present, key=order)
        if name in sizes and present[name] != sizes[name]
    ]
    if missing or unlisted or resized:
        found = "; ".join(
            f"{what}: {', '.join(names[:5])}" + (f" and {len(names) - 5} more" if names[5:] else "")
            for what, names in (
                ("missing", missing),
                ("not listed", unlisted),
                ("of another size than listed", resized),
            )
            if names
        )
        raise IncompleteBatchesError(
            f"{root}: its batch files differ from the ones its completion marker "
            f"{COMPLETE_MARKER} lists ({found}): it is not the complete set training_batches "
            f"wrote. {_AGAIN}"
        )
    return marker


def megatron_prefixes(folder: str | Path) -> dict[str, str]:
    """The Megatron-LM dataset prefixes (``--data-path``) of a batches folder's ``megatron/``
    export, by split, after checking the folder's completion marker (:func:`check_complete`) and
    that the ``.bin`` and ``.idx`` it lists are there with their sizes: pointing Megatron-LM at
    the files directly skips that check. :class:`IncompleteBatchesError` if they are not;
    ``FileNotFoundError`` when the folder has no export (materialized without ``megatron``). In
    object storage the prefixes are URLs (Megatron-LM reads local files: copy them first)."""
    root = location_path(folder)
    marker = check_complete(root)
    exports = marker.get("megatron") or {}
    if not exports:
        raise FileNotFoundError(
            f"{root} has no Megatron export (its completion marker lists none): materialize "
            "training_batches with megatron: true"
        )
    prefixes: dict[str, str] = {}
    for split, entry in sorted(exports.items()):
        try:
            prefix = root / entry["prefix"]
            sizes = {".bin": int(entry["bin_bytes"]), ".idx": int(entry["idx_bytes"])}
        except (KeyError, TypeError, ValueError) as error:
            raise IncompleteBatchesError(
                f"{root / COMPLETE_MARKER}: its megatron entry {split!r} is not one "
                f"training_batches writes ({error!r}). {_AGAIN}"
            ) from None
        for ext, listed in sizes.items():
            path = f"{prefix}{ext}"
            size = storage.file_size(path)
            if size != listed:
                found = "missing" if size is None else f"{size} bytes"
                raise IncompleteBatchesError(
                    f"{path} is not the Megatron file training_batches wrote ({found}, "
                    f"{listed} bytes listed in {root / COMPLETE_MARKER}). {_AGAIN}"
                )
        prefixes[split] = str(prefix)
    return prefixes


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """The local cache of batch files read from object storage (see the module docstring)."""
    chosen = (
        cache_dir or os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir(), "llm_assets-cache")
    )
    return Path(chosen).expanduser()


def cached_copies(
    files: Sequence[Path], marker: dict[str, Any], cache_dir: str | Path | None = None
) -> list[Path]:
    """Local copies of the remote batch files ``files`` of one folder (whose checked
    ``marker`` lists them), downloaded unless the cache holds them with the listed size and
    checksum. A download is written under a temporary name and renamed into place, so a reader
    beside never opens half a file; one that does not match the marker is refused."""
    root = cache_root(cache_dir)
    copies = []
    for remote in files:
        entry = marker["files"][remote.name]
        bucket, key = storage.bucket_and_key(str(remote))
        local = root / bucket / key
        if not _matches(local, entry):
            local.parent.mkdir(parents=True, exist_ok=True)
            tmp = storage.temporary_path(local)
            try:
                storage.download_file(str(remote), tmp)
                if not _matches(tmp, entry):
                    raise IncompleteBatchesError(
                        f"{remote}: downloaded, it is not the file its completion marker lists "
                        f"(size or checksum differs; {entry}). {_AGAIN}"
                    )
                os.replace(tmp, local)
            finally:
                tmp.unlink(missing_ok=True)
        copies.append(local)
    return copies


def _matches(path: Path, entry: dict[str, Any]) -> bool:
    """Whether the local file ``path`` has the size and checksum of a marker entry."""
    try:
        if path.stat().st_size != int(entry["bytes"]):
            return False
    except OSError:
        return False
    checksum = entry.get("checksum")
    if not isinstance(checksum, str) or not checksum.startswith(f"{CHECKSUM_ALGORITHM}:"):
        return True  # no checksum of this algorithm listed: the size vouches alone
    return file_checksum(path) == checksum

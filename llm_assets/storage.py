"""Where data lives: local paths and object-storage URLs (``s3://``, ``gs://``, ``file://``...)
behind one fsspec filesystem, and errors that name the bucket and key.

Credentials and endpoints come from each backend's usual chain (for S3: ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` and the AWS config files), never
from run config, so they never reach logs or the catalog."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import fsspec
import fsspec.asyn
from fsspec.core import url_to_fs


class StorageError(OSError):
    """Object storage refused or could not serve a location: the message names the bucket and
    key, and what to check (bucket name, credentials, endpoint)."""


def scheme_of(location: str) -> str:
    """The URL scheme of ``location`` (``"s3"``, ``"gs"``...), ``""`` for a local path."""
    scheme = urlsplit(str(location)).scheme
    return "" if len(scheme) <= 1 else scheme  # "C:\\..." is a Windows drive, not a scheme


def is_remote(location: str) -> bool:
    """True for a URL served by a filesystem other than the local disk (``file://`` is local)."""
    return scheme_of(location) not in ("", "file", "local")


def filesystem(location: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem that serves ``location`` and the path within it (for S3:
    ``bucket/key``, no scheme). Unknown schemes raise :class:`StorageError` naming the package
    that serves them. Listings are never cached: workers and other runs write the same prefixes,
    and a cached listing would hide their objects."""
    try:
        return url_to_fs(str(location), use_listings_cache=False)
    except (ImportError, ValueError) as exc:
        raise StorageError(
            f"cannot open {location!r}: no filesystem for {scheme_of(location)!r} URLs is "
            f"installed ({exc})"
        ) from exc


QUERY_BLOCK_BYTES = 1 << 20
"""What one read of a DuckDB query fetches from an object at least (a ranged GET)."""


@functools.cache
def _remembering(cls: type) -> type:
    """``cls`` (an async fsspec filesystem class), remembering the details it looked up."""

    class Remembering(cls):  # type: ignore[misc,valid-type]
        async def _info(self, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
            # (Positional arguments are the path's bucket and key, given apart.)
            if kwargs.get("refresh") or kwargs.get("version_id") is not None:
                return await super()._info(path, *args, **kwargs)
            key = self._strip_protocol(path)
            if key not in self._remembered:
                self._remembered[key] = await super()._info(path, *args, **kwargs)
            return self._remembered[key]

        def open(self, path: str, mode: str = "rb", block_size: int | None = None, **kw: Any):
            # DuckDB reads a footer, then column chunks: fetch those, not 50 MiB from each.
            return super().open(path, mode, block_size=block_size or QUERY_BLOCK_BYTES, **kw)

    Remembering.__name__ = f"Remembering{cls.__name__}"
    return Remembering


def query_filesystem(location: str) -> fsspec.AbstractFileSystem:
    """A new instance of ``location``'s filesystem for one DuckDB connection (to register with
    it), which looks each object's details up once: DuckDB asks for a file's details and size
    three times each time it opens it, and it opens every file of a view each time it binds it.
    For one connection's life: the objects a query reads are complete shards, which no one
    changes meanwhile."""
    fs, _ = filesystem(location)
    if not isinstance(fs, fsspec.asyn.AsyncFileSystem):
        return fs
    remembering = _remembering(type(fs))(**fs.storage_options, skip_instance_cache=True)
    remembering._remembered = {}
    return remembering


def bucket_and_key(location: str) -> tuple[str, str]:
    """``("bucket", "key/prefix")`` of an object-storage URL."""
    parts = urlsplit(str(location))
    return parts.netloc, parts.path.lstrip("/")


def storage_error(exc: BaseException, location: str, action: str = "read") -> StorageError:
    """``exc``, raised while doing ``action`` on ``location``, as a :class:`StorageError` that
    says which bucket and key and what went wrong."""
    if not is_remote(location):
        return StorageError(f"cannot {action} {location!r}: {exc}")
    bucket, key = bucket_and_key(location)
    where = f"bucket {bucket!r}, key {key!r} ({location})" if key else f"bucket {bucket!r}"
    text = str(exc)
    kind = type(exc).__name__
    if "bucket does not exist" in text or "NoSuchBucket" in text:
        reason = "no such bucket; check the bucket name and the endpoint (AWS_ENDPOINT_URL)"
    elif isinstance(exc, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        reason = (
            "access denied; check the credentials in the environment (AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY or AWS_PROFILE) and the bucket's policy"
        )
    elif "Could not connect" in text or "EndpointConnection" in kind or "ConnectTimeout" in kind:
        reason = f"the endpoint is unreachable ({text}); check AWS_ENDPOINT_URL and the network"
    elif isinstance(exc, FileNotFoundError):
        reason = "no such key"
    else:
        reason = f"{kind}: {text}"
    return StorageError(f"cannot {action} {where}: {reason}")


def local_path(location: str) -> str:
    """The local path of a location that :func:`is_remote` says is local: ``file:///data/in``
    is ``/data/in``; a plain path is returned as given."""
    if scheme_of(location) in ("file", "local"):
        return filesystem(location)[1]
    return str(location)


INPUT_BLOCK_BYTES = 8 << 20
"""Bytes fetched per range request when an input object is read in order: large enough that the
request's round trip costs little next to its transfer, small enough that a worker holds at most
this much of a file it streams."""


def open_input(location: str, block_size: int = INPUT_BLOCK_BYTES) -> io.BufferedReader:
    """A buffered binary reader (``peek``, ``seek``) of a local file or an object. An object is
    read with range requests of ``block_size`` bytes as the reader moves through it, never
    fetched whole; errors from the store (no such bucket or key, access denied) are raised as
    the filesystem raises them: :func:`storage_error` names them."""
    if not is_remote(location):
        return open(local_path(location), "rb", buffering=1 << 20)
    fs, path = filesystem(location)
    handle = fs.open(path, "rb", block_size=block_size, cache_type="readahead")
    return io.BufferedReader(handle, buffer_size=min(block_size, 1 << 20))


def read_range(location: str, start: int, end: int) -> bytes:
    """The bytes ``[start, end)`` of a local file or an object (one range request)."""
    if end <= start:
        return b""
    return read_ranges([(location, start, end - start)])[0]


@dataclass(frozen=True)
class StoredFile:
    """An object found under a listed location."""

    url: str
    """What opens it (``s3://bucket/key``)."""
    name: str
    """Its key relative to the listed prefix, ``/``-separated."""
    size: int
    version: str
    """What changes when the object is written again: its ETag (S3), generation or checksum
    (other stores), else its modification time."""
    mtime_s: float | None
    """When it was last written (seconds since the epoch), if the store says."""


_VERSION_KEYS = ("ETag", "etag", "generation", "md5Hash", "crc32c", "checksum")
_MTIME_KEYS = ("LastModified", "mtime", "modified", "updated", "last_modified", "created")


def _mtime_seconds(info: dict) -> float | None:
    for key in _MTIME_KEYS:
        value = info.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def _version(info: dict, mtime_s: float | None) -> str:
    for key in _VERSION_KEYS:
        if info.get(key):
            return str(info[key])
    return f"mtime:{mtime_s}" if mtime_s is not None else f"size:{info.get('size')}"


def list_files(location: str) -> list[StoredFile]:
    """Every object under the prefix ``location`` names (as a folder: ``s3://b/in`` lists
    ``in/...``, not ``in2/``), sorted by name, freshly listed (no cached listing); folder
    marker objects (keys ending in ``/``) are left out. Raises :class:`StorageError` naming
    the bucket and key when the store refuses or cannot be reached."""
    fs, root = filesystem(location)
    root = root.rstrip("/")
    try:
        fs.invalidate_cache(root)
        found = fs.find(root, detail=True, withdirs=False)
    except Exception as exc:  # botocore, aiohttp and fsspec errors have no common base
        raise storage_error(exc, location, "list") from exc
    files = []
    for path, info in found.items():
        if path.endswith("/") or info.get("type") == "directory" or not path.startswith(root):
            continue
        name = path[len(root) :].lstrip("/")
        if not name:
            continue  # the location is itself an object, not a prefix
        mtime_s = _mtime_seconds(info)
        files.append(
            StoredFile(
                url=fs.unstrip_protocol(path),
                name=name,
                size=int(info.get("size") or 0),
                version=_version(info, mtime_s),
                mtime_s=mtime_s,
            )
        )
    return sorted(files, key=lambda f: f.name.split("/"))


def modified_times(locations: Iterable[str]) -> dict[str, float]:
    """Location -> when it was last written (seconds since the epoch), for those that exist:
    local files by ``stat``, objects by one listing per folder holding them (not a request per
    object)."""
    times: dict[str, float] = {}
    folders: dict[str, set[str]] = {}
    for location in locations:
        if is_remote(location):
            folders.setdefault(location.rsplit("/", 1)[0], set()).add(location)
        elif os.path.exists(local := local_path(location)):
            times[location] = os.stat(local).st_mtime
    for folder, wanted in folders.items():
        fs, path = filesystem(folder)
        try:
            listed = fs.ls(path, detail=True, refresh=True)
        except Exception as exc:  # botocore, aiohttp and fsspec errors have no common base
            raise storage_error(exc, folder, "list") from exc
        for info in listed:
            url = fs.unstrip_protocol(info["name"])
            mtime_s = _mtime_seconds(info)
            if url in wanted and mtime_s is not None:
                times[url] = mtime_s
    return times


# --- files at a location ---------------------------------------------------------------------
# The warehouse and the reader work with locations (``str``): a local path or an object-storage
# URL. Local paths take the plain ``os`` calls they always took; URLs go through fsspec, every
# object written in one PUT (or one multipart upload) that completes atomically, since object
# stores have no rename: an object is either complete or absent.

TMP_MARKER = ".tmp-"
"""What a local file or folder is named while it is written (before its rename into place)."""

UPLOAD_BLOCK_BYTES = 16 << 20
"""Part size of the multipart uploads of big objects (at least 5 MiB, S3's minimum): what one
writer holds in memory while it streams an object."""


def temporary_path(final: Path) -> Path:
    """Where a local file or folder is written before it is renamed to ``final``: ``final``'s
    name plus ``.tmp-`` and 8 random hex digits (so parallel attempts never share one)."""
    return final.with_name(f"{final.name}{TMP_MARKER}{uuid.uuid4().hex[:8]}")


def location_path(location: str | os.PathLike[str]) -> Path:
    """``location`` as a path object: a :class:`pathlib.Path` for a local path, a
    :class:`upath.UPath` (``/``, ``.name``, ``.parent``; ``str()`` is the URL) for a URL."""
    if is_remote(str(location)):
        from upath import UPath

        return UPath(str(location).rstrip("/") or str(location))
    return Path(location).expanduser()


def is_location(value: Any) -> bool:
    """Whether ``value`` is one location (a string, a local path or a :func:`location_path`
    of a URL), not a list of them."""
    from upath import UPath

    return isinstance(value, (str, os.PathLike, UPath))


def join(location: str | os.PathLike[str], *names: str) -> str:
    """``location`` with ``names`` appended (``/`` for URLs, the OS's separator for paths)."""
    return str(location_path(location).joinpath(*names))


@contextlib.contextmanager
def _remote(location: str, action: str) -> Iterator[None]:
    """Object-storage failures as :class:`StorageError` naming the bucket and key; a missing key
    stays ``FileNotFoundError`` (callers treat it as "not there"), a missing bucket does not."""
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError as exc:
        if "bucket" in str(exc).lower():
            raise storage_error(exc, location, action) from exc
        raise
    except Exception as exc:
        raise storage_error(exc, location, action) from exc


def exists(location: str | os.PathLike[str]) -> bool:
    """Whether a file (or, locally, a folder) is at ``location``."""
    location = str(location)
    if not is_remote(location):
        return Path(location).exists()
    fs, path = filesystem(location)
    with _remote(location, "look up"):
        return fs.exists(path)


def file_info(location: str | os.PathLike[str]) -> tuple[int, float] | None:
    """(size in bytes, modification time in seconds since the epoch) of the file at
    ``location``, None when there is none."""
    location = str(location)
    if not is_remote(location):
        try:
            stat = os.stat(location)
        except FileNotFoundError:
            return None
        return stat.st_size, stat.st_mtime
    fs, path = filesystem(location)
    with _remote(location, "look up"):
        try:
            info = fs.info(path)
        except FileNotFoundError:
            return None
    if info.get("type") == "directory":
        return None
    return int(info["size"]), _mtime_seconds(info) or 0.0


def file_size(location: str | os.PathLike[str]) -> int | None:
    """The size of the file at ``location``, None when there is none."""
    info = file_info(location)
    return None if info is None else info[0]


def read_bytes(location: str | os.PathLike[str]) -> bytes:
    """The whole file at ``location`` (``FileNotFoundError`` when there is none)."""
    location = str(location)
    if not is_remote(location):
        return Path(location).read_bytes()
    fs, path = filesystem(location)
    with _remote(location, "read"):
        return fs.cat_file(path)


def read_text(location: str | os.PathLike[str]) -> str:
    """The whole file at ``location`` as UTF-8 text."""
    return read_bytes(location).decode("utf-8")


def read_ranges(ranges: Sequence[tuple[str, int, int]]) -> list[bytes]:
    """The bytes at (location, offset, length) of each range, in order. Ranges of object storage
    are fetched concurrently (one ranged GET each); a range past a file's end comes back short."""
    out: list[bytes | None] = [None] * len(ranges)
    remote: dict[int, tuple[str, int, int]] = {}
    for i, (location, offset, length) in enumerate(ranges):
        if is_remote(location):
            remote[i] = (location, offset, length)
            continue
        fd = os.open(local_path(location), os.O_RDONLY)
        try:
            out[i] = os.pread(fd, length, offset)
        finally:
            os.close(fd)
    if remote:
        first = next(iter(remote.values()))[0]
        fs, _ = filesystem(first)
        paths = [filesystem(loc)[1] for loc, _, _ in remote.values()]
        starts = [offset for _, offset, _ in remote.values()]
        ends = [offset + length for _, offset, length in remote.values()]
        with _remote(first, "read"):
            fetched = fs.cat_ranges(paths, starts, ends, on_error="raise")
        for i, data in zip(remote, fetched, strict=True):
            out[i] = data
    return [b if b is not None else b"" for b in out]


def write_bytes(location: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``location`` so that it is complete or absent: locally under a
    temporary name, fsynced and renamed into place; in object storage in one PUT."""
    location = str(location)
    if is_remote(location):
        fs, path = filesystem(location)
        with _remote(location, "write"):
            fs.pipe_file(path, data)
        return
    final = Path(location)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(final)
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove(location: str | os.PathLike[str]) -> None:
    """Delete the file at ``location``, if there is one (an object store's delete does not say
    whether there was: ask :func:`exists` first to know)."""
    location = str(location)
    if not is_remote(location):
        Path(location).unlink(missing_ok=True)
        return
    fs, path = filesystem(location)
    with _remote(location, "delete"), contextlib.suppress(FileNotFoundError):
        fs.rm_file(path)


def remove_tree(location: str | os.PathLike[str]) -> None:
    """Delete the folder (every object under the prefix) at ``location``, if any."""
    location = str(location)
    if not is_remote(location):
        shutil.rmtree(location, ignore_errors=True)
        return
    fs, path = filesystem(location)
    with _remote(location, "delete"), contextlib.suppress(FileNotFoundError):
        fs.rm(path.rstrip("/") + "/", recursive=True)


def list_tree(location: str | os.PathLike[str]) -> dict[str, tuple[int, float]]:
    """Every file under the folder ``location`` (recursively, links not followed): its path
    relative to the folder (``/``-separated) -> (size, modification time). Empty when there is
    no such folder. One listing request per 1,000 objects in object storage."""
    location = str(location)
    if not is_remote(location):
        root = Path(location)
        found: dict[str, tuple[int, float]] = {}
        for folder, _, names in os.walk(root):
            for name in names:
                full = os.path.join(folder, name)
                with contextlib.suppress(FileNotFoundError):
                    stat = os.lstat(full)
                    found[Path(full).relative_to(root).as_posix()] = (stat.st_size, stat.st_mtime)
        return found
    fs, path = filesystem(location)
    prefix = path.rstrip("/") + "/"
    with _remote(location, "list"):
        try:
            listed = fs.find(prefix, detail=True)
        except FileNotFoundError:
            return {}
    return {
        name[len(prefix) :]: (int(info.get("size") or 0), _mtime_seconds(info) or 0.0)
        for name, info in listed.items()
        if name.startswith(prefix) and info.get("type") != "directory"
    }


def upload_file(local: str | os.PathLike[str], location: str) -> None:
    """Copy the local file ``local`` to the object ``location`` (complete or absent)."""
    fs, path = filesystem(location)
    with _remote(location, "write"):
        fs.put_file(str(local), path, block_size=UPLOAD_BLOCK_BYTES)


def download_file(location: str, local: str | os.PathLike[str]) -> None:
    """Copy the object ``location`` to the local file ``local``."""
    fs, path = filesystem(location)
    with _remote(location, "read"):
        fs.get_file(path, str(local))


WHOLE_READ_BYTES = 32 << 20
"""A Parquet object up to this size is fetched whole, in one GET, when opened (a shard is read
whole by the task that opens it); a larger one is read in ranged GETs of
:data:`READ_BLOCK_BYTES`, as pyarrow asks for its footer, row groups and columns."""

READ_BLOCK_BYTES = 8 << 20

FOOTER_READ_BYTES = 64 << 10
"""Bytes fetched from the end of a Parquet object for its footer alone: one suffix-range GET,
no HEAD (a footer longer than that is read in a second round)."""


def _remote_parquet_source(location: str) -> Any:
    """What pyarrow reads a remote Parquet file from: its bytes for a small one (a HEAD and one
    GET), else a file that fetches ranges (:data:`WHOLE_READ_BYTES`)."""
    import pyarrow as pa

    fs, path = filesystem(location)
    with _remote(location, "read"):
        handle = fs.open(path, "rb", block_size=READ_BLOCK_BYTES, cache_type="readahead")
        if handle.size <= WHOLE_READ_BYTES:
            with handle:
                return pa.py_buffer(handle.read())
    return pa.PythonFile(handle, mode="r")


def parquet_file(location: str | os.PathLike[str], **kwargs: Any) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` over the file at ``location`` (in object storage, see
    :data:`WHOLE_READ_BYTES`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not is_remote(str(location)):
        return pq.ParquetFile(location, **kwargs)
    source = _remote_parquet_source(str(location))
    if isinstance(source, pa.Buffer):
        source = pa.BufferReader(source)
    with _remote(str(location), "read"):
        return pq.ParquetFile(source, **kwargs)


def parquet_metadata(location: str | os.PathLike[str]) -> Any:
    """The footer (``FileMetaData``) of the Parquet file at ``location`` (in object storage:
    :data:`FOOTER_READ_BYTES`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    location = str(location)
    if not is_remote(location):
        return pq.read_metadata(location)
    fs, path = filesystem(location)
    with _remote(location, "read"):
        tail = fs.cat_file(path, start=-FOOTER_READ_BYTES)
    footer = int.from_bytes(tail[-8:-4], "little") + 8 if len(tail) >= 8 else None
    if tail[-4:] == b"PAR1" and footer is not None and footer <= len(tail):
        return pq.read_metadata(pa.BufferReader(tail))
    return parquet_file(location).metadata


def parquet_schema(location: str | os.PathLike[str]) -> Any:
    """The Arrow schema (with its metadata) of the Parquet file at ``location``."""
    import pyarrow.parquet as pq

    if not is_remote(str(location)):
        return pq.read_schema(location)
    return parquet_metadata(location).schema.to_arrow_schema()


def read_parquet(location: str | os.PathLike[str], **kwargs: Any) -> Any:
    """``pyarrow.parquet.read_table`` of the file at ``location``."""
    import pyarrow.parquet as pq

    if not is_remote(str(location)):
        return pq.read_table(location, **kwargs)
    source = _remote_parquet_source(str(location))
    with _remote(str(location), "read"):
        return pq.read_table(source, **kwargs)


def file_sizes(locations: Iterable[str]) -> dict[str, int | None]:
    """The size of the file at each location (None where there is none): a ``stat`` each
    locally; in object storage one listing per folder they are in, not a request per file."""
    sizes: dict[str, int | None] = {}
    folders: dict[str, list[str]] = {}
    for location in locations:
        location = str(location)
        if is_remote(location):
            folders.setdefault(location.rsplit("/", 1)[0], []).append(location)
        else:
            sizes[location] = file_size(location)
    for folder, members in folders.items():
        fs, path = filesystem(folder)
        with _remote(folder, "list"):
            try:
                listed = {
                    entry["name"].rstrip("/"): entry.get("size")
                    for entry in fs.ls(path, detail=True)
                    if entry.get("type") != "directory"
                }
            except FileNotFoundError:
                listed = {}
        for location in members:
            size = listed.get(filesystem(location)[1])
            sizes[location] = None if size is None else int(size)
    return sizes


class ObjectWriter:
    """A write-only stream to one object that is complete or absent: its bytes are uploaded in
    parts as they come (one PUT when small) and the object appears only at :meth:`commit`;
    :meth:`discard` (or a killed process) leaves nothing, not even part of it. Counts and hashes
    (XXH3-128) what it writes, so the checksum needs no second read. pyarrow's writers take it
    as their sink; closing them does not commit it."""

    def __init__(self, location: str) -> None:
        import xxhash

        self.location = location
        fs, path = filesystem(location)
        with _remote(location, "write"):
            self._file = fs.open(path, "wb", block_size=UPLOAD_BLOCK_BYTES)
        self._hash = xxhash.xxh3_128()
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self._hash.update(view)
        self.size += view.nbytes
        with _remote(self.location, "write"):
            self._file.write(view)
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        """Nothing: parts go out when full, the rest at :meth:`commit`."""

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        """What a pyarrow writer calls when it closes: nothing is uploaded until :meth:`commit`."""

    @property
    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def commit(self) -> None:
        """Complete the upload: the object appears, whole."""
        with _remote(self.location, "write"):
            self._file.close()
        self.closed = True

    def discard(self) -> None:
        """Abandon the object: nothing appears (a started multipart upload is aborted)."""
        with contextlib.suppress(Exception):
            self._file.discard()
        self._file.closed = True  # else its finalizer would try to upload what is left
        self.closed = True

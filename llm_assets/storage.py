"""Where data lives: local paths and object-storage URLs (``s3://``, ``gs://``, ``file://``...)
behind one fsspec filesystem, and errors that name the bucket and key.

Credentials and endpoints come from each backend's usual chain (for S3: ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` and the AWS config files), never
from run config, so they never reach logs or the catalog."""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

import fsspec
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
    that serves them."""
    try:
        return url_to_fs(str(location))
    except (ImportError, ValueError) as exc:
        raise StorageError(
            f"cannot open {location!r}: no filesystem for {scheme_of(location)!r} URLs is "
            f"installed ({exc})"
        ) from exc


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
    if not is_remote(location):
        with open(local_path(location), "rb") as handle:
            handle.seek(start)
            return handle.read(end - start)
    fs, path = filesystem(location)
    return fs.cat_file(path, start=start, end=end)


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
_MTIME_KEYS = ("LastModified", "mtime", "updated", "last_modified", "created")


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

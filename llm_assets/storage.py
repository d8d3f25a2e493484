"""Where data lives: local paths and object-storage URLs (``s3://``, ``gs://``, ``file://``...)
behind one fsspec filesystem, and errors that name the bucket and key.

Credentials and endpoints come from each backend's usual chain (for S3: ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` and the AWS config files), never
from run config, so they never reach logs or the catalog."""

from __future__ import annotations

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

"""A real S3 API on loopback for the object-storage tests: moto's standalone server, started once
per test process, spoken to over HTTP through the same code paths users run (s3fs, boto3).

The ``s3`` fixture points the standard AWS environment at it (``AWS_ENDPOINT_URL`` and static
keys), so code under test finds it the way users' code finds a real endpoint, and hands the test
an ``S3`` helper with a fresh bucket of its own."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""Static credentials moto accepts; no profile or config file of the machine is read."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_up(url: str, process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/moto-api/", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto_server did not answer on {url} within {timeout_s:.0f} s")


@contextlib.contextmanager
def moto_server(log: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 for the block, its output in ``log``; yields its URL. (The
    tests' fixtures, and ``benchmarks/object_storage.py``.)"""
    port = _free_port()
    moto = Path(sys.executable).with_name("moto_server")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(moto), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out, env=env
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> str:
    """The URL of a moto S3 server on 127.0.0.1, alive for the whole test process."""
    with moto_server(tmp_path_factory.mktemp("moto") / "server.log") as url:
        yield url


@pytest.fixture(scope="session")
def s3_denying_endpoint(tmp_path_factory) -> str:
    """A moto S3 server that checks credentials: it knows none, so every request is refused
    with 403 (access denied), as a real endpoint refuses keys it does not know."""
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    with moto_server(tmp_path_factory.mktemp("moto-auth") / "server.log", env) as url:
        yield url


def forget_filesystems() -> None:
    """Drop fsspec's cached S3 filesystems: each holds a client made for the endpoint and keys of
    the environment it was created in, which a test that changes them must not reuse."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@dataclass
class S3:
    """A bucket of the test's own on the loopback server, and the client to fill and read it."""

    endpoint: str
    bucket: str

    @property
    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint)

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}"

    def upload_folder(self, folder: Path, prefix: str) -> str:
        """Uploads every file under ``folder`` to ``prefix``; returns its ``s3://`` URL."""
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            key = f"{prefix.strip('/')}/{path.relative_to(folder).as_posix()}"
            self.client.upload_file(str(path), self.bucket, key)
        return self.url(prefix.strip("/"))

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


def point_environment_at(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The standard AWS environment, pointed at ``endpoint`` with moto's static keys; no profile
    or config file of the machine is read."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)


def new_bucket(endpoint: str) -> S3:
    store = S3(endpoint=endpoint, bucket=f"test-{uuid.uuid4().hex[:12]}")
    store.client.create_bucket(Bucket=store.bucket)
    return store


@pytest.fixture
def s3(s3_endpoint, monkeypatch) -> S3:
    """The standard AWS environment pointed at the loopback server, and a new empty bucket."""
    point_environment_at(s3_endpoint, monkeypatch)
    return new_bucket(s3_endpoint)


@pytest.fixture(scope="module")
def s3_module(s3_endpoint) -> S3:
    """As :func:`s3`, for the tests of a module that share one bucket (and the runs that fill
    it): the environment stays pointed at the server until the module's last test ends."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        point_environment_at(s3_endpoint, monkeypatch)
        yield new_bucket(s3_endpoint)

"""Locations: local paths and URLs; object-storage errors name the bucket and key."""

from __future__ import annotations

import pytest

from llm_assets.storage import StorageError, filesystem, is_remote, storage_error


def test_local_paths_and_file_urls_are_local_and_s3_is_remote():
    assert not is_remote("/data/in")
    assert not is_remote("relative/in")
    assert not is_remote("file:///data/in")
    assert is_remote("s3://bucket/prefix")
    assert is_remote("gs://bucket/prefix")


def test_an_unknown_scheme_is_a_storage_error_naming_it():
    with pytest.raises(StorageError, match="nosuchfs"):
        filesystem("nosuchfs://bucket/x")


def test_a_missing_bucket_is_named_with_its_key(s3):
    fs, path = filesystem("s3://no-such-bucket-here/corpus/a.jsonl")
    with pytest.raises(FileNotFoundError) as caught:
        fs.open(path).read()
    message = str(storage_error(caught.value, "s3://no-such-bucket-here/corpus/a.jsonl"))
    assert "'no-such-bucket-here'" in message
    assert "'corpus/a.jsonl'" in message
    assert "no such bucket" in message


def test_an_unreachable_endpoint_says_so(monkeypatch, s3):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    import fsspec

    fs = fsspec.filesystem(
        "s3", skip_instance_cache=True, config_kwargs={"retries": {"max_attempts": 1}}
    )
    with pytest.raises(Exception) as caught:
        fs.ls(s3.bucket)
    message = str(storage_error(caught.value, f"s3://{s3.bucket}/x"))
    assert "unreachable" in message and "AWS_ENDPOINT_URL" in message

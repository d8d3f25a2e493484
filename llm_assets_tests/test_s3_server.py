"""The loopback S3 server the object-storage tests use answers through s3fs as users' code does."""

from __future__ import annotations


def test_s3fs_reads_what_boto3_uploaded_through_the_standard_environment(s3, tmp_path):
    import s3fs

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.jsonl").write_text('{"text": "hello"}\n')
    url = s3.upload_folder(tmp_path / "a", "corpus")
    assert s3.keys() == ["corpus/one.jsonl"]
    fs = s3fs.S3FileSystem()  # endpoint and keys from AWS_ENDPOINT_URL and AWS_* variables
    with fs.open(f"{url}/one.jsonl", "rb") as handle:
        assert handle.read() == b'{"text": "hello"}\n'

"""Input from object storage, materialized for real against the loopback S3 server: the shipped
sample read from a bucket gives the batches of the local run, big files are cut into shards
read by range, a rewritten object is read again and an unchanged one skipped, the store's
refusals fail the run at its first step naming bucket and key, and no credential is recorded."""

from __future__ import annotations

import uuid
from datetime import timezone
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import RAW_DOCUMENTS, TRAINING_BATCHES
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.assets.test_pipeline import _failure_message
from llm_assets_tests.conftest import SAMPLE_DIR, pipeline_run_config
from llm_assets_tests.s3 import S3, forget_filesystems
from llm_assets_tests.test_golden import _digests

_VALIDATION = "part-validation-00000.parquet"
FOOTER_INPUT, FOOTER_SOURCE, FOOTER_CREATED = (
    b"llm_assets.input_fingerprint",
    b"llm_assets.source_fingerprint",
    b"llm_assets.created_at",
)
ROWS_PER_SHARD = 1000
"""wiki_sample.jsonl's 2,500 lines are three raw shards."""
KEY_ID = "AKIALLMASSETSTEST01"
SECRET = "s3cr3t-llm-assets-" + uuid.uuid4().hex
"""Credentials of the runs here (moto takes any): none may be found in what a run records."""


def _materialize(input_dir: str, root: Path, backend: str = "in_process", **kwargs):
    return dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={
            "compute": ComputeResource(backend=backend, workers=2),
            "warehouse": WarehouseResource(root=str(root)),
        },
        run_config=pipeline_run_config(input_dir, rows_per_shard=ROWS_PER_SHARD),
        raise_on_error=False,
        **kwargs,
    )


def ingest_config(input_dir: str, **settings) -> dict:
    """Run config of a run of ``raw_documents`` alone."""
    return {"ops": {RAW_DOCUMENTS: {"config": {"input_dir": input_dir, **settings}}}}


def _batches(root: Path) -> dict[str, tuple[pa.Table, dict[bytes, bytes]]]:
    """Current training batch file (relative to the root) -> its rows and schema metadata."""
    catalog = WarehouseResource(root=str(root)).catalog()
    files = {}
    for shard in catalog.current_shards(TRAINING_BATCHES):
        table = pq.read_table(shard.path)
        files[Path(shard.path).name] = (table, dict(table.schema.metadata))
    return files


@pytest.fixture(scope="module")
def runs(s3_module: S3, tmp_path_factory):
    """The sample read from its folder (in process) and from a bucket (two worker processes,
    which open the objects themselves), with credentials of the module's own."""
    base = tmp_path_factory.mktemp("s3input")
    local = _materialize(str(SAMPLE_DIR), base / "local")
    assert local.success
    url = s3_module.upload_folder(SAMPLE_DIR, "sample")
    instance = dg.DagsterInstance.ephemeral()
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        forget_filesystems()
        remote = _materialize(url, base / "remote", "multiprocess", instance=instance)
        forget_filesystems()
    assert remote.success
    return {"base": base, "url": url, "remote": remote, "instance": instance}


def test_the_sample_in_a_bucket_gives_the_batches_of_the_local_run(runs, s3_module):
    base = runs["base"]
    assert _digests(base / "local" / "catalog.duckdb") == _digests(
        base / "remote" / "catalog.duckdb"
    )  # every stage's rows and rejects
    local, remote = _batches(base / "local"), _batches(base / "remote")
    assert sorted(local) == sorted(remote) == ["part-train-00000.parquet", _VALIDATION]
    for name, (table, metadata) in local.items():
        remote_table, remote_metadata = remote[name]
        assert table.equals(remote_table)
        differ = {key for key in metadata.keys() | remote_metadata.keys()}
        differ = {key for key in differ if metadata.get(key) != remote_metadata.get(key)}
        # The input's versions (mtimes, ETags) and its newest write time, and nothing else.
        assert differ <= {FOOTER_INPUT, FOOTER_SOURCE, FOOTER_CREATED}
    created = remote["part-train-00000.parquet"][1][FOOTER_CREATED].decode()
    objects = s3_module.client.list_objects_v2(Bucket=s3_module.bucket, Prefix="sample/")
    newest = max(obj["LastModified"] for obj in objects["Contents"])
    assert created == newest.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_big_jsonl_object_is_cut_into_shards_and_lineage_names_the_urls(runs):
    catalog = WarehouseResource(root=str(runs["base"] / "remote")).catalog()
    shards = catalog.current_shards(RAW_DOCUMENTS)
    inputs = {shard.shard: shard.input_shards for shard in shards}
    wiki = [name for name in inputs if name.startswith("wiki_sample.jsonl")]
    assert len(wiki) == 3
    assert all(inputs[name] == (f"{runs['url']}/wiki_sample.jsonl",) for name in wiki)
    assert {url for urls in inputs.values() for url in urls} == {
        f"{runs['url']}/{path.name}" for path in SAMPLE_DIR.iterdir()
    }
    # Line ranges, each read by range and numbered as in the whole file.
    lines = [pq.read_table(s.path, columns=["source_line"])[0] for s in shards if s.shard in wiki]
    assert [(c[0].as_py(), c[-1].as_py()) for c in lines] == [(1, 1000), (1001, 2000), (2001, 2500)]


def test_no_credential_reaches_the_catalog_the_run_config_or_the_logs(runs):
    remote, instance = runs["remote"], runs["instance"]
    catalog_bytes = (runs["base"] / "remote" / "catalog.duckdb").read_bytes()
    run = instance.get_run_by_id(remote.run_id)
    logs = " ".join(str(event) for event in instance.all_logs(remote.run_id))
    assert runs["url"] in logs  # the logs do name the input
    for secret in (SECRET, KEY_ID):
        assert secret.encode() not in catalog_bytes
        assert secret not in str(run.run_config) and secret not in str(run.tags)
        assert secret not in logs


def test_a_rewritten_object_is_read_again_and_the_others_are_skipped(runs, s3_module):
    """Last in the module: it changes the bucket the runs above read."""
    root = runs["base"] / "remote"

    def ingest():
        result = dg.materialize(
            PIPELINE_ASSET_DEFS,
            resources={
                "compute": ComputeResource(),
                "warehouse": WarehouseResource(root=str(root)),
            },
            run_config=ingest_config(runs["url"], rows_per_shard=ROWS_PER_SHARD),
            selection=[RAW_DOCUMENTS],
        )
        metadata = result.asset_materializations_for_node(RAW_DOCUMENTS)[0].metadata
        return metadata["shards_computed"].value, metadata["shards_reused"].value

    computed, skipped = ingest()
    assert computed == 0 and skipped > 1
    # Same size, same name, new content: only the ETag tells.
    old = (SAMPLE_DIR / "notes.txt").read_bytes()
    s3_module.client.put_object(
        Bucket=s3_module.bucket, Key="sample/notes.txt", Body=old.replace(b"a", b"b")
    )
    assert ingest() == (1, skipped - 1)


@pytest.fixture
def fresh_filesystems():
    """The s3fs clients are made again for the environment the test sets, and after it."""
    forget_filesystems()
    yield
    forget_filesystems()


def _fails_first_naming(result, *parts: str) -> str:
    assert not result.success
    failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failed == [RAW_DOCUMENTS]
    message = _failure_message(result)
    for part in parts:
        assert part in message
    return message


def test_no_such_bucket_fails_the_first_step_naming_it(s3, tmp_path):
    bucket = f"no-such-{uuid.uuid4().hex[:8]}"
    result = _materialize(f"s3://{bucket}/corpus", tmp_path)
    _fails_first_naming(result, repr(bucket), "'corpus'", "no such bucket")


def test_an_empty_prefix_fails_the_first_step_naming_it(s3, tmp_path):
    s3.client.put_object(Bucket=s3.bucket, Key="elsewhere/a.jsonl", Body=b'{"text": "x"}\n')
    result = _materialize(s3.url("corpus"), tmp_path)
    _fails_first_naming(result, repr(s3.bucket), "'corpus/'", "no object")
    # Objects that are not read, as in a folder: a marker, a hidden folder.
    for key in ("corpus/_SUCCESS", "corpus/.cache/x.bin"):
        s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"")
    result = _materialize(s3.url("corpus"), tmp_path)
    _fails_first_naming(result, "holds no input files", "['.cache/', '_SUCCESS']")


def test_access_denied_fails_the_first_step_saying_so(
    s3, s3_denying_endpoint, monkeypatch, fresh_filesystems, tmp_path
):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_denying_endpoint)
    result = _materialize(s3.url("corpus"), tmp_path)
    message = _fails_first_naming(result, repr(s3.bucket), "access denied", "AWS_ACCESS_KEY_ID")
    assert "testing" not in message.replace("AWS_", "")  # the key is not quoted back


def test_an_unreachable_endpoint_fails_the_first_step_saying_so(
    s3, monkeypatch, fresh_filesystems, tmp_path
):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's retries would take seconds
    result = _materialize(s3.url("corpus"), tmp_path)
    _fails_first_naming(result, repr(s3.bucket), "unreachable", "AWS_ENDPOINT_URL")


def test_an_object_gone_after_the_listing_fails_its_shard_naming_it(s3, tmp_path):
    """A shard's task opens its object itself: deleted since the plan, the task fails with the
    bucket and key, and writes nothing."""
    from llm_assets.kernels.ingest.read import IngestSpec
    from llm_assets.stages.raw_documents import IngestTask, run_ingest
    from llm_assets.storage import StorageError

    task = IngestTask(
        key="gone-00000",
        path=s3.url("corpus/gone.jsonl"),
        source_file="gone.jsonl",
        spec=IngestSpec(),
        output_path=str(tmp_path / "part-gone-00000.parquet"),
        rejects_path=str(tmp_path / "rejects" / "part-gone-00000.parquet"),
        input_fingerprint="x",
        byte_range=(0, 100),
    )
    with pytest.raises(StorageError, match=rf"bucket '{s3.bucket}', key 'corpus/gone.jsonl'"):
        run_ingest(task)
    assert not (tmp_path / "part-gone-00000.parquet").exists()

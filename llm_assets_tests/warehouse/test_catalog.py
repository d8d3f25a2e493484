"""The DuckDB catalog: shard rows, current shards, SQL views, allow-listed names, locking."""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import replace

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_assets.kernels.schema import rejects_table
from llm_assets.warehouse.catalog import (
    INSERT_CHUNK_ROWS,
    Catalog,
    CatalogLockedError,
    CatalogUnreadableError,
    ShardRecord,
    insert_values,
)


def _record(tmp_path, shard, rows, rejected=0):
    path = tmp_path / f"part-{shard}.parquet"
    pq.write_table(pa.table({"doc_id": [f"{shard}{i}" for i in range(rows)]}), path)
    rejects_path = tmp_path / f"rejects-{shard}.parquet"
    pq.write_table(
        rejects_table(
            doc_ids=[f"r{i}" for i in range(rejected)],
            source_files=["f.jsonl"] * rejected,
            source_lines=list(range(1, rejected + 1)),
            stage="ingest",
            reasons=["invalid_json"] * rejected,
        ),
        rejects_path,
    )
    return ShardRecord(
        asset="raw_documents",
        fingerprint="fp",
        shard=shard,
        path=str(path),
        rejects_path=str(rejects_path),
        rows_in=rows + rejected,
        rows_out=rows,
        rows_rejected=rejected,
        bytes=path.stat().st_size,
        checksum="c" + shard,
        input_fingerprint="in" + shard,
        input_shards=("f.jsonl",),
    )


def _materialize(catalog, records, run="run1"):
    catalog.record_shards(records)
    catalog.record_materialization(
        materialization_id=f"{run}:raw_documents",
        asset="raw_documents",
        fingerprint="fp",
        run_id=run,
        backend="in_process",
        config={"k": 1},
        code_version="1",
        started_at=time.time() - 1,
        finished_at=time.time(),
        shards=records,
        shards_skipped=0,
    )


def test_current_shards_views_and_lineage(tmp_path):
    catalog = Catalog(tmp_path / "catalog.duckdb")
    records = [_record(tmp_path, "b", 3, 1), _record(tmp_path, "a", 2, 2)]
    _materialize(catalog, records)
    current = catalog.current_shards("raw_documents")
    assert [r.shard for r in current] == ["b", "a"]  # the planned order, not alphabetical
    assert current[0].input_shards == ("f.jsonl",)
    assert catalog.query("SELECT count(*) FROM raw_documents")[0][0] == 5
    assert catalog.query("SELECT count(*) FROM raw_documents_rejects")[0][0] == 3
    assert catalog.query("SELECT count(*) FROM rejects")[0][0] == 3
    row = catalog.query("SELECT rows_in, rows_out, rows_rejected FROM materializations")[0]
    assert row == (8, 5, 3)
    # a new materialization replaces the current set
    _materialize(catalog, [records[1]], run="run2")
    assert [r.shard for r in catalog.current_shards("raw_documents")] == ["a"]
    assert catalog.query("SELECT count(*) FROM raw_documents")[0][0] == 2
    assert catalog.query("SELECT count(*) FROM shards")[0][0] == 2
    # the file can be opened by the duckdb client read-only, as the README shows
    with duckdb.connect(str(catalog.path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM materializations").fetchone()[0] == 2


def test_stage_shards_lists_a_stage_folder_current_or_not(tmp_path):
    """What a re-run looks its finished shards up in: every shard recorded under the stage
    fingerprint, also those no materialization made current (an intermediate phase, a config
    used before)."""
    catalog = Catalog(tmp_path / "catalog.duckdb")
    assert catalog.stage_shards("raw_documents", "fp") == []  # no catalog file yet
    records = [_record(tmp_path, "b", 3, 1), _record(tmp_path, "a", 2, 2)]
    _materialize(catalog, records)
    other = replace(_record(tmp_path, "c", 1), fingerprint="other")
    catalog.record_shards([other])  # recorded, never made current
    assert [r.shard for r in catalog.stage_shards("raw_documents", "fp")] == ["a", "b"]
    assert catalog.stage_shards("raw_documents", "other") == [other]
    assert catalog.stage_shards("tokenized_documents", "fp") == []
    assert [r.shard for r in catalog.current_shards("raw_documents")] == ["b", "a"]


def test_asset_names_are_allow_listed(tmp_path):
    catalog = Catalog(tmp_path / "catalog.duckdb")
    with pytest.raises(ValueError, match="not a pipeline asset"):
        catalog.current_shards("raw_documents; DROP TABLE shards")
    with pytest.raises(ValueError, match="not a pipeline asset"):
        catalog.stage_shards("raw_documents' OR 1=1 --", "fp")


def _hold_lock(path, seconds, ready):
    con = duckdb.connect(path)
    ready.set()
    time.sleep(seconds)
    con.close()


def test_locked_catalog_waits_then_fails_with_a_clear_message(tmp_path):
    path = str(tmp_path / "catalog.duckdb")
    duckdb.connect(path).close()
    ready = multiprocessing.get_context("spawn").Event()
    holder = multiprocessing.get_context("spawn").Process(target=_hold_lock, args=(path, 4, ready))
    holder.start()
    try:
        ready.wait(30)
        with (
            pytest.raises(CatalogLockedError, match="in use by another process"),
            Catalog(path, lock_timeout_s=0.5).connect(),
        ):
            pass
        # a patient caller gets in once the other process lets go
        with Catalog(path, lock_timeout_s=30).connect() as con:
            assert con.execute("SELECT 1").fetchone() == (1,)
    finally:
        holder.join()


@pytest.mark.parametrize("damage", ["garbage", "empty", "folder"])
def test_a_damaged_catalog_is_reported_as_such_at_once(tmp_path, damage):
    """A catalog DuckDB cannot open (not a database, an empty file, a folder) fails at once, saying
    so and what to do."""
    path = tmp_path / "catalog.duckdb"
    if damage == "folder":
        path.mkdir()
    else:
        path.write_bytes(b"not a duckdb file " * 500 if damage == "garbage" else b"")
    started = time.monotonic()
    with (
        pytest.raises(CatalogUnreadableError, match=r"catalog\.duckdb cannot be opened.*move"),
        Catalog(path, lock_timeout_s=120).connect(),
    ):
        pass
    assert time.monotonic() - started < 10


def test_a_warehouse_root_that_is_a_file_is_named_as_such(tmp_path):
    """A warehouse root that is a file is named as such, not a bare ``FileExistsError``."""
    (tmp_path / "warehouse").write_text("not a folder\n")
    with (
        pytest.raises(NotADirectoryError, match=r"warehouse root .*warehouse is a file, not a"),
        Catalog(tmp_path / "warehouse" / "catalog.duckdb").connect(),
    ):
        pass


def test_a_session_reuses_one_connection_and_rolls_back_a_failed_write(tmp_path):
    from llm_assets.warehouse.catalog import Catalog

    catalog = Catalog(tmp_path / "c.duckdb")
    with catalog.session():
        with catalog.connect() as first, catalog.connect() as second:
            assert first is second
        with catalog.session(), catalog.connect() as inner:  # re-entrant
            assert inner is first
        with pytest.raises(AttributeError):  # fails inside the transaction
            catalog.record_materialization(
                materialization_id="m",
                asset="raw_documents",
                fingerprint="f",
                run_id="r",
                backend="in_process",
                config={},
                code_version="1",
                started_at=0.0,
                finished_at=1.0,
                shards=[None],  # type: ignore[list-item]
                shards_skipped=0,
            )
        assert catalog.query("SELECT count(*) FROM materializations") == [(0,)]
    with catalog.connect() as fresh:
        assert fresh is not first


def test_insert_values_writes_every_row_across_chunks_and_replaces_by_key(tmp_path):
    """Multi-row VALUES in chunks: 1,201 rows (three statements) all land, in one call; an
    INSERT OR REPLACE of a row recorded before replaces it instead of failing on the key."""
    catalog = Catalog(tmp_path / "catalog.duckdb")
    records = [
        ShardRecord(
            asset="raw_documents",
            fingerprint="fp",
            shard=f"{i:05d}",
            path=f"/w/part-{i:05d}.parquet",
            rejects_path=None,
            rows_in=i,
            rows_out=i,
            rows_rejected=0,
            bytes=i,
            checksum=f"c{i}",
            input_fingerprint=f"in{i}",
            input_shards=(f"f{i}.jsonl",),
        )
        for i in range(2 * INSERT_CHUNK_ROWS + 201)
    ]
    catalog.record_shards(records[:10])
    catalog.record_shards(records)
    with catalog.connect(read_only=True) as con:
        count, rows_sum, last = con.execute(
            "SELECT count(*), sum(rows_in), max(shard) FROM shards"
        ).fetchone()
        first = con.execute("SELECT input_shards FROM shards WHERE shard = '00000'").fetchone()
    assert count == len(records)
    assert rows_sum == sum(range(len(records)))
    assert last == f"{len(records) - 1:05d}"
    assert first == ('["f0.jsonl"]',)
    with duckdb.connect() as con:
        con.execute("CREATE TABLE t (a INTEGER, ts TIMESTAMP)")
        insert_values(con, "INSERT INTO t", [[1, 0.0], [2, 60.0]], "?, to_timestamp(?)")
        insert_values(con, "INSERT INTO t", [])
        assert con.execute("SELECT a, epoch(ts) FROM t ORDER BY a").fetchall() == [
            (1, 0.0),
            (2, 60.0),
        ]

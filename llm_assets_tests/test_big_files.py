"""One big input file that cannot be cut into line ranges when read (a ``.jsonl.gz``, a CSV, a
Parquet file) is one raw shard; the stage after ``raw_documents`` cuts it into parts of whole row
groups, so every later stage spreads it over the workers, logs progress per part and restarts
per part. The output is the same documents and the same training batches as the same rows in a
plain ``.jsonl`` file (which ingest cuts into line ranges)."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.compute.backends import make_backend
from llm_assets.constants import (
    FILTERED_DOCUMENTS,
    NORMALIZED_DOCUMENTS,
    RAW_DOCUMENTS,
    TOKENIZED_DOCUMENTS,
)
from llm_assets.datagen.corpus import generate_records
from llm_assets.datagen.writers import write_corpus
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.filters.length import LengthFilterSpec
from llm_assets.kernels.ingest.read import IngestSpec
from llm_assets.kernels.normalize import NormalizeSpec
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.stages.engine import StageContext, StageInputError, StageReport
from llm_assets.stages.filtered_documents.driver import run_filtered_documents
from llm_assets.stages.normalized_documents import run_normalized_documents
from llm_assets.stages.raw_documents import run_raw_documents
from llm_assets.stages.shard_io import row_group_parts
from llm_assets.stages.tokenized_documents import run_tokenized_documents
from llm_assets.stages.training_batches.driver import run_training_batches
from llm_assets.warehouse.catalog import Catalog
from llm_assets.warehouse.shards import fingerprint

ROWS = 2_400
ROWS_PER_SHARD = 500
INGEST = IngestSpec(batch_rows=200)  # raw row groups of 200 rows


def _metadata(tmp_path: Path, groups: list[int]) -> pq.FileMetaData:
    """The footer of a Parquet file whose row groups hold ``groups`` rows."""
    path = tmp_path / "groups.parquet"
    with pq.ParquetWriter(path, pa.schema([("x", pa.int64())])) as writer:
        start = 0
        for rows in groups:
            writer.write_table(pa.table({"x": pa.array(range(start, start + rows), pa.int64())}))
            start += rows
    return pq.read_metadata(path)


@pytest.mark.parametrize(
    ("groups", "max_rows", "expected"),
    [
        ([200] * 12, 500, [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 12)]),
        ([200] * 3, 600, [(0, 3)]),  # not more rows than max_rows: whole
        ([5000], 100, [(0, 1)]),  # one row group is never split
        ([], 100, [(0, 0)]),  # no row group: one empty part
        ([100, 100, 5000, 100], 1000, [(0, 2), (2, 3), (3, 4)]),  # a big group stands alone
    ],
)
def test_row_group_parts(tmp_path, groups, max_rows, expected):
    assert row_group_parts(_metadata(tmp_path, groups), max_rows) == expected


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(st.integers(1, 50), min_size=1, max_size=30),
    max_rows=st.integers(1, 400),
)
def test_row_group_parts_cover_every_group_once_in_order(tmp_path_factory, groups, max_rows):
    parts = row_group_parts(_metadata(tmp_path_factory.mktemp("g"), groups), max_rows)
    assert parts[0][0] == 0 and parts[-1][1] == len(groups)
    assert all(a < b for a, b in parts)  # no empty part
    assert all(parts[i][1] == parts[i + 1][0] for i in range(len(parts) - 1))  # contiguous
    for a, b in parts:  # at most max_rows, unless one group alone is more
        assert sum(groups[a:b]) <= max_rows or b - a == 1
    for a, b in parts[:-1]:  # no part could have taken the next group too
        assert sum(groups[a : b + 1]) > max_rows


def _ctx(root: Path, backend: str = "in_process") -> StageContext:
    return StageContext(
        warehouse_root=root,
        catalog=Catalog(root / "catalog.duckdb"),
        compute=make_backend(backend, workers=2),
        log=logging.getLogger("test"),
        backend=backend,
    )


def _run_all(
    ctx: StageContext, input_dir: Path, rows_per_shard: int = ROWS_PER_SHARD
) -> dict[str, StageReport]:
    reports = {
        RAW_DOCUMENTS: run_raw_documents(ctx, input_dir, INGEST, rows_per_shard),
        NORMALIZED_DOCUMENTS: run_normalized_documents(ctx, NormalizeSpec()),
        TOKENIZED_DOCUMENTS: run_tokenized_documents(ctx, TokenizerSpec()),
        FILTERED_DOCUMENTS: run_filtered_documents(ctx, LengthFilterSpec(min_tokens=10)),
    }
    reports["training_batches"] = run_training_batches(ctx, BatchSpec())
    return reports


def _outputs(ctx: StageContext) -> dict[str, list]:
    """Every stage's documents and the training batches' rows, in a layout-free order."""
    query = ctx.catalog.query
    out = {
        asset: query(f"SELECT doc_id, text FROM {asset} ORDER BY doc_id")
        for asset in (RAW_DOCUMENTS, NORMALIZED_DOCUMENTS, FILTERED_DOCUMENTS)
    }
    out["ids"] = query(f"SELECT doc_id, input_ids FROM {TOKENIZED_DOCUMENTS} ORDER BY doc_id")
    out["rejects"] = query(
        f"SELECT doc_id, reason FROM {FILTERED_DOCUMENTS}_rejects ORDER BY doc_id, reason"
    )
    out["batches"] = query("SELECT * FROM training_batches ORDER BY ALL")
    return out


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, Path]:
    """The same generated rows as one plain JSONL file and as one gzip-compressed one."""
    root = tmp_path_factory.mktemp("big")
    rows = list(generate_records(ROWS, seed=3))
    folders = {}
    for suffix in (".jsonl", ".jsonl.gz"):
        folder = root / suffix.strip(".").replace(".", "-")
        write_corpus(folder / f"corpus{suffix}", rows)
        folders[suffix] = folder
    return folders


def test_a_big_compressed_file_is_cut_after_ingest_with_the_same_output(tmp_path, corpora):
    """Cut into 6 parts after ingest, the gzip file gives what it gave whole (rows_per_shard at
    least its rows: one shard at every stage, as before parts existed), batches included; and
    its documents are those of the same rows as plain JSONL (cut into line ranges at ingest)."""
    whole, cut = _ctx(tmp_path / "whole"), _ctx(tmp_path / "cut")
    one = _run_all(whole, corpora[".jsonl.gz"], rows_per_shard=ROWS)
    parts = _run_all(cut, corpora[".jsonl.gz"])
    assert all(len(one[asset].shards) == 1 for asset in one if asset != "training_batches")
    assert len(parts[RAW_DOCUMENTS].shards) == 1  # gzip cannot be cut when read...
    raw_key = parts[RAW_DOCUMENTS].shards[0].shard
    for asset in (NORMALIZED_DOCUMENTS, TOKENIZED_DOCUMENTS, FILTERED_DOCUMENTS):
        keys = [s.shard for s in parts[asset].shards]  # ...but the next stages are: 6 parts
        assert keys == [f"{raw_key}.p{i:05d}" for i in range(6)], asset
    assert {s.rows_in for s in parts[NORMALIZED_DOCUMENTS].shards} == {400}  # 2 row groups
    assert _outputs(cut) == _outputs(whole)
    assert parts["training_batches"].rows_out == one["training_batches"].rows_out

    plain = _ctx(tmp_path / "plain")
    assert len(_run_all(plain, corpora[".jsonl"])[RAW_DOCUMENTS].shards) == 5  # line ranges
    documents = "SELECT source_line, text FROM filtered_documents ORDER BY source_line"
    assert plain.catalog.query(documents) == cut.catalog.query(documents)


def test_parts_are_reused_and_a_lost_part_alone_is_computed_again(tmp_path, corpora):
    ctx = _ctx(tmp_path / "wh")
    _run_all(ctx, corpora[".jsonl.gz"])
    first = _outputs(ctx)
    again = _run_all(ctx, corpora[".jsonl.gz"])
    assert all(report.computed == 0 for report in again.values())
    # As a run killed in the middle of normalized_documents leaves it: one part missing.
    Path(again[NORMALIZED_DOCUMENTS].shards[3].path).unlink()
    after = run_normalized_documents(ctx, NormalizeSpec())
    assert (after.computed, after.skipped) == (1, 5)
    assert run_tokenized_documents(ctx, TokenizerSpec()).computed == 0  # same checksum
    assert _outputs(ctx) == first


def test_a_shard_no_bigger_than_rows_per_shard_keeps_its_key_and_fingerprint(tmp_path, corpora):
    """Shards that need no cut are planned as before splitting existed, so an upgraded
    warehouse reuses them rather than computing them again."""
    ctx = _ctx(tmp_path / "wh")
    raw = run_raw_documents(ctx, corpora[".jsonl"], INGEST, ROWS_PER_SHARD)
    normalized = run_normalized_documents(ctx, NormalizeSpec())
    assert [s.shard for s in normalized.shards] == [s.shard for s in raw.shards]
    assert [s.input_fingerprint for s in normalized.shards] == [
        fingerprint(s.checksum) for s in raw.shards
    ]


def test_a_big_file_is_cut_by_the_rows_per_shard_it_was_ingested_with(tmp_path, corpora):
    ctx = _ctx(tmp_path / "wh")
    run_raw_documents(ctx, corpora[".jsonl.gz"], INGEST, rows_per_shard=ROWS)
    assert len(run_normalized_documents(ctx, NormalizeSpec()).shards) == 1
    run_raw_documents(ctx, corpora[".jsonl.gz"], INGEST, rows_per_shard=1000)
    assert len(run_normalized_documents(ctx, NormalizeSpec()).shards) == 3


def test_the_parts_run_on_a_process_pool_with_the_same_output(tmp_path, corpora):
    pool = _ctx(tmp_path / "mp", "multiprocess")
    try:
        reports = _run_all(pool, corpora[".jsonl.gz"])
    finally:
        pool.compute.close()
    assert len(reports[TOKENIZED_DOCUMENTS].shards) == 6
    reference = _ctx(tmp_path / "in")
    _run_all(reference, corpora[".jsonl.gz"])
    assert _outputs(pool) == _outputs(reference)


def test_a_big_parquet_file_is_cut_into_row_groups_when_read(tmp_path, corpora):
    """A Parquet file of several row groups is read as several raw shards (whole row groups,
    about rows_per_shard rows each), with the output of reading it whole; a file of one row
    group is one raw shard, cut after ingest instead."""
    rows = list(generate_records(ROWS, seed=3))
    groups, single = tmp_path / "groups", tmp_path / "single"
    write_corpus(groups / "corpus.parquet", rows)
    table = pq.read_table(groups / "corpus.parquet")
    pq.write_table(table, groups / "corpus.parquet", row_group_size=300)
    single.mkdir()
    pq.write_table(table, single / "corpus.parquet", row_group_size=ROWS)
    cut, whole, one_group = (_ctx(tmp_path / name) for name in ("cut", "whole", "one"))
    parts = _run_all(cut, groups)
    _run_all(whole, groups, rows_per_shard=ROWS)
    # 8 groups of 300 rows: one per raw shard (two would be more than 500)
    assert [s.rows_in for s in parts[RAW_DOCUMENTS].shards] == [300] * 8
    assert len(parts[NORMALIZED_DOCUMENTS].shards) == 8  # not cut again
    assert _outputs(cut) == _outputs(whole)
    single_run = _run_all(one_group, single)
    assert len(single_run[RAW_DOCUMENTS].shards) == 1
    assert len(single_run[NORMALIZED_DOCUMENTS].shards) == 6  # 2 raw row groups of 200 each
    documents = "SELECT source_line, text FROM filtered_documents ORDER BY source_line"
    assert one_group.catalog.query(documents) == cut.catalog.query(documents)


def test_a_damaged_big_raw_shard_fails_naming_it_and_what_to_do(tmp_path, corpora):
    """Cutting a raw shard reads its footer: a shard cut short since it was recorded fails with the
    stage's own error naming it, and materializing raw_documents again repairs it."""
    ctx = _ctx(tmp_path / "wh")
    raw = run_raw_documents(ctx, corpora[".jsonl.gz"], INGEST, ROWS_PER_SHARD)
    path = Path(raw.shards[0].path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(StageInputError, match="changed or damaged since they were recorded"):
        run_normalized_documents(ctx, NormalizeSpec())
    assert run_raw_documents(ctx, corpora[".jsonl.gz"], INGEST, ROWS_PER_SHARD).computed == 1
    assert len(run_normalized_documents(ctx, NormalizeSpec()).shards) == 6


def test_a_json_lines_file_named_json_is_cut_into_line_ranges(tmp_path, corpora):
    """``Dataset.to_json`` writes JSON Lines as ``.json``: cut into line ranges like ``.jsonl``,
    with the same documents; a ``.json`` file holding a JSON array is still read whole, its one
    reject saying how to convert it."""
    folder = tmp_path / "json"
    folder.mkdir()
    (folder / "corpus.json").write_bytes((corpora[".jsonl"] / "corpus.jsonl").read_bytes())
    (folder / "array.json").write_text('[{"text": "one"},\n{"text": "two"}]\n' * 1)
    ctx = _ctx(tmp_path / "wh")
    raw = run_raw_documents(ctx, folder, INGEST, ROWS_PER_SHARD)
    assert Counter(s.shard.split("-")[0] for s in raw.shards) == {"corpus.json": 5, "array.json": 1}
    assert ctx.catalog.query("SELECT reason FROM raw_documents_rejects WHERE "
                             "source_file = 'array.json'") == [("corrupt_file",)]  # fmt: skip
    plain = _ctx(tmp_path / "plain")
    run_raw_documents(plain, corpora[".jsonl"], INGEST, ROWS_PER_SHARD)
    documents = "SELECT source_line, text, metadata FROM raw_documents WHERE source_file LIKE "
    assert ctx.catalog.query(documents + "'corpus.json%' ORDER BY 1") == plain.catalog.query(
        documents + "'corpus.json%' ORDER BY 1"
    )

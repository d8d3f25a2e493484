"""The whole asset graph, materialized for real on the shipped sample: every backend, restart,
bad input, the checks, and the SQL views a user queries."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS, validate_run_config
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import (
    FILTERED_DOCUMENTS,
    NORMALIZED_DOCUMENTS,
    PIPELINE_ASSETS,
    RAW_DOCUMENTS,
    TOKENIZED_DOCUMENTS,
    TRAINING_BATCHES,
)
from llm_assets.kernels.batching.metadata import length_histogram
from llm_assets.stages.engine import StageInputError
from llm_assets.stages.training_batches import driver as batches_driver
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.conftest import REPO, pipeline_run_config

PLANTED_REJECTS = {
    "invalid_json",
    "invalid_utf8",
    "missing_text",
    "non_string_text",
    "not_an_object",
}


def materialize(
    input_dir: Path,
    root: Path,
    backend: str = "in_process",
    instance: dg.DagsterInstance | None = None,
    **ops,
):
    return dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={
            "compute": ComputeResource(backend=backend, workers=2),
            "warehouse": WarehouseResource(root=str(root)),
        },
        run_config=pipeline_run_config(input_dir, **ops),
        raise_on_error=False,
        instance=instance,
    )


def output_checksums(root: Path) -> dict[str, list[tuple[str, str]]]:
    """Asset -> [(shard, sha256)] of the current output and rejects files, in catalog order."""
    catalog = WarehouseResource(root=str(root)).catalog()
    result = {}
    for asset in PIPELINE_ASSETS:
        files = []
        for shard in catalog.current_shards(asset):
            for path in (shard.path, shard.rejects_path):
                if path:
                    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                    files.append((Path(path).relative_to(root).as_posix(), digest))
        result[asset] = files
    return result


def materializations(result) -> dict[str, dict]:
    return {
        event.asset_key.to_user_string(): event.step_materialization_data.materialization.metadata
        for event in result.get_asset_materialization_events()
    }


@pytest.fixture(scope="module")
def in_process_run(tmp_path_factory):
    """One in-process materialization of the sample, shared by the read-only tests below."""
    import shutil

    from llm_assets_tests.conftest import SAMPLE_DIR

    base = tmp_path_factory.mktemp("inproc")
    shutil.copytree(SAMPLE_DIR, base / "input")
    result = materialize(base / "input", base / "warehouse")
    return base, result


def test_materialize_all_succeeds_and_checks_pass(in_process_run):
    _base, result = in_process_run
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert len(checks) == len(PIPELINE_ASSETS)
    assert all(c.passed for c in checks), [c.metadata for c in checks if not c.passed]
    meta = materializations(result)
    assert set(meta) == set(PIPELINE_ASSETS)
    assert meta["raw_documents"]["dagster/row_count"].value > 3000
    assert "invalid_json" in meta["raw_documents"]["reject_reasons"].value
    assert "too_few_tokens" in meta["filtered_documents"]["reject_reasons"].value
    assert meta["training_batches"]["padding_fraction"].value < 0.0015 * 100  # at most a few blocks
    # The length histogram summed from the scatter manifests equals one over the documents in SQL
    # (seq_len 256 in the test run config).
    catalog = WarehouseResource(root=str(_base / "warehouse")).catalog()
    lengths = np.array([n for (n,) in catalog.query("SELECT n_tokens FROM filtered_documents")])
    # As [bin, documents] pairs in length order.
    histogram = length_histogram(lengths, 256)
    assert meta["training_batches"]["length_histogram"].value == [
        [k, v] for k, v in histogram.items()
    ]


def test_every_asset_says_where_its_time_went(in_process_run):
    """seconds_by_part: the shard tasks' read / compute / write / commit seconds, in the
    materialization's metadata and in the catalog's record of it."""
    base, result = in_process_run
    catalog = WarehouseResource(root=str(base / "warehouse")).catalog()
    for asset, meta in materializations(result).items():
        parts = meta["seconds_by_part"].value
        assert list(parts) == ["read", "compute", "write", "commit"], asset
        assert all(v > 0 for k, v in parts.items() if k != "read" or asset != RAW_DOCUMENTS), asset
        # In one process the parts happen one after another inside the stage's wall time.
        assert sum(parts.values()) <= meta["seconds"].value + 0.01, asset
        (recorded,) = catalog.query(
            "SELECT extra->>'$.seconds_by_part' FROM materializations WHERE materialization_id = ?",
            [f"{result.run_id}:{asset}"],
        )
        assert json.loads(recorded[0]) == parts
    # Ingest reads no Parquet: reading and parsing the input files is its compute.
    assert materializations(result)[RAW_DOCUMENTS]["seconds_by_part"].value["read"] == 0
    # training_batches' seconds cover both phases, the scatter included, and so does the
    # catalog's record of the materialization (its start is the stage's, not the gather's).
    batches = materializations(result)[TRAINING_BATCHES]
    assert batches["seconds"].value > batches["scatter_seconds"].value > 0
    (wall,) = catalog.query(
        "SELECT wall_seconds FROM materializations WHERE materialization_id = ?",
        [f"{result.run_id}:{TRAINING_BATCHES}"],
    )
    assert wall[0] == pytest.approx(batches["seconds"].value, abs=0.01)


def test_counts_reconcile_across_the_chain_in_sql(in_process_run):
    base, _ = in_process_run
    catalog = WarehouseResource(root=str(base / "warehouse")).catalog()
    counts = {}
    for asset in PIPELINE_ASSETS[:4]:
        out = catalog.query(f"SELECT count(*) FROM {asset}")[0][0]
        rejected = catalog.query(f"SELECT count(*) FROM {asset}_rejects")[0][0]
        counts[asset] = (out, rejected)
    raw_out, _raw_rej = counts["raw_documents"]
    # The sample's whitespace-only text (wiki_sample.jsonl line 2222) is emptied by normalization.
    norm_out, norm_rej = counts["normalized_documents"]
    assert (norm_out + norm_rej, norm_rej) == (raw_out, 1)
    emptied = catalog.query(
        "SELECT source_file, source_line, reason FROM normalized_documents_rejects"
    )
    assert emptied == [("wiki_sample.jsonl", 2222, "empty_after_normalize")]
    assert counts["tokenized_documents"] == (norm_out, 0)
    filt_out, filt_rej = counts["filtered_documents"]
    assert filt_out + filt_rej == norm_out
    reasons = {r for (r,) in catalog.query("SELECT DISTINCT reason FROM raw_documents_rejects")}
    assert reasons >= PLANTED_REJECTS
    rows = catalog.query(
        "SELECT source_file, source_line, stage FROM rejects WHERE reason = 'invalid_json'"
    )
    assert rows and all(f.endswith(".jsonl") and line > 0 and s == "ingest" for f, line, s in rows)
    # every document's tokens reach the batches (packed: plus one EOS each)
    docs = catalog.query("SELECT count(*), sum(n_tokens) FROM filtered_documents")[0]
    batches = catalog.query("SELECT count(*), sum(list_sum(attention_mask)) FROM training_batches")[
        0
    ]
    assert batches[1] == docs[1] + docs[0]
    # lineage of the packed blocks: every kept document is in the doc_ids of the blocks its
    # tokens (and EOS) fill, the number of which its length gives, and blocks name nothing else
    spans = dict(
        catalog.query(
            "SELECT d, count(*) FROM (SELECT unnest(doc_ids) AS d FROM training_batches) GROUP BY d"
        )
    )
    kept = dict(catalog.query("SELECT doc_id, n_tokens FROM filtered_documents"))
    assert spans.keys() == kept.keys()
    assert all(1 <= spans[d] <= (n + 1 + 255) // 256 + 1 for d, n in kept.items())
    where = catalog.query(
        "SELECT f.source_file, f.source_line FROM training_batches b, unnest(b.doc_ids) u(d) "
        "JOIN filtered_documents f ON f.doc_id = u.d LIMIT 1"
    )
    assert where and where[0][1] > 0


def test_batches_have_schema_metadata_and_fixed_length(in_process_run):
    base, _ = in_process_run
    catalog = WarehouseResource(root=str(base / "warehouse")).catalog()
    shards = catalog.current_shards(TRAINING_BATCHES)
    splits = {Path(s.path).name.split("-")[1] for s in shards}
    assert splits == {"train", "validation"}
    meta = pq.read_schema(shards[0].path).metadata
    assert meta[b"llm_assets.layout"] == b"packed"
    assert meta[b"llm_assets.seq_len"] == b"256"
    assert meta[b"llm_assets.tokenizer.name"] == b"gpt2"
    assert pq.read_metadata(shards[0].path).row_group(0).column(0).compression == "ZSTD"
    # The shards between stages are LZ4 (written once, read once); batches and rejects ZSTD.
    for asset in (RAW_DOCUMENTS, TOKENIZED_DOCUMENTS, FILTERED_DOCUMENTS):
        shard = catalog.current_shards(asset)[0]
        assert pq.read_metadata(shard.path).row_group(0).column(0).compression == "LZ4"
    rejected = [s for s in catalog.current_shards(FILTERED_DOCUMENTS) if s.rejects_path]
    assert rejected and all(
        pq.read_metadata(s.rejects_path).row_group(0).column(0).compression == "ZSTD"
        for s in rejected
    )
    lengths = catalog.query("SELECT DISTINCT len(input_ids) FROM training_batches")
    assert lengths == [(256,)]


def test_rerun_with_unchanged_input_reuses_every_shard(in_process_run):
    base, _ = in_process_run
    before = output_checksums(base / "warehouse")
    result = materialize(base / "input", base / "warehouse")
    assert result.success
    for asset, meta in materializations(result).items():
        assert meta["shards_computed"].value == 0, asset
        assert meta["shards_reused"].value == meta["shards"].value
        if asset != TRAINING_BATCHES:  # its scatter phase is reused as a whole, without tasks
            assert set(meta["seconds_by_part"].value.values()) == {0}, asset
    assert output_checksums(base / "warehouse") == before
    # Every shard was found in the catalog, none rebuilt from its footer (which re-reads and
    # re-hashes the file): the filter's annotate phase too, whose shards are never current.
    catalog = WarehouseResource(root=str(base / "warehouse")).catalog()
    assert catalog.query("SELECT count(*) FROM shards WHERE run_id = ?", [result.run_id]) == [(0,)]
    annotated = catalog.query(
        "SELECT count(*) FROM shards s WHERE asset = ? AND NOT EXISTS (SELECT 1 FROM "
        "current_shards c WHERE c.asset = s.asset AND c.fingerprint = s.fingerprint)",
        [FILTERED_DOCUMENTS],
    )
    assert annotated[0][0] > 0  # the sample's run config deduplicates: there is such a phase


def test_each_step_opens_the_catalog_once(in_process_run, monkeypatch):
    """A step's stage, its metadata and the run summary share one connection to the catalog
    file (each opening costs ~15 ms of a run whose fixed cost issue 37 bounds)."""
    base, _ = in_process_run
    catalog_file = str(base / "warehouse" / "catalog.duckdb")
    opened = []
    connect = duckdb.connect

    def counting(database: str = ":memory:", *args, **kwargs):
        if str(database) == catalog_file:
            opened.append(database)
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", counting)
    result = materialize(base / "input", base / "warehouse")
    assert result.success
    assert len(opened) == len(materializations(result)) == 5


def test_lost_shards_are_recomputed_byte_identical(in_process_run, tmp_path):
    """A run that died part-way leaves some shards missing (and maybe a temporary file): the next
    run computes exactly those and ends byte-identical."""
    base, _ = in_process_run
    root = base / "warehouse"
    before = output_checksums(root)
    catalog = WarehouseResource(root=str(root)).catalog()
    victim = catalog.current_shards("tokenized_documents")[0]
    Path(victim.path).unlink()
    Path(victim.path + ".tmp-deadbeef").write_bytes(b"half a shard")
    for shard in catalog.current_shards(TRAINING_BATCHES)[:1]:
        Path(shard.path).unlink()
    result = materialize(base / "input", root)
    assert result.success
    meta = materializations(result)
    assert meta["tokenized_documents"]["shards_computed"].value == 1
    assert meta["raw_documents"]["shards_computed"].value == 0
    assert meta[TRAINING_BATCHES]["shards_computed"].value == 1
    assert output_checksums(root) == before
    assert not list(Path(victim.path).parent.glob("*.tmp-*"))


@pytest.mark.parametrize("damage", ["flipped", "cut"])
def test_a_damaged_shard_is_computed_again_not_reused(in_process_run, damage):
    """Bytes flipped in the middle of a finished shard, its footer intact (so its input fingerprint
    still reads): its checksum no longer matches the catalog's, so the next run computes it again
    and ends byte-identical. A shard cut short (its footer gone) is computed again too, with the
    same warning."""
    base, _ = in_process_run
    root = base / "warehouse"
    before = output_checksums(root)
    catalog = WarehouseResource(root=str(root)).catalog()
    victim = Path(catalog.current_shards("tokenized_documents")[0].path)
    data = bytearray(victim.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2000] = bytes(b ^ 0xFF for b in data[middle : middle + 2000])
    victim.write_bytes(bytes(data) if damage == "flipped" else bytes(data[:middle]))
    instance = dg.DagsterInstance.ephemeral()
    result = materialize(base / "input", root, instance=instance)
    assert result.success
    meta = materializations(result)
    assert meta["tokenized_documents"]["shards_computed"].value == 1
    assert meta["normalized_documents"]["shards_computed"].value == 0
    assert output_checksums(root) == before
    warnings = [e.user_message for e in instance.all_logs(result.run_id) if e.level == 30]
    assert any(
        "tokenized_documents: 1 finished shard file(s) changed or damaged" in m for m in warnings
    )


def test_scatter_folders_of_a_killed_run_are_removed(in_process_run):
    """A run killed mid-scatter leaves a temporary scatter folder (renamed into place only when
    complete): the next run removes it."""
    base, _ = in_process_run
    root = base / "warehouse"
    stale = root / TRAINING_BATCHES / "_scatter" / "part-x-0123.tmp-deadbeef"
    stale.mkdir(parents=True)
    (stale / "scatter.arrow").write_bytes(b"half a scatter file")
    result = materialize(base / "input", root)
    assert result.success
    assert not stale.exists()


def test_shard_written_but_never_recorded_is_recovered_from_its_footer(in_process_run):
    """A run killed between committing a shard file and recording it in the catalog: the next
    run reuses the file and records it, so the catalog lists every shard again."""
    base, _ = in_process_run
    root = base / "warehouse"
    before = output_checksums(root)
    catalog = WarehouseResource(root=str(root)).catalog()
    shards = catalog.current_shards("tokenized_documents")
    victim = shards[1]
    with catalog.connect() as con:
        con.execute(
            "DELETE FROM shards WHERE asset = ? AND shard = ?",
            ["tokenized_documents", victim.shard],
        )
    assert len(catalog.current_shards("tokenized_documents")) == len(shards) - 1
    result = materialize(base / "input", root)
    assert result.success
    assert materializations(result)["tokenized_documents"]["shards_computed"].value == 0
    assert output_checksums(root) == before


@pytest.mark.parametrize("backend", ["multiprocess", pytest.param("ray", marks=pytest.mark.slow)])
def test_every_backend_writes_identical_parquet(in_process_run, tmp_path, backend):
    base, _ = in_process_run
    result = materialize(base / "input", tmp_path / "warehouse", backend=backend)
    assert result.success
    assert output_checksums(tmp_path / "warehouse") == output_checksums(base / "warehouse")


def test_a_damaged_catalog_fails_clearly_and_a_new_one_reuses_every_shard(in_process_run, tmp_path):
    """A catalog DuckDB cannot open fails the run at its first step saying so; moved away, as the
    message says, the next run starts a new catalog and finds every finished shard by its footer:
    nothing computed again, the same bytes."""
    base, _ = in_process_run
    shutil.copytree(base / "warehouse", tmp_path / "wh")
    catalog_file = tmp_path / "wh" / "catalog.duckdb"
    catalog_file.write_bytes(b"damaged" * 1000)
    result = materialize(base / "input", tmp_path / "wh")
    assert not result.success
    message = _failure_message(result)
    assert "cannot be opened" in message and "in use by another process" not in message
    catalog_file.rename(tmp_path / "wh" / "catalog.damaged")
    result = materialize(base / "input", tmp_path / "wh")
    assert result.success
    for asset, metadata in materializations(result).items():
        if asset != TRAINING_BATCHES:
            assert metadata["shards_computed"].value == 0, asset
    assert output_checksums(tmp_path / "wh") == output_checksums(base / "warehouse")


def _materialize_only(asset: str, root: Path, config: dict) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        PIPELINE_ASSET_DEFS,
        selection=[asset],
        resources={"compute": ComputeResource(), "warehouse": WarehouseResource(root=str(root))},
        run_config={"ops": {asset: {"config": config}}},
        raise_on_error=False,
    )


@pytest.mark.parametrize(
    ("upstream", "asset", "config"),
    [
        (RAW_DOCUMENTS, NORMALIZED_DOCUMENTS, {"pii": "off"}),
        (FILTERED_DOCUMENTS, TRAINING_BATCHES, {"seq_len": 64}),
    ],
)
def test_a_shard_edited_by_hand_is_not_read_by_an_asset_materialized_alone(
    sample_input, tmp_path, upstream, asset, config
):
    """An upstream shard whose file no longer has its recorded checksum (edited or cut by hand) is
    not computed from when a downstream asset is materialized on its own with a new config: the step
    fails naming the shard and saying to materialize the upstream again. The whole job then repairs
    the shard."""
    root = tmp_path / "wh"
    assert materialize(sample_input, root).success
    shard = WarehouseResource(root=str(root)).catalog().current_shards(upstream)[0]
    table = pq.read_table(shard.path)
    pq.write_table(table.slice(0, table.num_rows // 2), shard.path)  # half the rows gone
    shutil.rmtree(root / TRAINING_BATCHES / "_scatter")  # (else the batches never read it)
    result = _materialize_only(asset, root, config)
    assert not result.success
    message = _failure_message(result)
    assert f"{upstream} shard file(s) changed or damaged" in message
    assert f"materialize {upstream} again first" in message and Path(shard.path).name in message
    assert materialize(sample_input, root).success
    assert pq.read_metadata(shard.path).num_rows == table.num_rows


def test_new_input_file_adds_shards_and_reuses_the_rest(sample_input, tmp_path):
    root = tmp_path / "warehouse"
    assert materialize(sample_input, root).success
    (sample_input / "extra.jsonl").write_text(
        '{"text": "A brand new document that arrived after the first run of the pipeline."}\n'
    )
    result = materialize(sample_input, root)
    assert result.success
    meta = materializations(result)
    assert meta["raw_documents"]["shards_computed"].value == 1
    assert meta["tokenized_documents"]["shards_computed"].value == 1
    assert meta["raw_documents"]["shards_reused"].value >= 5


def test_padded_layout_masks_padding(sample_input, tmp_path, monkeypatch):
    """Padding is masked out of the labels; the shuffle buckets of the padded layout hold a bounded
    number of padded tokens."""
    monkeypatch.setattr(batches_driver, "PADDED_TOKENS_PER_BUCKET", 16 * 1024)
    result = materialize(
        sample_input, tmp_path / "wh", training_batches={"layout": "padded", "seq_len": 64}
    )
    assert result.success
    catalog = WarehouseResource(root=str(tmp_path / "wh")).catalog()
    docs = catalog.query("SELECT count(*) FROM filtered_documents")[0][0]
    buckets = materializations(result)["training_batches"]["shuffle_buckets"].value
    assert buckets == -(-docs * 64 // (16 * 1024)) > 1
    rows = catalog.query(
        "SELECT count(*), bool_and(len(labels) = 64), "
        "sum(list_count(list_filter(labels, lambda x: x = -100))), "
        "sum(64 - list_sum(attention_mask)) FROM training_batches"
    )[0]
    assert rows[0] == docs and rows[1]
    assert rows[2] == rows[3]


# --- bad input and bad config: clear errors before any work --------------------------------------
def _failure_message(result) -> str:
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failures, "expected a step failure"
    return failures[0].step_failure_data.error.to_string()


def test_missing_input_folder_fails_naming_it(tmp_path):
    result = materialize(tmp_path / "nowhere", tmp_path / "wh")
    assert not result.success
    assert "nowhere" in _failure_message(result) and "does not exist" in _failure_message(result)


def test_unsupported_file_fails_early_naming_it(sample_input, tmp_path):
    (sample_input / "notes.docx").write_bytes(b"PK\x03\x04")
    result = materialize(sample_input, tmp_path / "wh")
    assert not result.success
    assert "notes.docx" in _failure_message(result)
    assert not (tmp_path / "wh" / "raw_documents").exists()


def test_a_spark_output_folder_is_read_as_it_is(sample_input, tmp_path):
    """Spark's ``_SUCCESS`` marker and ``.crc`` files beside the data: the run reads the data,
    and raw_documents' metadata lists what it did not read."""
    (sample_input / "_SUCCESS").write_bytes(b"")
    (sample_input / ".wiki.jsonl.crc").write_bytes(b"crc")
    result = materialize(sample_input, tmp_path / "wh")
    assert result.success
    meta = materializations(result)[RAW_DOCUMENTS]
    assert meta["ignored_inputs"].value == [".wiki.jsonl.crc", "_SUCCESS"]
    assert meta["ignored_inputs_count"].value == 2


def test_min_tokens_above_max_tokens_fails_at_the_first_step(sample_input, tmp_path):
    result = materialize(
        sample_input, tmp_path / "wh", filtered_documents={"min_tokens": 50, "max_tokens": 10}
    )
    assert not result.success
    message = _failure_message(result)
    assert "max_tokens" in message and "min_tokens" in message
    failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failed == ["raw_documents"]


def _bad_settings(tmp_path: Path) -> dict[str, tuple[dict, list[str]]]:
    """Case -> (per-op run config overrides, what the failure message must contain); paths are
    under ``tmp_path`` unless the case is about a path elsewhere."""
    missing = str(tmp_path / "missing")
    return {
        "csv_delimiter_two_chars": (
            {RAW_DOCUMENTS: {"csv_delimiter": ";;"}},
            ["raw_documents", "csv_delimiter must be one character", "';;'"],
        ),
        "csv_delimiter_empty": (
            {RAW_DOCUMENTS: {"csv_delimiter": ""}},
            ["raw_documents", "csv_delimiter must be one character", "''"],
        ),
        "csv_delimiter_newline": (
            {RAW_DOCUMENTS: {"csv_delimiter": "\n"}},
            ["raw_documents", "csv_delimiter", "line break"],
        ),
        "pii_kinds": (
            {NORMALIZED_DOCUMENTS: {"pii_kinds": ["bogus"]}},
            ["normalized_documents", "pii_kinds", "bogus"],
        ),
        "pii_max_density": (
            {NORMALIZED_DOCUMENTS: {"pii_max_density": -1.0}},
            ["normalized_documents", "pii_max_density"],
        ),
        "tokenizer_missing_in_root": (
            {TOKENIZED_DOCUMENTS: {"tokenizer": missing}},
            ["tokenized_documents", "tokenizer", missing, "neither 'gpt2' nor"],
        ),
        "tokenizer_missing_anywhere": (
            {TOKENIZED_DOCUMENTS: {"tokenizer": "/missing/path"}},
            ["tokenized_documents", "tokenizer", "/missing/path"],
        ),
        "tokenizer_folder_without_files": (
            {TOKENIZED_DOCUMENTS: {"tokenizer": str(tmp_path / "empty_folder")}},
            ["tokenized_documents", "tokenizer", "empty_folder", "tokenizer.json"],
        ),
        "tokenizer_a_file_of_another_kind": (
            {TOKENIZED_DOCUMENTS: {"tokenizer": str(REPO / "pyproject.toml")}},
            ["tokenized_documents", "tokenizer", str(REPO / "pyproject.toml"), "cannot be built"],
        ),
        "flagged_words_path_missing": (
            {FILTERED_DOCUMENTS: {"flagged_words": {"path": missing}}},
            ["filtered_documents", "flagged_words.path", missing, "not found"],
        ),
        # Refused at once rather than a silent fallback to derived bounds.
        "bucket_boundaries_empty": (
            {TRAINING_BATCHES: {"layout": "bucketed", "bucket_boundaries": []}},
            ["training_batches", "bucket_boundaries", "at least one bound"],
        ),
        "seq_len_absurd": (
            {TRAINING_BATCHES: {"seq_len": 10**12}},
            ["training_batches", "seq_len must be an int in [2, 16777216]"],
        ),
        "zstd_level_out_of_range": (
            {TRAINING_BATCHES: {"zstd_level": 99}},
            ["training_batches", "zstd_level must be in [1, 22], got 99"],
        ),
    }


@pytest.mark.parametrize("case", list(_bad_settings(Path("/unused"))))
def test_a_bad_setting_of_any_step_fails_the_first_step_naming_it(sample_input, tmp_path, case):
    """Every step's config is turned into its spec at the first step: a bad setting anywhere
    fails the run there, naming the op and the setting, before any shard is computed."""
    (tmp_path / "empty_folder").mkdir()
    ops, expected = _bad_settings(tmp_path)[case]
    result = materialize(sample_input, tmp_path / "wh", **ops)
    assert not result.success
    failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failed == [RAW_DOCUMENTS]
    message = _failure_message(result)
    assert all(part in message for part in expected), message
    assert "StageInputError" in message
    assert not (tmp_path / "wh" / RAW_DOCUMENTS).exists()


def test_a_run_of_later_steps_fails_at_its_own_first_step(tmp_path):
    """A run that starts at normalized_documents checks tokenized_documents' config before it
    normalizes anything (and before it looks for raw_documents' shards)."""
    result = dg.materialize(
        PIPELINE_ASSET_DEFS[1:3],
        resources={
            "compute": ComputeResource(),
            "warehouse": WarehouseResource(root=str(tmp_path / "wh")),
        },
        run_config={
            "ops": {TOKENIZED_DOCUMENTS: {"config": {"tokenizer": str(tmp_path / "gone")}}}
        },
        raise_on_error=False,
    )
    assert not result.success
    failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failed == [NORMALIZED_DOCUMENTS]
    message = _failure_message(result)
    assert "tokenized_documents: tokenizer" in message and "gone" in message


def test_a_disabled_flagged_words_list_is_not_checked(tmp_path):
    """flagged_words.enabled=false: the list is never read, so a stale path does not fail."""
    ops = {FILTERED_DOCUMENTS: {"config": {"flagged_words": {"enabled": False, "path": "/gone"}}}}
    validate_run_config({"ops": ops}, tmp_path)
    ops[FILTERED_DOCUMENTS]["config"]["flagged_words"]["enabled"] = True
    with pytest.raises(StageInputError, match=r"filtered_documents: flagged_words\.path '/gone'"):
        validate_run_config({"ops": ops}, tmp_path)


def test_an_input_name_that_is_not_utf8_fails_before_any_work(tmp_path):
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "fine.jsonl").write_text('{"text": "fine"}\n')
    with open(os.fsencode(tmp_path / "input") + b"/bad\xffname.jsonl", "wb") as handle:
        handle.write(b'{"text": "never read"}\n')
    result = materialize(tmp_path / "input", tmp_path / "wh")
    assert not result.success
    message = _failure_message(result)
    assert "bad\\xffname.jsonl" in message and "not valid UTF-8" in message and "rename" in message
    assert not (tmp_path / "wh" / RAW_DOCUMENTS).exists()


def test_bad_rows_in_a_new_file_are_rejects_and_the_run_succeeds(sample_input, tmp_path):
    (sample_input / "broken.jsonl").write_bytes(
        b'{"text": "fine line with enough words to pass the length filter easily ok"}\n'
        b'{"text": \n'
        b'\xff\xfe{"text": "x"}\n'
        b'{"title": "no text"}\n'
        b'{"text": 42}\n'
        b"[1, 2]\n"
    )
    (sample_input / "empty.jsonl").write_bytes(b"")
    # Parquet does not check UTF-8: row 2's text is not UTF-8.
    offsets = pa.py_buffer(pa.array([0, 58, 63], pa.int32()).buffers()[1])
    text = b"a fine parquet row with enough words to pass the length ok" + b"\xff\xfebad"
    column = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(text)])
    pq.write_table(pa.table({"text": column}), sample_input / "broken.parquet")
    # A CSV quote never closed.
    (sample_input / "broken.csv").write_text('id,text\n1,"never closed\n2,swallowed\n')
    result = materialize(sample_input, tmp_path / "wh")
    assert result.success
    catalog = WarehouseResource(root=str(tmp_path / "wh")).catalog()
    assert catalog.query(
        "SELECT source_file, source_line, reason FROM raw_documents_rejects "
        "WHERE source_file LIKE 'broken.%' AND source_file <> 'broken.jsonl' ORDER BY 1"
    ) == [("broken.csv", 1, "corrupt_file"), ("broken.parquet", 2, "invalid_utf8")]
    assert catalog.query(
        "SELECT source_file, source_line FROM raw_documents WHERE source_file LIKE 'broken.%' "
        "ORDER BY 1, 2"
    ) == [("broken.jsonl", 1), ("broken.parquet", 1)]
    got = dict(
        catalog.query(
            "SELECT source_line, reason FROM raw_documents_rejects "
            "WHERE source_file = 'broken.jsonl' ORDER BY 1"
        )
    )
    assert got == {
        2: "invalid_json",
        3: "invalid_utf8",
        4: "missing_text",
        5: "non_string_text",
        6: "not_an_object",
    }
    assert catalog.query(
        "SELECT reason, source_line FROM raw_documents_rejects WHERE source_file = 'empty.jsonl'"
    ) == [("empty_file", 0)]
    assert all(c.passed for c in result.get_asset_check_evaluations())


def test_an_input_file_named_with_tmp_is_read_and_kept(sample_input, tmp_path):
    """``export.tmp-2024.jsonl``: its shards' names hold ``.tmp-``, which the clean-up of
    interrupted attempts took for a temporary file, deleting the shard it had just written, so
    every run failed at raw_documents."""
    shutil.copy(sample_input / "wiki_sample.jsonl", sample_input / "export.tmp-2024.jsonl")
    result = materialize(sample_input, tmp_path / "wh")
    assert result.success
    catalog = WarehouseResource(root=str(tmp_path / "wh")).catalog()
    (rows,) = catalog.query(
        "SELECT count(*) FROM filtered_documents WHERE source_file = 'export.tmp-2024.jsonl'"
    )[0]
    assert rows > 0


def test_megatron_output_holds_every_document_in_the_batches_order(sample_input, tmp_path):
    from llm_assets.kernels.megatron import read_megatron

    root = tmp_path / "wh"
    result = materialize(
        sample_input, root, training_batches={"layout": "padded", "seq_len": 4096, "megatron": True}
    )
    assert result.success
    catalog = WarehouseResource(root=str(root)).catalog()
    docs, tokens = catalog.query("SELECT count(*), sum(n_tokens) FROM filtered_documents")[0]
    prefixes = materializations(result)[TRAINING_BATCHES]["megatron"].value
    # The catalog's record of the materialization names the export too (it runs before the
    # record is written, so its time is in the record's wall_seconds).
    (recorded,) = catalog.query(
        "SELECT extra->>'$.megatron' FROM materializations WHERE materialization_id = ?",
        [f"{result.run_id}:{TRAINING_BATCHES}"],
    )
    assert json.loads(recorded[0]) == prefixes
    datasets = {split: read_megatron(prefix) for split, prefix in prefixes.items()}
    assert sum(len(d) for d in datasets.values()) == docs
    assert sum(int(d.sequence_lengths.sum()) for d in datasets.values()) == tokens + docs
    # Same documents, same order as the padded batches of the train split (one doc per row).
    train = datasets["train"]
    batches = [
        row[:n]
        for shard in catalog.current_shards(TRAINING_BATCHES)
        if "/part-train-" in shard.path
        for row, n in zip(
            pq.read_table(shard.path)["input_ids"].to_pylist(),
            pq.read_table(shard.path)["n_tokens"].to_pylist(),
            strict=True,
        )
    ]
    assert [train[i][:-1].tolist() for i in range(len(train))] == batches


def _batches_state(root: Path, result) -> dict:
    """What a user finds of the current batches: the materialization's folder, what the reader
    reads there, what the catalog says is current, and the folder's files with their bytes."""
    from llm_assets.kernels.megatron import read_megatron
    from llm_assets.reader import IterableTokenBatches, TokenBatchDataset

    meta = materializations(result)[TRAINING_BATCHES]
    folder = Path(meta["folder"].value)
    current = WarehouseResource(root=str(root)).catalog().current_shards(TRAINING_BATCHES)
    catalog_rows = {
        split: sum(s.rows_out for s in current if f"/part-{split}-" in s.path)
        for split in ("train", "validation")
    }
    return {
        "run_id": result.run_id,
        "meta": meta,
        "folder": folder,
        "current": sorted(Path(s.path) for s in current),
        "files": {  # every file of the folder, the Megatron export's included
            p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in folder.rglob("*")
            if p.is_file()
        },
        "reader_rows": {
            split: len(TokenBatchDataset(folder, split)) for split in ("train", "validation")
        },
        "iterable_rows": sum(1 for _ in IterableTokenBatches(folder, "train")),
        "catalog_rows": catalog_rows,
        "megatron": {
            split: len(read_megatron(prefix)) for split, prefix in meta["megatron"].value.items()
        },
    }


def test_each_upstream_state_has_its_own_batches_folder_and_going_back_reuses_it(
    sample_input, tmp_path, monkeypatch
):
    """Default config, then ascii_lower upstream (more tokens: one more shuffle bucket, so more
    batch files), then the default again on the same warehouse. Each time the folder the
    metadata names holds exactly the current batch files, and the reader over it returns exactly
    the sequences the catalog and the metadata count: no batch file of another run's config is
    in it, and the third run reuses the first run's work, scatter included."""
    # The sample is under one 8 MB shuffle bucket; a smaller target lets the bucket count follow
    # the data here as it does at scale: 2 buckets for the default, 3 for ascii_lower.
    monkeypatch.setattr(batches_driver, "SHUFFLE_BUCKET_BYTES", 400_000)
    root = tmp_path / "wh"
    batches = {"megatron": True}
    states = []
    for normalize in ({}, {"preset": "ascii_lower"}, {}):
        result = materialize(
            sample_input, root, normalized_documents=normalize, training_batches=batches
        )
        assert result.success
        assert all(c.passed for c in result.get_asset_check_evaluations())
        state = _batches_state(root, result)
        states.append(state)
        meta = state["meta"]
        # The folder holds the current batch files, no others; the reader reads exactly those.
        assert sorted(state["folder"].glob("part-*.parquet")) == state["current"]
        assert state["reader_rows"] == state["catalog_rows"]
        assert state["iterable_rows"] == state["catalog_rows"]["train"]
        assert sum(state["reader_rows"].values()) == meta["sequences"].value
        assert sum(state["megatron"].values()) == meta["documents"].value
        assert all(
            Path(prefix).parent == state["folder"] / "megatron"
            for prefix in meta["megatron"].value.values()
        )
    default, lower, again = states
    # Going back logged no shuffle: the complete folder was reused as it is.
    assert again["meta"]["scatter_seconds"].value == 0
    assert lower["folder"] != default["folder"]
    assert len(lower["current"]) > len(default["current"])  # the case that left stale files
    assert lower["reader_rows"] != default["reader_rows"]
    # Going back: the same folder, untouched by the ascii_lower run, reused as it was.
    assert again["folder"] == default["folder"]
    assert again["files"] == default["files"]
    assert again["reader_rows"] == default["reader_rows"]
    assert again["megatron"] == default["megatron"]
    meta = again["meta"]
    assert meta["shards_computed"].value == 0
    assert meta["shards_reused"].value == len(default["current"])
    assert set(meta["seconds_by_part"].value.values()) == {0}  # no scatter, no gather task
    assert meta["source_fingerprint"].value == default["meta"]["source_fingerprint"].value
    # The first run's lineage rows were found as they were, not replaced or rebuilt.
    catalog = WarehouseResource(root=str(root)).catalog()
    assert catalog.query(
        "SELECT count(*) FROM shards WHERE asset = ? AND run_id = ?",
        [TRAINING_BATCHES, again["run_id"]],
    ) == [(0,)]


SHORT_TEXT_FILTERS = {
    "quality": {"enabled": False},
    "repetition": {"enabled": False},
    "language": {"languages": []},
}
"""Instructions and reviews are short and may hold code: the Gopher rules (written for web
pages) are off and language is only recorded; flagged words and both dedups stay on."""


def test_sft_instructions_mask_the_prompt_and_review_labels_pass_through(tmp_path):
    """The shipped instruction set end to end: prompt tokens are -100 in labels, response tokens
    are learned; and review ratings become mapped sentiment labels in the batches."""
    sft_input = tmp_path / "sft"
    shutil.copytree(REPO / "data" / "instructions", sft_input)
    template = "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={
            "compute": ComputeResource(),
            "warehouse": WarehouseResource(root=str(tmp_path / "wh")),
        },
        run_config=pipeline_run_config(
            sft_input,
            raw_documents={"text_field": "output"},
            normalized_documents={"preset": "none"},
            tokenized_documents={"prompt_template": template},
            filtered_documents={"min_tokens": 1, **SHORT_TEXT_FILTERS},
            training_batches={"layout": "padded", "seq_len": 512},
        ),
    )
    assert result.success
    catalog = WarehouseResource(root=str(tmp_path / "wh")).catalog()
    prompts = dict(catalog.query("SELECT doc_id, prompt_tokens FROM filtered_documents"))
    rows = catalog.query("SELECT doc_id, labels, attention_mask, n_tokens FROM training_batches")
    assert len(rows) == len(prompts) > 150
    for doc_id, labels, mask, n in rows:
        p = prompts[doc_id]
        assert all(x == -100 for x in labels[:p]) and -100 not in labels[p:n]
        assert all(x == -100 for x in labels[n:]) and sum(mask) == n
    (event,) = result.asset_materializations_for_node("tokenized_documents")
    example = event.metadata["sft_example"].value
    assert "### Response:\n\n```" in example.split("**Learned**")[0]

    reviews = tmp_path / "reviews"
    reviews.mkdir()
    shutil.copy(REPO / "data" / "sample" / "reviews.csv", reviews)
    mapping = {"1": "negative", "2": "negative", "4": "positive", "5": "positive"}
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={
            "compute": ComputeResource(),
            "warehouse": WarehouseResource(root=str(tmp_path / "wh2")),
        },
        run_config=pipeline_run_config(
            reviews,
            filtered_documents={
                "label_field": "rating",
                "label_mapping": mapping,
                **SHORT_TEXT_FILTERS,
            },
            training_batches={"layout": "bucketed", "seq_len": 256},
        ),
    )
    assert result.success
    (event,) = result.asset_materializations_for_node("tokenized_documents")
    assert "sft_example" not in event.metadata  # no prompt: not SFT rows
    catalog = WarehouseResource(root=str(tmp_path / "wh2")).catalog()
    labels = dict(catalog.query("SELECT label, count(*) FROM training_batches GROUP BY label"))
    assert set(labels) == {"negative", "positive"}
    unmapped = catalog.query(
        "SELECT count(*) FROM filtered_documents_rejects WHERE reason = 'unmapped_label'"
    )[0][0]
    assert unmapped > 0  # the 3-star reviews


@pytest.mark.parametrize(
    ("layout", "overflow"), [("padded", "split"), ("bucketed", "split"), ("packed", "truncate")]
)
def test_sft_rows_whose_prompt_fills_the_sequence_are_rejects_not_unlearnable_rows(
    tmp_path, layout, overflow
):
    """With seq_len 48, the instructions whose rendered prompt fills what the layout keeps of
    them would have been rows with every label -100 (padded: a batch of only those gives a NaN
    loss; before, kept as such) or, packed with truncate, a cut-off prompt whose only learned
    label is the EOS after it (teaching the model to stop mid-prompt). Each is a
    ``prompt_fills_sequence`` reject of training_batches with its source and token counts;
    padded rows end with a learned EOS when the response fits; documents in = documents used +
    rejects, and the asset check counts the rejects files too."""
    sft_input = tmp_path / "sft"
    shutil.copytree(REPO / "data" / "instructions", sft_input)
    template = "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
    seq_len = 48
    root = tmp_path / "wh"
    config = pipeline_run_config(
        sft_input,
        raw_documents={"text_field": "output"},
        normalized_documents={"preset": "none"},
        tokenized_documents={"prompt_template": template},
        filtered_documents={"min_tokens": 1, **SHORT_TEXT_FILTERS},
        training_batches={"layout": layout, "seq_len": seq_len, "overflow": overflow},
    )
    resources = {"compute": ComputeResource(), "warehouse": WarehouseResource(root=str(root))}
    result = dg.materialize(PIPELINE_ASSET_DEFS, resources=resources, run_config=config)
    assert result.success
    assert all(c.passed for c in result.get_asset_check_evaluations())
    catalog = WarehouseResource(root=str(root)).catalog()
    docs = {
        doc_id: (p, n, f, line)
        for doc_id, p, n, f, line in catalog.query(
            "SELECT doc_id, prompt_tokens, n_tokens, source_file, source_line "
            "FROM filtered_documents"
        )
    }
    # What the layout keeps of a document: padded rows append EOS and are cut to seq_len;
    # truncated packed documents are cut to seq_len - 1 (their EOS follows).
    kept = {
        d: min(n + 1, seq_len) if layout != "packed" else min(n, seq_len - 1)
        for d, (_, n, _, _) in docs.items()
    }
    full = {d for d, (p, _, _, _) in docs.items() if p >= kept[d]}
    assert 0 < len(full) < len(docs)  # the case, and not every row
    if layout != "packed":
        rows = catalog.query("SELECT doc_id, input_ids, labels, n_tokens FROM training_batches")
        assert {r[0] for r in rows} == set(docs) - full
        eos = 50256
        for doc_id, ids, labels, n in rows:
            assert any(x != -100 for x in labels)
            if docs[doc_id][1] < seq_len:  # the response fits: it ends with a learned EOS
                assert ids[n - 1] == labels[n - 1] == eos
    rejects = catalog.query(
        "SELECT doc_id, source_file, source_line, stage, reason, value "
        "FROM training_batches_rejects"
    )
    assert {r[0] for r in rejects} == full and len(rejects) == len(full)
    for doc_id, source_file, source_line, stage, reason, value in rejects:
        p, n, f, line = docs[doc_id]
        assert (source_file, source_line, stage) == (f, line, TRAINING_BATCHES)
        assert reason == "prompt_fills_sequence"
        assert value == f"prompt {p} of {kept[doc_id]} tokens kept (seq_len {seq_len})"
    assert ("prompt_fills_sequence", len(full)) in catalog.query(
        "SELECT reason, count(*) FROM rejects GROUP BY reason"
    )
    meta = result.asset_materializations_for_node(TRAINING_BATCHES)[0].metadata
    assert meta["documents"].value == len(docs)
    from llm_assets.reader import TokenBatchDataset

    folder = Path(meta["folder"].value)
    TokenBatchDataset(  # the README's reader call, with the metadata's fingerprint
        folder, "train", expected_tokenizer_fingerprint=meta["tokenizer_fingerprint"].value
    )
    if layout != "packed":
        assert meta["sequences"].value == len(docs) - len(full)

    # A second run reuses the batch files and finds the same rejects.
    again = dg.materialize(PIPELINE_ASSET_DEFS, resources=resources, run_config=config)
    assert again.success
    assert all(c.passed for c in again.get_asset_check_evaluations())
    assert sorted(catalog.query("SELECT doc_id FROM training_batches_rejects")) == sorted(
        (d,) for d in full
    )


def _tokenizer_without_eos(folder: Path) -> Path:
    """A small byte-level BPE trained on the sample, saved with no special token at all."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = []
    sample = (REPO / "data" / "sample" / "wiki_sample.jsonl").read_text(errors="replace")
    for line in sample.splitlines():  # the sample plants bad lines: train on the good ones
        try:
            texts.append(str(json.loads(line)["text"]))
        except (ValueError, KeyError, TypeError):
            continue
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def test_a_tokenizer_without_eos_works_where_none_is_needed_and_fails_clearly_elsewhere(
    sample_input, tmp_path
):
    """A tokenizer with no EOS token: padded batches need none and are written; the packed
    layout and the Megatron export need one: they fail before any batching work, saying why and
    what to do."""
    path = _tokenizer_without_eos(tmp_path / "tok")
    tokenizer = {"tokenizer": str(path)}
    padded = materialize(
        sample_input,
        tmp_path / "wh",
        tokenized_documents=tokenizer,
        training_batches={"layout": "padded", "seq_len": 64},
    )
    assert padded.success
    for batches in ({}, {"layout": "padded", "seq_len": 64, "megatron": True}):
        result = materialize(
            sample_input,
            tmp_path / "wh",
            tokenized_documents=tokenizer,
            training_batches=batches,
        )
        assert not result.success
        message = _failure_message(result)
        assert "has no EOS token" in message and "use a tokenizer that has one" in message
        assert ("packed" in message) if not batches else ("megatron" in message)


def test_a_deleted_megatron_bin_is_written_again(sample_input, tmp_path):
    """The Megatron export checks its .bin too, not only the sidecar and the .idx: a run after
    the .bin was deleted writes it again, the same bytes."""
    sample, root = sample_input, tmp_path / "wh"
    first = materialize(sample, root, training_batches={"megatron": True})
    assert first.success
    prefixes = materializations(first)[TRAINING_BATCHES]["megatron"].value
    data = {split: Path(f"{prefix}.bin").read_bytes() for split, prefix in prefixes.items()}
    Path(f"{prefixes['train']}.bin").unlink()
    again = materialize(sample, root, training_batches={"megatron": True})
    assert again.success
    assert {s: Path(f"{p}.bin").read_bytes() for s, p in prefixes.items()} == data


def _flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["cut", "flipped"])
def test_damaged_intermediate_files_are_written_again_not_fatal(sample_input, tmp_path, damage):
    """What a killed run or a damaged disk leaves among the intermediate files is repaired by the
    next run, which succeeds with the same output."""
    sample, root = sample_input, tmp_path / "wh"
    first = materialize(sample, root, training_batches={"megatron": True})
    assert first.success
    expected = output_checksums(root)
    prefixes = materializations(first)[TRAINING_BATCHES]["megatron"].value
    data = {split: Path(f"{prefix}.bin").read_bytes() for split, prefix in prefixes.items()}
    catalog = WarehouseResource(root=str(root)).catalog()
    scatter = next((root / TRAINING_BATCHES / "_scatter").glob("*/buckets.arrow"))
    (drops,) = (root / FILTERED_DOCUMENTS).glob("*/dedup/drops-*.parquet")
    for path in (scatter, drops):
        # Cut, or one bit flipped with the size and footer intact (before the review of the fix:
        # a flipped bit passed the size and footer checks and went into the batches silently).
        os.truncate(path, path.stat().st_size // 2) if damage == "cut" else _flip_middle(path)
    stale = [
        drops.with_name(drops.name + ".tmp-0badc0de"),
        Path(f"{prefixes['train']}.bin.tmp-0badc0de"),
    ]
    for path in stale:
        path.write_bytes(b"left by a killed run")
    os.truncate(f"{prefixes['train']}.bin", 10)
    # Force the readers of the damaged files: a filtered shard and every batch file computed again.
    Path(catalog.current_shards(FILTERED_DOCUMENTS)[0].path).unlink()
    for batch_file in (root / TRAINING_BATCHES).glob("*/part-*.parquet"):
        batch_file.unlink()
    again = materialize(sample, root, training_batches={"megatron": True})
    assert again.success
    assert output_checksums(root) == expected
    assert {s: Path(f"{p}.bin").read_bytes() for s, p in prefixes.items()} == data
    assert not any(path.exists() for path in stale)


@pytest.mark.parametrize(
    "batches_config",
    [
        {"layout": "bucketed", "seq_len": 128, "batch_size": 4},
        {"layout": "padded", "pad_to": "longest", "seq_len": 128, "batch_size": 4},
    ],
    ids=["bucketed", "padded_longest"],
)
def test_preformed_batches_read_back_whole_on_every_rank(sample_input, tmp_path, batches_config):
    """The pipeline's bucketed and pad_to-longest batches, read with ``batches=True`` by two ranks
    through a real DataLoader: every document once, every item one batch of one length."""
    from torch.utils.data import DataLoader

    from llm_assets.reader import IterableTokenBatches, TokenBatchDataset

    result = materialize(sample_input, tmp_path / "wh", training_batches=batches_config)
    assert result.success
    meta = materializations(result)[TRAINING_BATCHES]
    folder = Path(meta["folder"].value)
    catalog = WarehouseResource(root=str(tmp_path / "wh")).catalog()
    seen: list[str] = []
    sizes = []
    for rank in range(2):
        for split in ("train", "validation"):
            dataset = IterableTokenBatches(
                folder, split, rank=rank, world_size=2, batches=True, return_tensors="pt"
            )
            for batch in DataLoader(dataset, batch_size=None, num_workers=2):
                ids, mask = batch["input_ids"], batch["attention_mask"]
                assert ids.ndim == 2 and ids.shape == mask.shape
                assert len(batch["doc_id"]) == ids.shape[0] <= 4
                sizes.append(ids.shape[0])
                seen += batch["doc_id"]
            mapped = TokenBatchDataset(folder, split, rank=rank, world_size=2, batches=True)
            assert all(len(mapped[i]["doc_id"]) <= 4 for i in range(len(mapped)))
    docs = sorted(d for (d,) in catalog.query("SELECT doc_id FROM filtered_documents"))
    assert sorted(seen) == docs
    assert max(sizes) == 4


def test_a_complete_batches_folder_is_reused_without_its_shuffle_files(sample_input, tmp_path):
    """``_scatter/`` is safe to delete: a re-run of a complete folder reuses it as it is, with
    its metadata (histogram, Megatron prefixes) from the catalog, without scattering the
    corpus again. A batch file deleted too makes the run shuffle and write it again."""
    root = tmp_path / "wh"
    batches = {"megatron": True}
    first = materialize(sample_input, root, training_batches=batches)
    assert first.success
    meta = materializations(first)[TRAINING_BATCHES]
    folder = Path(meta["folder"].value)
    files = {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    shutil.rmtree(root / TRAINING_BATCHES / "_scatter")
    again = materialize(sample_input, root, training_batches=batches)
    assert again.success
    assert all(c.passed for c in again.get_asset_check_evaluations())
    reused = materializations(again)[TRAINING_BATCHES]
    assert reused["scatter_seconds"].value == 0 and reused["shards_computed"].value == 0
    assert not (root / TRAINING_BATCHES / "_scatter").exists()
    for key in ("length_histogram", "megatron", "documents", "sequences", "source_fingerprint"):
        assert reused[key].value == meta[key].value, key
    assert {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()} == files
    next(folder.glob("part-train-*.parquet")).unlink()
    third = materialize(sample_input, root, training_batches=batches)
    assert third.success
    assert materializations(third)[TRAINING_BATCHES]["shards_computed"].value == 1
    assert {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()} == files


def test_no_megatron_dataset_for_a_split_without_documents(sample_input, tmp_path):
    """validation_fraction 0: no validation batch file, an empty reader split, and no Megatron
    validation dataset."""
    from llm_assets.reader import TokenBatchDataset

    result = materialize(
        sample_input,
        tmp_path / "wh",
        training_batches={"megatron": True, "validation_fraction": 0.0},
    )
    assert result.success
    meta = materializations(result)[TRAINING_BATCHES]
    assert set(meta["megatron"].value) == {"train"}
    folder = Path(meta["folder"].value)
    assert not list((folder / "megatron").glob("validation*"))
    assert len(TokenBatchDataset(folder, "validation")) == 0
    assert len(TokenBatchDataset(folder, "train")) == meta["sequences"].value


def test_a_deleted_rejects_file_is_written_again_and_breaks_no_run(sample_input, tmp_path):
    """A rejects file deleted by hand breaks no later run: the other stages' records leave that
    asset out of the all-stages ``rejects`` view with a warning (the view would read the missing
    file), and its stage computes the shard again, rejects included."""
    root = tmp_path / "wh"
    assert materialize(sample_input, root).success
    catalog = WarehouseResource(root=str(root)).catalog()
    before = catalog.query("SELECT stage, reason, count(*) FROM rejects GROUP BY ALL ORDER BY ALL")
    (path,) = catalog.query(
        "SELECT rejects_path FROM current_shards WHERE asset = ? AND rejects_path IS NOT NULL "
        "LIMIT 1",
        [FILTERED_DOCUMENTS],
    )[0]
    content = Path(path).read_bytes()
    Path(path).unlink()
    again = materialize(sample_input, root)
    assert again.success
    assert all(c.passed for c in again.get_asset_check_evaluations())
    assert materializations(again)[FILTERED_DOCUMENTS]["shards_computed"].value >= 1
    assert Path(path).read_bytes() == content
    after = catalog.query("SELECT stage, reason, count(*) FROM rejects GROUP BY ALL ORDER BY ALL")
    assert after == before


def _gpt2_tokenizer_folder(folder: Path) -> Path:
    """GPT-2 as ``save_pretrained`` writes a tokenizer: a tokenizer.json (the vocabulary, with no
    special token's role) and the tokenizer_config.json that names eos_token."""
    from llm_assets.kernels.tokenize.gpt2 import gpt2_hf_tokenizer

    gpt2_hf_tokenizer().save_pretrained(folder)
    return folder


def test_the_readmes_bare_tokenizer_json_fails_the_first_step_saying_to_use_its_folder(
    sample_input, tmp_path
):
    """A bare tokenizer.json (``tokenizer: /models/my-tokenizer/tokenizer.json``) names no EOS,
    which the default packed layout needs: the first step fails before any work, saying to point
    at the folder (whose tokenizer_config.json names it); the folder passes, and so does a layout
    that needs no EOS."""
    folder = _gpt2_tokenizer_folder(tmp_path / "my-tokenizer")
    bare = {"tokenizer": str(folder / "tokenizer.json")}
    result = materialize(
        sample_input, tmp_path / "wh", tokenized_documents=bare, training_batches={"seq_len": 64}
    )
    assert not result.success
    failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failed == [RAW_DOCUMENTS]
    message = _failure_message(result)
    assert "has no EOS token" in message and "layout packed" in message
    assert "tokenized_documents: tokenizer" in message and "bare tokenizer file" in message
    assert f"set tokenizer to its folder {str(folder)!r}" in message
    assert not (tmp_path / "wh" / RAW_DOCUMENTS).exists()
    for tokenizer, batches in (
        ({"tokenizer": str(folder)}, {}),
        (bare, {"layout": "padded", "seq_len": 64}),
    ):
        config = pipeline_run_config(
            sample_input, tokenized_documents=tokenizer, training_batches=batches
        )
        validate_run_config(config, tmp_path)


def test_a_run_without_training_batches_is_not_held_to_its_eos_need(sample_input, tmp_path):
    """The early EOS check is training_batches' own: a run that does not batch may tokenize
    with a tokenizer that has no EOS (it could not even carry training_batches' config to pick
    a layout without EOS: Dagster refuses config for a step outside the run)."""
    folder = _gpt2_tokenizer_folder(tmp_path / "tok")
    config = pipeline_run_config(
        sample_input, tokenized_documents={"tokenizer": str(folder / "tokenizer.json")}
    )
    del config["ops"][TRAINING_BATCHES]
    with pytest.raises(StageInputError, match="has no EOS token"):
        validate_run_config(config, tmp_path)  # with every step (the defaults: packed)
    result = dg.materialize(
        PIPELINE_ASSET_DEFS[:3],
        resources={
            "compute": ComputeResource(),
            "warehouse": WarehouseResource(root=str(tmp_path / "wh")),
        },
        run_config=config,
        raise_on_error=False,
    )
    assert result.success


def test_a_file_that_is_not_a_tokenizer_fails_the_config_check_naming_it(tmp_path):
    """The config check loads the tokenizer: a tokenizer.json that is not a tokenizer, or a folder
    holding only a tokenizer_config.json, fails it naming the file and the setting, not later
    with transformers' raw message ("expected `,` or `}` at line 1 column 5")."""
    not_json = tmp_path / "bad" / "tokenizer.json"
    not_json.parent.mkdir()
    not_json.write_text('{"a":1}')
    config_only = tmp_path / "config_only"
    config_only.mkdir()
    (config_only / "tokenizer_config.json").write_text("{}")
    for path, holds in (
        (not_json, "file tokenizer.json"),
        (config_only, "folder with tokenizer_config.json"),
    ):
        ops = {TOKENIZED_DOCUMENTS: {"config": {"tokenizer": str(path)}}}
        with pytest.raises(StageInputError) as info:
            validate_run_config({"ops": ops}, tmp_path)
        message = str(info.value)
        assert message.startswith(f"tokenized_documents: tokenizer {str(path)!r} ({holds})")
        assert "cannot be built by transformers" in message

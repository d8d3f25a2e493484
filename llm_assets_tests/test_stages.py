"""Driver-side planning helpers of the stages."""

from __future__ import annotations

import itertools
import os

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets import stages
from llm_assets.stages import StageInputError, line_ranges, list_input_files, shuffle_bucket_count
from llm_assets.warehouse.shards import AtomicParquetWriter


@pytest.mark.parametrize("rows_per_shard", [1, 2, 3, 7, 100])
@pytest.mark.parametrize("trailing_newline", [True, False])
def test_line_ranges_cover_the_file_exactly(tmp_path, rows_per_shard, trailing_newline):
    lines = [f'{{"text": "line {i}"}}' for i in range(1, 11)]
    body = "\n".join(lines) + ("\n" if trailing_newline else "")
    path = tmp_path / "f.jsonl"
    path.write_text(body)
    ranges = line_ranges(path, rows_per_shard)
    data = path.read_bytes()
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    for start, end, first_line in ranges:
        chunk = data[start:end].decode().splitlines()
        assert 1 <= len(chunk) <= rows_per_shard
        assert chunk[0] == lines[first_line - 1]


def test_line_ranges_of_an_empty_file(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"")
    assert line_ranges(path, 10) == [(0, 0, 1)]


def test_line_ranges_across_read_blocks(tmp_path):
    path = tmp_path / "big.jsonl"
    line = '{"text": "' + "x" * 1000 + '"}\n'
    path.write_text(line * 9000)  # ~9 MB: more than two 4 MiB read blocks
    ranges = line_ranges(path, 4000)
    assert [r[2] for r in ranges] == [1, 4001, 8001]
    assert ranges[1][0] == 4000 * len(line)


def test_input_listing_is_sorted_skips_hidden_and_refuses_unknown(tmp_path):
    (tmp_path / "b.jsonl").write_text("{}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.csv").write_text("text\nx\n")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "junk.bin").write_bytes(b"\0")
    assert [rel for _, rel in list_input_files(tmp_path)] == ["b.jsonl", "sub/a.csv"]
    (tmp_path / "README.md").write_text("hi")
    with pytest.raises(StageInputError, match=r"README\.md"):
        list_input_files(tmp_path)


def test_spark_and_hadoop_markers_are_not_read_and_are_reported(tmp_path):
    """A Spark output folder as it is: ``_SUCCESS``, ``_committed_*``, a leftover
    ``_temporary/`` and ``.crc`` files are not read (Spark's and Arrow's readers skip ``_``- and
    ``.``-prefixed names too); before, ``_SUCCESS`` (no extension) failed every run as an
    unsupported file. Each name skipped is reported; a folder holding only such names still
    fails, saying what it skipped."""
    (tmp_path / "part-00000.jsonl").write_text('{"text": "kept"}\n')
    (tmp_path / "_SUCCESS").write_bytes(b"")
    (tmp_path / "_committed_123").write_text("{}")
    (tmp_path / "_temporary" / "0").mkdir(parents=True)
    (tmp_path / "_temporary" / "0" / "part-00001.jsonl").write_text('{"text": "half"}\n')
    (tmp_path / ".part-00000.jsonl.crc").write_bytes(b"crc")
    ignored: list[str] = []
    assert [rel for _, rel in list_input_files(tmp_path, ignored=ignored)] == ["part-00000.jsonl"]
    assert ignored == [".part-00000.jsonl.crc", "_SUCCESS", "_committed_123", "_temporary/"]
    (tmp_path / "part-00000.jsonl").unlink()
    with pytest.raises(StageInputError, match=r"holds no input files \(not read.*_SUCCESS"):
        list_input_files(tmp_path)


def test_empty_or_missing_input_folder(tmp_path):
    with pytest.raises(StageInputError, match="holds no input files"):
        list_input_files(tmp_path)
    with pytest.raises(StageInputError, match="does not exist"):
        list_input_files(tmp_path / "missing")


@pytest.mark.parametrize(
    "name",
    [b"bad\xffname.jsonl", b"sub\xe9/ok.jsonl"],
    ids=["file", "folder"],
)
def test_input_name_that_is_not_utf8_fails_naming_it(tmp_path, name):
    """A file or folder name that is not UTF-8 cannot be recorded as ``source_file`` (nor hashed
    into ``doc_id``): refused at planning, named by its bytes so the message itself prints."""
    (tmp_path / "fine.jsonl").write_text('{"text": "fine"}\n')
    bad = os.path.join(os.fsencode(tmp_path), name)
    os.makedirs(os.path.dirname(bad), exist_ok=True)
    with open(bad, "wb") as handle:
        handle.write(b'{"text": "unreachable"}\n')
    with pytest.raises(StageInputError, match=r"not valid UTF-8.*rename") as err:
        list_input_files(tmp_path)
    message = str(err.value)
    message.encode("utf-8")  # printable: no lone surrogates from the undecodable bytes
    assert repr(bad) in message


def _line_ranges_reference(data: bytes, rows_per_shard: int) -> list[tuple[int, int, int]]:
    """The obvious implementation: split into lines, group them."""
    lines = data.split(b"\n")
    lines = [line + b"\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    ranges, pos = [], 0
    for i in range(0, len(lines), rows_per_shard):
        size = sum(map(len, lines[i : i + rows_per_shard]))
        ranges.append((pos, pos + size, i + 1))
        pos += size
    return ranges or [(0, 0, 1)]


@given(
    line_sizes=st.lists(st.sampled_from([0, 1, 7, 300, 1_500_000]), max_size=40),
    trailing_newline=st.booleans(),
    rows_per_shard=st.integers(1, 12),
)
@settings(max_examples=60, deadline=None)
def test_line_ranges_equal_the_obvious_split(
    tmp_path_factory, line_sizes, trailing_newline, rows_per_shard
):
    # Lines of 1.5 MB put range ends anywhere in and across the 4 MiB read blocks.
    body = b"\n".join(b"x" * n for n in line_sizes) + (b"\n" if trailing_newline else b"")
    path = tmp_path_factory.mktemp("ranges") / "f.jsonl"
    path.write_bytes(body)
    assert line_ranges(path, rows_per_shard) == _line_ranges_reference(body, rows_per_shard)


def _filtered_shard(path, rows: int, text_chars: int, codec: str) -> str:
    ids = pa.array([list(range(100))] * rows, pa.list_(pa.uint16()))
    doc_ids = [f"{i:016x}" for i in range(rows)]
    table = pa.table({"doc_id": doc_ids, "text": ["x" * text_chars] * rows, "input_ids": ids})
    writer = AtomicParquetWriter(path, table.schema, compression=codec)
    writer.write(table)
    return writer.commit().path


def test_shuffle_buckets_follow_the_token_ids_not_the_file_size(tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "SHUFFLE_BUCKET_BYTES", 1_000_000)
    # 2 x 5,000 rows x 100 ids = 4 MB of INT32 values + 0.16 MB of ids: 5 buckets of 1 MB.
    small = [_filtered_shard(tmp_path / f"a{i}.parquet", 5_000, 10, "lz4") for i in range(2)]
    assert shuffle_bucket_count(small) == 5
    # The same rows with a 1,000-character text (which the shuffle never reads), uncompressed:
    # files 10x the size, the same buckets.
    wide = [_filtered_shard(tmp_path / f"b{i}.parquet", 5_000, 1_000, "none") for i in range(2)]
    assert sum(map(os.path.getsize, wide)) > 5 * sum(map(os.path.getsize, small))
    assert shuffle_bucket_count(wide) == 5
    assert shuffle_bucket_count(wide, minimum=8) == 8
    assert shuffle_bucket_count(wide[:1]) == 3
    # Padded to 4,096 tokens, 10,000 rows are 41 M padded tokens: buckets of at most 4 Mi.
    assert shuffle_bucket_count(wide, padded_len=4096) == 10
    assert shuffle_bucket_count(wide, padded_len=16) == 5  # the token bytes dominate
    # augment reads the text too (10 MB more: 14.2 MB, 15 buckets), and holds each document
    # augment_copies + 1 times (found by review: an augment gather held twice the bound).
    assert shuffle_bucket_count(wide, text=True) == 15
    assert shuffle_bucket_count(wide, text=True, repeat=3) == 43  # 3 x 14.2 MB
    assert shuffle_bucket_count(wide, padded_len=4096, repeat=2) == 20


def test_a_step_refuses_an_upstream_another_run_replaced_with_another_config(tmp_path):
    """Runs take turns per step, not per run: run A normalizes with the default preset, run B
    then normalizes with ``ascii_lower`` (now the current output), and A's tokenize step fails
    saying so (before: it tokenized B's ascii_lower text as A's, every check passing). B goes
    on; a run that did not materialize the upstream itself is not held to it."""
    import logging

    from llm_assets.compute.in_process import InProcessBackend
    from llm_assets.kernels.ingest.read import IngestSpec
    from llm_assets.kernels.normalize import NormalizeSpec
    from llm_assets.kernels.tokenize.spec import TokenizerSpec
    from llm_assets.warehouse.catalog import Catalog
    from llm_assets_tests.conftest import SAMPLE_DIR

    def context(run_id: str) -> stages.StageContext:
        return stages.StageContext(
            warehouse_root=tmp_path / "wh",
            catalog=Catalog(tmp_path / "wh" / "catalog.duckdb"),
            compute=InProcessBackend(),
            log=logging.getLogger("test"),
            run_id=run_id,
        )

    a, b = context("run-a"), context("run-b")
    stages.run_raw_documents(a, SAMPLE_DIR, IngestSpec(), rows_per_shard=1000)
    stages.run_normalized_documents(a, NormalizeSpec())
    stages.run_normalized_documents(b, NormalizeSpec(preset="ascii_lower"))
    with pytest.raises(StageInputError, match=r"normalized_documents was materialized again by "
                       r"run run-b with another config .* Run this run again"):  # fmt: skip
        stages.run_tokenized_documents(a, TokenizerSpec())
    assert stages.run_tokenized_documents(b, TokenizerSpec()).shards


def test_the_refusal_covers_every_earlier_stage_and_its_input_folder(tmp_path, monkeypatch):
    """Not only the stage read: a run is refused when another run re-materialized any stage
    before it with another config, the input folder included (before the fix of the fix: run A
    read folder X, run B folder Y, and A's normalize step read Y's documents; and a run whose
    raw text_field differed two stages up tokenized the other run's text, the stage in between
    having the same config in both)."""
    import logging

    from llm_assets.compute.in_process import InProcessBackend
    from llm_assets.kernels.ingest.read import IngestSpec
    from llm_assets.kernels.normalize import NormalizeSpec
    from llm_assets.kernels.tokenize.spec import TokenizerSpec
    from llm_assets.warehouse.catalog import Catalog

    for folder, text in (("x", "from folder X"), ("y", "from folder Y")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{folder}.jsonl").write_text(
            f'{{"text": "a document {text}", "body": "the body field {text}"}}\n'
        )

    def context(root: str, run_id: str) -> stages.StageContext:
        return stages.StageContext(
            warehouse_root=tmp_path / root,
            catalog=Catalog(tmp_path / root / "catalog.duckdb"),
            compute=InProcessBackend(),
            log=logging.getLogger("test"),
            run_id=run_id,
        )

    a, b = context("wh1", "run-a"), context("wh1", "run-b")
    stages.run_raw_documents(a, tmp_path / "x", IngestSpec(), rows_per_shard=1000)
    stages.run_raw_documents(b, tmp_path / "y", IngestSpec(), rows_per_shard=1000)
    with pytest.raises(StageInputError, match=r"raw_documents was materialized again by run run-b"):
        stages.run_normalized_documents(a, NormalizeSpec())

    a, b = context("wh2", "run-a"), context("wh2", "run-b")
    stages.run_raw_documents(a, tmp_path / "x", IngestSpec(), rows_per_shard=1000)
    stages.run_normalized_documents(a, NormalizeSpec())
    stages.run_raw_documents(b, tmp_path / "x", IngestSpec(text_field="body"), rows_per_shard=1000)
    stages.run_normalized_documents(b, NormalizeSpec())  # the same normalize config as A's
    with pytest.raises(
        StageInputError,
        match=r"raw_documents was materialized again by run run-b with another config "
        r"\(text_field: this run's 'text', that run's 'body'\)",
    ):
        stages.run_tokenized_documents(a, TokenizerSpec())
    assert stages.run_tokenized_documents(b, TokenizerSpec()).shards

    # The same folder given relative and absolute is one config: no refusal (a first version
    # compared the paths as given).
    monkeypatch.chdir(tmp_path)
    a, b = context("wh3", "run-a"), context("wh3", "run-b")
    stages.run_raw_documents(a, tmp_path / "x", IngestSpec(), rows_per_shard=1000)
    stages.run_raw_documents(b, "x", IngestSpec(), rows_per_shard=1000)
    assert stages.run_normalized_documents(a, NormalizeSpec()).shards


def test_an_unchanged_rerun_reuses_the_dedup_decisions_and_a_change_decides_again(tmp_path, caplog):
    """The global dedup step's outcome depends on the annotated shards, the settings, the scope
    and its history: a re-run with all four unchanged reuses it (before: DuckDB decided again on
    every run, 3 s and ~0.8 GB at 500K rows); a new input file, a history changed by hand or a
    damaged decisions file make it decide again, with the same outcome a fresh step gives."""
    import json
    import logging
    import shutil
    from pathlib import Path

    from llm_assets.compute.in_process import InProcessBackend
    from llm_assets.kernels.filters.chain import FilterSpec
    from llm_assets.kernels.ingest.read import IngestSpec
    from llm_assets.kernels.normalize import NormalizeSpec
    from llm_assets.kernels.tokenize.spec import TokenizerSpec
    from llm_assets.warehouse.catalog import Catalog
    from llm_assets_tests.conftest import SAMPLE_DIR

    inputs = tmp_path / "in"
    shutil.copytree(SAMPLE_DIR, inputs)
    ctx = stages.StageContext(
        warehouse_root=tmp_path / "wh",
        catalog=Catalog(tmp_path / "wh" / "catalog.duckdb"),
        compute=InProcessBackend(),
        log=logging.getLogger("test"),
    )
    spec = FilterSpec.standard(quality=None, repetition=None)
    reused = "its decisions reused"

    def run() -> tuple[dict, list]:
        caplog.clear()
        stages.run_raw_documents(ctx, inputs, IngestSpec(), 1000)
        stages.run_normalized_documents(ctx, NormalizeSpec())
        stages.run_tokenized_documents(ctx, TokenizerSpec())
        with caplog.at_level(logging.INFO, logger="test"):
            report = stages.run_filtered_documents(ctx, spec)
        counts = {k: report.extra[k] for k in ("exact_duplicates", "near_duplicates")}
        rows = ctx.catalog.query("SELECT doc_id, reason, value FROM rejects ORDER BY ALL")
        return counts, rows

    first = run()
    assert reused not in caplog.text
    assert run() == first and reused in caplog.text  # unchanged: reused
    shutil.copy(inputs / "wiki_sample.jsonl", inputs / "copy_of_wiki_sample.jsonl")
    grown = run()
    assert reused not in caplog.text and grown[0]["exact_duplicates"] > first[0]["exact_duplicates"]
    assert run() == grown and reused in caplog.text
    memo = next((ctx.warehouse_root / "filtered_documents").rglob(f"dedup/{stages.DEDUP_MEMO}"))
    drops = Path(json.loads(memo.read_text())["path"])
    for path in (ctx.warehouse_root / "filtered_documents").rglob("dedup/drops-*.parquet"):
        path.write_bytes(path.read_bytes()[:100])  # damaged: decided again, same outcome
    assert run() == grown and reused not in caplog.text
    assert drops.stat().st_size > 100
    # Runs 1 and 2 swapped by hand: the same count and last run, another history.
    ctx.catalog.query("UPDATE dedup_seen SET run = 3 - run WHERE run IN (1, 2) RETURNING run")
    run()
    assert reused not in caplog.text
    ctx.catalog.query("DELETE FROM dedup_seen WHERE doc_id IN (SELECT doc_id FROM dedup_seen "
                      "LIMIT 5) RETURNING doc_id")  # fmt: skip
    run()
    assert reused not in caplog.text  # another history: decided again


def test_a_stage_that_keeps_no_document_fails_naming_the_reasons_and_the_setting(tmp_path):
    """Every document rejected by a stage after ingest (the filters, or a prompt template that
    names fields the rows lack): the stage fails after recording its shards and rejects, naming
    the reasons, the setting to look at and the SQL (before: the run succeeded and wrote a
    batches folder of no file, which the reader then refused). training_batches materialized
    on its own after that refuses the empty upstream; the reader refuses an empty folder."""
    import json as json_module
    import logging

    from llm_assets.compute.in_process import InProcessBackend
    from llm_assets.kernels.batching.spec import BatchSpec
    from llm_assets.kernels.filters.length import LengthFilterSpec
    from llm_assets.kernels.ingest.read import IngestSpec
    from llm_assets.kernels.normalize import NormalizeSpec
    from llm_assets.kernels.tokenize.spec import TokenizerSpec
    from llm_assets.reader import COMPLETE_MARKER, batch_files
    from llm_assets.warehouse.catalog import Catalog
    from llm_assets_tests.conftest import SAMPLE_DIR

    ctx = stages.StageContext(
        warehouse_root=tmp_path / "wh",
        catalog=Catalog(tmp_path / "wh" / "catalog.duckdb"),
        compute=InProcessBackend(),
        log=logging.getLogger("test"),
    )
    stages.run_raw_documents(ctx, SAMPLE_DIR, IngestSpec(), 1000)
    stages.run_normalized_documents(ctx, NormalizeSpec())
    sft = TokenizerSpec(prompt_template="### Instruction:\n{instruction}\n\n### Response:\n")
    with pytest.raises(stages.NothingKeptError, match=r"tokenized_documents: no document kept.*"
                       r"missing_prompt_field.*prompt_template"):  # fmt: skip
        stages.run_tokenized_documents(ctx, sft)
    stages.run_tokenized_documents(ctx, TokenizerSpec())
    expected = r"all \d+ document\(s\) were rejected \(too_few_tokens: \d+\).*min_tokens.*_rejects"
    with pytest.raises(stages.NothingKeptError, match=expected):
        stages.run_filtered_documents(ctx, LengthFilterSpec(min_tokens=10**6))
    assert ctx.catalog.query("SELECT DISTINCT reason FROM filtered_documents_rejects") == [
        ("too_few_tokens",)
    ]
    with pytest.raises(stages.NothingKeptError, match="filtered_documents holds no document"):
        stages.run_training_batches(ctx, BatchSpec())
    empty = tmp_path / "empty"  # as a release before the refusal wrote it
    empty.mkdir()
    (empty / COMPLETE_MARKER).write_text(json_module.dumps({"files": {}}))
    with pytest.raises(FileNotFoundError, match="kept no document"):
        batch_files(empty, "train")


def test_a_utf16_jsonl_file_is_read_whole_with_the_lines_of_its_utf8_copy(tmp_path):
    """A plain JSONL file is cut into line ranges at b"\\n", which UTF-16 does not have as a
    line end: a UTF-16 file is one shard, transcoded, with the rows and ids of its UTF-8 copy."""
    import json
    import logging

    from llm_assets.compute.in_process import InProcessBackend
    from llm_assets.kernels.ingest.read import IngestSpec
    from llm_assets.warehouse.catalog import Catalog

    body = "".join(json.dumps({"text": f"ligne numéro {i}"}) + "\n" for i in range(25))
    for folder, data in (("utf8", body.encode()), ("utf16", body.encode("utf-16"))):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "docs.jsonl").write_bytes(data)
    rows = {}
    for folder in ("utf8", "utf16"):
        ctx = stages.StageContext(
            warehouse_root=tmp_path / f"wh-{folder}",
            catalog=Catalog(tmp_path / f"wh-{folder}" / "catalog.duckdb"),
            compute=InProcessBackend(),
            log=logging.getLogger("test"),
            run_id=folder,
        )
        report = stages.run_raw_documents(ctx, tmp_path / folder, IngestSpec(), rows_per_shard=10)
        assert len(report.shards) == (3 if folder == "utf8" else 1)
        rows[folder] = ctx.catalog.query(
            "SELECT doc_id, source_line, text FROM raw_documents ORDER BY source_line"
        )
    assert len(rows["utf16"]) == 25 and rows["utf16"] == rows["utf8"]

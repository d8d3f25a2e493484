"""The global dedup step: its decisions reused by an unchanged re-run."""

from __future__ import annotations

from llm_assets.stages.engine import StageContext
from llm_assets.stages.filtered_documents.driver import run_filtered_documents
from llm_assets.stages.normalized_documents import run_normalized_documents
from llm_assets.stages.raw_documents import run_raw_documents
from llm_assets.stages.tokenized_documents import run_tokenized_documents
from llm_assets.warehouse.layout import DEDUP_MEMO


def test_an_unchanged_rerun_reuses_the_dedup_decisions_and_a_change_decides_again(tmp_path, caplog):
    """The global dedup step's outcome depends on the annotated shards, the settings, the scope and
    its history: a re-run with all four unchanged reuses it; a new input file, a history changed by
    hand or a damaged decisions file make it decide again, with the same outcome a fresh step
    gives."""
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
    ctx = StageContext(
        warehouse_root=tmp_path / "wh",
        catalog=Catalog(tmp_path / "wh" / "catalog.duckdb"),
        compute=InProcessBackend(),
        log=logging.getLogger("test"),
    )
    spec = FilterSpec.standard(quality=None, repetition=None)
    reused = "its decisions reused"

    def run() -> tuple[dict, list]:
        caplog.clear()
        run_raw_documents(ctx, inputs, IngestSpec(), 1000)
        run_normalized_documents(ctx, NormalizeSpec())
        run_tokenized_documents(ctx, TokenizerSpec())
        with caplog.at_level(logging.INFO, logger="test"):
            report = run_filtered_documents(ctx, spec)
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
    memo = next((ctx.warehouse_root / "filtered_documents").rglob(f"dedup/{DEDUP_MEMO}"))
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

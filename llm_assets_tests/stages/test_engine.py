"""The stage engine: a step refuses an upstream another run replaced."""

from __future__ import annotations

import pytest

from llm_assets.stages.engine import StageContext, StageInputError
from llm_assets.stages.normalized_documents import run_normalized_documents
from llm_assets.stages.raw_documents import run_raw_documents
from llm_assets.stages.tokenized_documents import run_tokenized_documents


def test_a_step_refuses_an_upstream_another_run_replaced_with_another_config(tmp_path):
    """Runs take turns per step, not per run: run A normalizes with the default preset, run B then
    normalizes with ``ascii_lower`` (now the current output), and A's tokenize step fails saying so.
    B goes on; a run that did not materialize the upstream itself is not held to it."""
    import logging

    from llm_assets.compute.in_process import InProcessBackend
    from llm_assets.kernels.ingest.read import IngestSpec
    from llm_assets.kernels.normalize import NormalizeSpec
    from llm_assets.kernels.tokenize.spec import TokenizerSpec
    from llm_assets.warehouse.catalog import Catalog
    from llm_assets_tests.conftest import SAMPLE_DIR

    def context(run_id: str) -> StageContext:
        return StageContext(
            warehouse_root=tmp_path / "wh",
            catalog=Catalog(tmp_path / "wh" / "catalog.duckdb"),
            compute=InProcessBackend(),
            log=logging.getLogger("test"),
            run_id=run_id,
        )

    a, b = context("run-a"), context("run-b")
    run_raw_documents(a, SAMPLE_DIR, IngestSpec(), rows_per_shard=1000)
    run_normalized_documents(a, NormalizeSpec())
    run_normalized_documents(b, NormalizeSpec(preset="ascii_lower"))
    with pytest.raises(StageInputError, match=r"normalized_documents was materialized again by "
                       r"run run-b with another config .* Run this run again"):  # fmt: skip
        run_tokenized_documents(a, TokenizerSpec())
    assert run_tokenized_documents(b, TokenizerSpec()).shards


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

    def context(root: str, run_id: str) -> StageContext:
        return StageContext(
            warehouse_root=tmp_path / root,
            catalog=Catalog(tmp_path / root / "catalog.duckdb"),
            compute=InProcessBackend(),
            log=logging.getLogger("test"),
            run_id=run_id,
        )

    a, b = context("wh1", "run-a"), context("wh1", "run-b")
    run_raw_documents(a, tmp_path / "x", IngestSpec(), rows_per_shard=1000)
    run_raw_documents(b, tmp_path / "y", IngestSpec(), rows_per_shard=1000)
    with pytest.raises(StageInputError, match=r"raw_documents was materialized again by run run-b"):
        run_normalized_documents(a, NormalizeSpec())

    a, b = context("wh2", "run-a"), context("wh2", "run-b")
    run_raw_documents(a, tmp_path / "x", IngestSpec(), rows_per_shard=1000)
    run_normalized_documents(a, NormalizeSpec())
    run_raw_documents(b, tmp_path / "x", IngestSpec(text_field="body"), rows_per_shard=1000)
    run_normalized_documents(b, NormalizeSpec())  # the same normalize config as A's
    with pytest.raises(
        StageInputError,
        match=r"raw_documents was materialized again by run run-b with another config "
        r"\(text_field: this run's 'text', that run's 'body'\)",
    ):
        run_tokenized_documents(a, TokenizerSpec())
    assert run_tokenized_documents(b, TokenizerSpec()).shards

    # The same folder given relative and absolute is one config: no refusal (a first version
    # compared the paths as given).
    monkeypatch.chdir(tmp_path)
    a, b = context("wh3", "run-a"), context("wh3", "run-b")
    run_raw_documents(a, tmp_path / "x", IngestSpec(), rows_per_shard=1000)
    run_raw_documents(b, "x", IngestSpec(), rows_per_shard=1000)
    assert run_normalized_documents(a, NormalizeSpec()).shards

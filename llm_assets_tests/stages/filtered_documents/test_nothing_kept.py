"""A stage that keeps no document fails, naming the reasons and the setting."""

from __future__ import annotations

import pytest

from llm_assets.stages.engine import StageContext
from llm_assets.stages.filtered_documents.driver import run_filtered_documents
from llm_assets.stages.filtered_documents.nothing_kept import NothingKeptError
from llm_assets.stages.normalized_documents import run_normalized_documents
from llm_assets.stages.raw_documents import run_raw_documents
from llm_assets.stages.tokenized_documents import run_tokenized_documents
from llm_assets.stages.training_batches.driver import run_training_batches


def test_a_stage_that_keeps_no_document_fails_naming_the_reasons_and_the_setting(tmp_path):
    """Every document rejected by a stage after ingest (the filters, or a prompt template that names
    fields the rows lack): the stage fails after recording its shards and rejects, naming the
    reasons, the setting to look at and the SQL. training_batches materialized on its own after that
    refuses the empty upstream; the reader refuses an empty folder."""
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

    ctx = StageContext(
        warehouse_root=tmp_path / "wh",
        catalog=Catalog(tmp_path / "wh" / "catalog.duckdb"),
        compute=InProcessBackend(),
        log=logging.getLogger("test"),
    )
    run_raw_documents(ctx, SAMPLE_DIR, IngestSpec(), 1000)
    run_normalized_documents(ctx, NormalizeSpec())
    sft = TokenizerSpec(prompt_template="### Instruction:\n{instruction}\n\n### Response:\n")
    with pytest.raises(NothingKeptError, match=r"tokenized_documents: no document kept.*"
                       r"missing_prompt_field.*prompt_template"):  # fmt: skip
        run_tokenized_documents(ctx, sft)
    run_tokenized_documents(ctx, TokenizerSpec())
    expected = r"all \d+ document\(s\) were rejected \(too_few_tokens: \d+\).*min_tokens.*_rejects"
    with pytest.raises(NothingKeptError, match=expected):
        run_filtered_documents(ctx, LengthFilterSpec(min_tokens=10**6))
    assert ctx.catalog.query("SELECT DISTINCT reason FROM filtered_documents_rejects") == [
        ("too_few_tokens",)
    ]
    with pytest.raises(NothingKeptError, match="filtered_documents holds no document"):
        run_training_batches(ctx, BatchSpec())
    empty = tmp_path / "empty"  # as a release before the refusal wrote it
    empty.mkdir()
    (empty / COMPLETE_MARKER).write_text(json_module.dumps({"files": {}}))
    with pytest.raises(FileNotFoundError, match="kept no document"):
        batch_files(empty, "train")

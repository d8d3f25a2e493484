"""The summary an asset's metadata opens with: key facts, formatted, short enough to show
inline (under the UI's 1,000 characters)."""

from __future__ import annotations

import numpy as np

from llm_assets.assets.reporting.summary import (
    INLINE_LIMIT,
    LengthStats,
    benchmark_summary,
    filtered_documents_summary,
    fit,
    raw_documents_summary,
    tokenized_documents_summary,
    training_batches_summary,
)
from llm_assets.stages.engine import StageReport
from llm_assets.warehouse.catalog import ShardRecord


def _report(
    asset: str, shards: list[tuple[str, int, int, int]], folder: str, **extra
) -> StageReport:
    records = [
        ShardRecord(
            asset, "fp", name, f"{folder}/{name}.parquet", None, rows_in, out, rej, 0, "", ""
        )
        for name, rows_in, out, rej in shards
    ]
    return StageReport(
        asset=asset,
        fingerprint="fp",
        folder=folder,
        shards=records,
        computed=len(records),
        skipped=0,
        seconds=1.5,
        reject_reasons=extra.pop("reasons", {}),
        extra=extra,
    )


def test_the_filtered_summary_gives_kept_rejected_and_why():
    report = _report(
        "filtered_documents",
        [("part-0", 2000, 800, 1200), ("part-1", 1634, 621, 1013)],
        "/w/filtered_documents/8e0f",
        reasons={"too_few_tokens": 786, "alpha_words_ratio": 669, "too_few_words": 638, "x": 120},
        exact_duplicates=20,
        filters="length, quality",
    )
    kept, given = LengthStats(), LengthStats()
    kept.add(np.array([100, 200]))
    given.add(np.array([100, 200, 3, 5]))
    text = filtered_documents_summary(report, kept, given, "in_process").markdown()
    assert text.startswith("#### 1,421 of 3,634 documents kept (39.1 %)\n")
    assert "- **rejected**: 2,213 (60.9 %): too_few_tokens 786 (21.6 %), " in text
    assert "and 1 more\n" in text
    assert "- **tokens kept**: 300 (97.4 %)" in text
    assert "- **duplicates**: 20 exact" in text
    assert "`filtered_documents/8e0f` in `/w`" in text
    assert len(text) <= INLINE_LIMIT


def test_the_batches_summary_gives_layout_splits_padding_and_how_to_read_them():
    report = _report(
        "training_batches",
        [("train-00000", 700, 703, 0), ("validation-00000", 721, 36, 0)],
        "/w/warehouse/training_batches/5b07",
        seq_len=256,
        layout="packed",
        documents=1421,
        tokens=188_838,
        padding_tokens=346,
        truncated_tokens=0,
        dropped_tokens=0,
    )
    text = training_batches_summary(report, "").markdown()
    assert text.startswith("#### 739 sequences of 256 tokens, packed\n")
    assert "- **sequences**: train 703, validation 36" in text
    assert "- **padding**: 346 tokens (0.18 %)" in text
    assert "- **lost at seq_len**: 0 truncated, 0 dropped (0 % of the tokens)" in text
    assert 'TokenBatchDataset.from_warehouse( "/w/warehouse", split="train")' in text


def test_the_tokenized_and_raw_summaries():
    report = _report(
        "tokenized_documents", [("part-0", 10, 10, 0)], "/w/t/1", tokens=1234, tokenizer="gpt2"
    )
    lengths = LengthStats()
    lengths.add(np.array([1000, 234, 0, 0, 0, 0, 0, 0, 0, 0]))
    text = tokenized_documents_summary(report, lengths, "ray").markdown()
    assert text.startswith("#### 10 documents, 1,234 tokens (gpt2)\n")
    assert "- **tokens per document**: mean 123.4, longest 1,000" in text
    assert "on ray" in text
    raw = _report("raw_documents", [("p", 3640, 3635, 5)], "/w/r/1", reasons={"invalid_json": 5})
    text = raw_documents_summary(raw, 6, "").markdown()
    assert text.startswith("#### 3,635 documents read from 6 file(s)\n")
    assert "- **kept**: 3,635 (99.86 %)" in text


def test_a_summary_too_long_drops_its_optional_facts_then_cuts_values():
    facts = [("rows in", "1"), ("rejected", "r" * 300)]
    optional = [("work", "w" * 300), ("output", "`" + "o" * 500 + "`")]
    text = fit("headline", facts, optional)
    assert len(text) <= INLINE_LIMIT
    assert "w" * 300 in text and "o" * 500 not in text  # the last optional fact went first
    text = fit("headline", [("rejected", "r" * 2000), ("kept", "k" * 50)], [])
    assert len(text) <= INLINE_LIMIT and "- **kept**: " + "k" * 50 in text


def test_the_benchmark_summary_names_the_fastest_backend_per_size():
    fastest = {200_000: ("ray", 151_234.6, 2048.4), 1000: ("in_process", 9876.0, 210.0)}
    text = benchmark_summary(fastest, {"cores": 2, "memory_gb": 23.4}, 8).markdown()
    assert text.splitlines()[2:4] == [
        "- **1,000 rows**: in_process, 9,876 rows/s, 210 MB peak",
        "- **200,000 rows**: ray, 151,235 rows/s, 2,048 MB peak",
    ]
    assert "- **machine**: 2 cores, 23.4 GB" in text

"""The quality gate end to end: every filter and both dedups through real materializations, the
rejects people browse and query, dedup identical on every backend and incremental across runs."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import duckdb
import pytest

from llm_assets.constants import FILTERED_DOCUMENTS
from llm_assets.datagen.corpus import KIND_DUPLICATE, KIND_NEAR_DUPLICATE, generate_records
from llm_assets.kernels.normalize import NormalizeSpec, normalize_text
from llm_assets_tests.assets.test_pipeline import materializations, materialize, output_checksums

FILTERS_OFF = {
    "quality": {"enabled": False},
    "repetition": {"enabled": False},
    "flagged_words": {"enabled": False},
    "language": {"enabled": False},
}


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _sql(root: Path, query: str, params: list | None = None) -> list[tuple]:
    with duckdb.connect(str(root / "catalog.duckdb"), read_only=True) as con:
        return con.execute(query, params or []).fetchall()


@pytest.fixture(scope="module")
def generated_run(tmp_path_factory):
    """3,000 generated WikiText-like records (5 % foreign, 6 % planted copies) through the
    default config; ``kind`` and ``lang`` of each record are known."""
    base = tmp_path_factory.mktemp("quality")
    (base / "input").mkdir()
    records = list(generate_records(3000, seed=21, duplicate_fraction=0.06, with_meta=True))
    _write_jsonl(base / "input" / "corpus.jsonl", records)
    result = materialize(base / "input", base / "warehouse")
    return base, records, result


def test_default_config_runs_every_filter_and_reconciles(generated_run):
    base, records, result = generated_run
    assert result.success
    assert all(c.passed for c in result.get_asset_check_evaluations())
    meta = materializations(result)[FILTERED_DOCUMENTS]
    reasons = meta["reject_reasons"].value
    for reason in ("too_few_tokens", "exact_duplicate", "wrong_language"):
        assert f"| {reason} |" in reasons, reasons
    samples = meta["reject_samples"].value
    assert "| exact_duplicate |" in samples and "duplicate of " in samples
    root = base / "warehouse"
    kept, rejected = _sql(
        root,
        "SELECT (SELECT count(*) FROM filtered_documents), "
        "(SELECT count(*) FROM filtered_documents_rejects)",
    )[0]
    assert kept + rejected == len(records)
    # Its time covers the three phases (filter, global dedup, apply), in the metadata and in the
    # catalog's record of the materialization alike.
    assert meta["seconds"].value > meta["filter_seconds"].value + meta["dedup_seconds"].value
    ((wall,),) = _sql(
        root,
        "SELECT wall_seconds FROM materializations WHERE materialization_id = ?",
        [f"{result.run_id}:{FILTERED_DOCUMENTS}"],
    )
    assert wall == pytest.approx(meta["seconds"].value, abs=0.01)


def test_planted_copies_are_found_and_foreign_text_is_dropped(generated_run):
    base, records, _ = generated_run
    root = base / "warehouse"
    by_line = {
        line: reason
        for line, reason in _sql(root, "SELECT source_line, reason FROM filtered_documents_rejects")
    }
    kept_lines = {r[0] for r in _sql(root, "SELECT source_line FROM filtered_documents")}
    exact = [i + 1 for i, r in enumerate(records) if r["kind"] == KIND_DUPLICATE]
    near = [i + 1 for i, r in enumerate(records) if r["kind"] == KIND_NEAR_DUPLICATE]
    # Every exact copy is gone: as a duplicate of a kept document, or (when the text it copies
    # failed a filter) for the same reason as that text, so no kept document has its text.
    assert not kept_lines & set(exact)
    kept_hashes = {h for (h,) in _sql(root, "SELECT content_hash FROM filtered_documents")}
    spec = NormalizeSpec()
    for line in exact:
        if by_line[line] != "exact_duplicate":
            text = normalize_text(records[line - 1]["text"], spec)
            assert hashlib.sha256(text.encode()).hexdigest() not in kept_hashes, line
    assert sum(by_line[line] == "exact_duplicate" for line in exact) > 0.3 * len(exact)
    near_found = sum(by_line.get(line) == "near_duplicate" for line in near)
    assert near_found >= 0.3 * len(near), (near_found, len(near))
    foreign = [
        i + 1 for i, r in enumerate(records) if r["lang"] != "en" and r["kind"] == "paragraph"
    ]
    assert foreign and not kept_lines & set(foreign)
    # The kept rows carry their language and content hash for SQL.
    assert _sql(root, "SELECT DISTINCT language FROM filtered_documents") == [("en",)]
    assert _sql(root, "SELECT count(DISTINCT content_hash) = count(*) FROM filtered_documents")[0][
        0
    ]


def test_why_was_this_document_dropped_in_sql(generated_run):
    base, records, _ = generated_run
    root = base / "warehouse"
    line = next(i + 1 for i, r in enumerate(records) if r["kind"] == KIND_DUPLICATE)
    doc_id = _sql(root, "SELECT doc_id FROM raw_documents WHERE source_line = ?", [line])[0][0]
    rows = _sql(root, "SELECT stage, reason, value FROM rejects WHERE doc_id = ?", [doc_id])
    assert len(rows) == 1
    stage, reason, value = rows[0]
    assert stage in ("filter", "dedup") and reason and value


def _dedup_corpus(rng: random.Random, n: int, prefix: str) -> list[dict]:
    vocab = [f"{prefix}{i}" for i in range(4000)]
    return [{"text": " ".join(rng.choice(vocab) for _ in range(60))} for _ in range(n)]


def test_dedup_is_incremental_across_runs(tmp_path):
    """A file added later (whose name sorts first) is deduplicated against what the warehouse
    already holds; the earlier output does not change."""
    rng = random.Random(4)
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    first = _dedup_corpus(rng, 200, "w")
    _write_jsonl(input_dir / "b.jsonl", first)
    root = tmp_path / "warehouse"
    assert materialize(input_dir, root, filtered_documents=FILTERS_OFF).success
    before = dict(output_checksums(root)[FILTERED_DOCUMENTS])

    edited = first[7]["text"].split()
    edited[30] = "changed"
    later = [first[3], {"text": " ".join(edited)}, *_dedup_corpus(rng, 20, "v")]
    _write_jsonl(input_dir / "a.jsonl", later)
    result = materialize(input_dir, root, filtered_documents=FILTERS_OFF)
    assert result.success
    rejects = _sql(
        root,
        "SELECT source_file, source_line, reason, value FROM filtered_documents_rejects "
        "ORDER BY source_file, source_line",
    )
    b_ids = dict(
        _sql(root, "SELECT source_line, doc_id FROM raw_documents WHERE source_file = 'b.jsonl'")
    )
    assert [(f, line, reason) for f, line, reason, _ in rejects] == [
        ("a.jsonl", 1, "exact_duplicate"),
        ("a.jsonl", 2, "near_duplicate"),
    ]
    assert rejects[0][3] == f"duplicate of {b_ids[4]} (b.jsonl:4)"
    assert rejects[1][3].startswith(f"cluster {b_ids[8]} of 2;")
    after = dict(output_checksums(root)[FILTERED_DOCUMENTS])
    assert {k: v for k, v in after.items() if k in before} == before
    meta = materializations(result)[FILTERED_DOCUMENTS]
    assert meta["shards_reused"].value >= 1


@pytest.mark.parametrize("backend", ["multiprocess", pytest.param("ray", marks=pytest.mark.slow)])
def test_dedup_and_filters_identical_on_every_backend(generated_run, tmp_path, backend):
    base, _, _ = generated_run
    root = tmp_path / "warehouse"
    result = materialize(base / "input", root, backend=backend)
    assert result.success
    ours, reference = output_checksums(root), output_checksums(base / "warehouse")
    assert [s for _, s in ours[FILTERED_DOCUMENTS]] == [s for _, s in reference[FILTERED_DOCUMENTS]]


def test_dedup_history_is_per_upstream_config_too(tmp_path):
    """Which copy of a duplicate is kept does not depend on the configs run before: ``a`` (words
    separated by bullets, rejected by the quality rules under the default preset) becomes an exact
    copy of ``b`` under ``ascii_lower``, which strips the bullets. A fresh warehouse running
    ``ascii_lower`` keeps ``a`` (first in stable order); one that ran the default preset first must
    keep ``a`` too."""
    record = next(r for r in generate_records(50, seed=3) if len(r["text"].split()) > 100)
    words = [w for w in record["text"].split() if w.isalpha()]  # no lone punctuation
    (tmp_path / "input").mkdir()
    _write_jsonl(tmp_path / "input" / "a.jsonl", [{"text": " \u2022 ".join(words)}])
    _write_jsonl(tmp_path / "input" / "b.jsonl", [{"text": " ".join(words)}])

    def kept(root: Path) -> list[str]:
        return [r[0] for r in _sql(root, "SELECT source_file FROM filtered_documents")]

    ascii_lower = {"preset": "ascii_lower"}
    fresh = tmp_path / "fresh"
    assert materialize(tmp_path / "input", fresh, normalized_documents=ascii_lower).success
    assert kept(fresh) == ["a.jsonl"]
    history = tmp_path / "history"
    assert materialize(tmp_path / "input", history).success
    assert kept(history) == ["b.jsonl"]  # a fails the quality rules with its bullets
    assert materialize(tmp_path / "input", history, normalized_documents=ascii_lower).success
    assert kept(history) == ["a.jsonl"]

"""``filtered_documents.config.decontaminate`` end to end on the shipped wiki sample: real
materializations of the four document stages, real Parquet and DuckDB, the process pool."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import (
    FILTERED_DOCUMENTS,
    NORMALIZED_DOCUMENTS,
    RAW_DOCUMENTS,
    TOKENIZED_DOCUMENTS,
)
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.assets.test_pipeline import _failure_message, materializations
from llm_assets_tests.conftest import SAMPLE_DIR

DOCUMENT_STAGES = [RAW_DOCUMENTS, NORMALIZED_DOCUMENTS, TOKENIZED_DOCUMENTS, FILTERED_DOCUMENTS]


def _run(
    input_dir: Path,
    root: Path,
    decontaminate: dict | None = None,
    backend: str = "in_process",
    preset: str = "default",
    filters: dict | None = None,
) -> dg.ExecuteInProcessResult:
    filters = filters or ({"decontaminate": decontaminate} if decontaminate else {})
    return dg.materialize(
        PIPELINE_ASSET_DEFS,
        selection=DOCUMENT_STAGES,
        resources={
            "compute": ComputeResource(backend=backend, workers=2),
            "warehouse": WarehouseResource(root=str(root)),
        },
        run_config={
            "ops": {
                RAW_DOCUMENTS: {"config": {"input_dir": str(input_dir), "rows_per_shard": 700}},
                NORMALIZED_DOCUMENTS: {"config": {"preset": preset}},
                FILTERED_DOCUMENTS: {"config": filters},
            }
        },
        raise_on_error=False,
    )


def _words(text: str) -> list[str]:
    """Canonical words by the definition (lowercase, letters and digits only)."""
    return [w for w in (re.sub(r"[\W_]+", "", t.lower()) for t in text.split()) if w]


def _holds(text: str, gram: list[str]) -> bool:
    words, n = _words(text), len(gram)
    return any(words[i : i + n] == gram for i in range(len(words) - n + 1))


def _kept(root: Path) -> dict[str, str]:
    catalog = WarehouseResource(root=str(root)).catalog()
    return dict(catalog.query(f"SELECT doc_id, text FROM {FILTERED_DOCUMENTS}"))


def _rejects(root: Path) -> dict[str, str]:
    catalog = WarehouseResource(root=str(root)).catalog()
    return dict(
        catalog.query(
            f"SELECT doc_id, value FROM {FILTERED_DOCUMENTS}_rejects WHERE reason = 'contaminated'"
        )
    )


@pytest.fixture(scope="module")
def wiki(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """The wiki sample, and a plain run of it (no decontamination): input folder, warehouse,
    the kept documents."""
    base = tmp_path_factory.mktemp("decontam")
    (base / "input").mkdir()
    shutil.copy(SAMPLE_DIR / "wiki_sample.jsonl", base / "input")
    assert _run(base / "input", base / "plain").success
    return base / "input", base / "plain", _kept(base / "plain")


def _quote(kept: dict[str, str], n: int, skip: int = 0) -> tuple[str, list[str]]:
    """``n`` words from the middle of a kept document (the ``skip``-th with enough words),
    restyled as a benchmark would print them: capitalized, with a question mark."""
    docs = [t for _, t in sorted(kept.items()) if len(t.split()) >= n + 10]
    words = docs[skip].split()[5 : 5 + n]
    return " ".join(words).capitalize() + "?", _words(" ".join(words))


def test_documents_quoting_an_eval_set_are_rejects_with_the_eval_text_named(wiki, tmp_path):
    """An eval set quoting two kept documents (one in its question, one in a list of choices)
    and holding text no document has: exactly the documents holding an eval n-gram become
    ``contaminated`` rejects, queryable in SQL, each naming its eval record; the others are kept
    as they were; the materialization counts the eval set; a rerun reuses every shard; the
    process pool writes the same bytes."""
    input_dir, _, plain = wiki
    question, q_gram = _quote(plain, 20)
    choice, c_gram = _quote(plain, 10, skip=7)
    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "bench.jsonl").write_text(
        json.dumps({"question": question, "choices": ["Yes", choice], "answer": 1})
        + "\n"
        + json.dumps({"question": "A sentence that no document of the sample holds, anywhere."})
        + "\n"
    )
    config = {"paths": [str(evals / "bench.jsonl")], "fields": ["question", "choices"]}
    root = tmp_path / "wh"
    result = _run(input_dir, root, config)
    assert result.success
    assert all(c.passed for c in result.get_asset_check_evaluations())

    grams = [q_gram[i : i + 13] for i in range(len(q_gram) - 12)] + [c_gram]
    expected = {d for d, t in plain.items() if any(_holds(t, g) for g in grams)}
    assert len(expected) >= 2
    rejects = _rejects(root)
    assert set(rejects) == expected
    for doc_id, value in rejects.items():
        field = "question" if any(_holds(plain[doc_id], g) for g in grams[:-1]) else "choices"
        assert value.startswith(f"{evals / 'bench.jsonl'}:1 {field}: ")
    assert _kept(root) == {d: t for d, t in plain.items() if d not in expected}

    meta = materializations(result)[FILTERED_DOCUMENTS]
    assert meta["decontaminate_eval_files"].value == 1
    assert meta["decontaminate_eval_texts"].value == 4  # 2 questions, 2 choices
    assert meta["decontaminate_eval_texts_checked"].value == 3  # "Yes" is too short
    # The quotes' canonical words (a lone "," of the sample is no word): every 13 of the
    # question's, the choice whole, the other question (10 words) whole.
    assert len(q_gram) >= 13 and 8 <= len(c_gram) < 13
    assert meta["decontaminate_eval_ngrams"].value == len(q_gram) - 12 + 1 + 1
    assert f"| contaminated | {len(expected)} |" in meta["reject_reasons"].value

    again = _run(input_dir, root, config)
    assert again.success
    assert materializations(again)[FILTERED_DOCUMENTS]["shards_computed"].value == 0

    pooled = tmp_path / "pool"
    assert _run(input_dir, pooled, config, backend="multiprocess").success
    assert _rejects(pooled) == rejects and _kept(pooled) == _kept(root)


def test_an_edited_eval_set_filters_again_and_a_folder_of_eval_sets_is_read(wiki, tmp_path):
    """The stage config keys the eval files by name and content: a new record in an eval set
    filters the shards again (the new quote is a reject too); a file touched but unchanged is
    not a change. A folder is read like the input folder."""
    input_dir, _, plain = wiki
    evals = tmp_path / "evals"
    evals.mkdir()
    first, first_gram = _quote(plain, 14, skip=2)
    bench = evals / "bench.jsonl"
    bench.write_text(json.dumps({"text": first}) + "\n")
    root = tmp_path / "wh"
    assert _run(input_dir, root, {"paths": [str(evals)]}).success
    before = _rejects(root)
    assert before and all(v.startswith(f"{evals}/bench.jsonl:1 text: ") for v in before.values())

    second, second_gram = _quote(plain, 14, skip=11)
    with bench.open("a") as handle:
        handle.write(json.dumps({"text": second}) + "\n")
    edited = _run(input_dir, root, {"paths": [str(evals)]})
    assert edited.success
    assert materializations(edited)[FILTERED_DOCUMENTS]["shards_computed"].value > 0
    after = _rejects(root)
    assert set(before) < set(after)
    assert {d for d, v in after.items() if ":2 text: " in v} == {
        d for d, t in plain.items() if _holds(t, second_gram) and not _holds(t, first_gram)
    }

    os.utime(bench, ns=(1, 1))  # the same bytes with another stamp: not a change
    touched = _run(input_dir, root, {"paths": [str(evals)]})
    assert touched.success
    assert materializations(touched)[FILTERED_DOCUMENTS]["shards_computed"].value == 0


def test_eval_sets_are_compared_after_the_documents_preset(wiki, tmp_path):
    """Under ``ascii_lower`` (the study's preset) the documents lose punctuation; an eval text
    quoting one with its punctuation still matches."""
    input_dir, _, plain = wiki
    doc_id, text = next((d, t) for d, t in sorted(plain.items()) if "," in t and len(t) > 300)
    quote = text[text.index(",") - 40 : text.index(",") + 60]
    (tmp_path / "e.jsonl").write_text(json.dumps({"text": quote.upper()}) + "\n")
    root = tmp_path / "wh"
    result = _run(input_dir, root, {"paths": [str(tmp_path / "e.jsonl")]}, preset="ascii_lower")
    assert result.success
    assert doc_id in _rejects(root)


@pytest.mark.parametrize(
    ("content", "fields", "message"),
    [
        ('{"prompt": "no question"}\n', ["question"], "e.jsonl:1: missing_text"),
        ('{"question": "four words only here"}\n', ["question"], "no text of 8 words or more"),
        ("not json\n", ["text"], "e.jsonl:1: invalid_json"),
    ],
)
def test_a_bad_eval_set_fails_the_first_step_naming_it(wiki, tmp_path, content, fields, message):
    """A bad eval set fails the run before any shard of any stage is written (the raw stage
    checks every step's config), naming the setting, the file and the line."""
    input_dir = wiki[0]
    (tmp_path / "e.jsonl").write_text(content)
    root = tmp_path / "wh"
    result = _run(input_dir, root, {"paths": [str(tmp_path / "e.jsonl")], "fields": fields})
    assert not result.success
    error = _failure_message(result)
    assert "decontaminate" in error and message in error
    assert not (root / RAW_DOCUMENTS).exists()


def test_an_eval_path_missing_empty_or_of_no_known_format_is_refused(wiki, tmp_path):
    input_dir = wiki[0]
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.docx").write_text("not an eval set")
    for path, message in [
        (str(tmp_path / "notes.docx"), "unsupported file type"),
        (str(tmp_path / "nowhere.jsonl"), "no such file or folder"),
        (str(tmp_path / "empty"), "holds no input files"),
    ]:
        result = _run(input_dir, tmp_path / "wh", {"paths": [path]})
        assert not result.success
        assert "decontaminate.paths" in _failure_message(result)
        assert message in _failure_message(result)


def test_an_eval_file_the_input_folder_also_holds_is_refused_unless_set_aside(wiki, tmp_path):
    """An eval file that ``raw_documents`` would also ingest (in the input folder, or reached
    through a link in it) fails the first step naming both, before any shard: its records would
    become documents and its short ones be trained on. In a ``_`` folder of the input it is not
    input, and the run goes through."""
    input_dir = tmp_path / "input"
    shutil.copytree(wiki[0], input_dir)
    question, _ = _quote(wiki[2], 14, skip=3)
    record = json.dumps({"text": question}) + "\n"
    (input_dir / "evals").mkdir()
    (input_dir / "evals" / "bench.jsonl").write_text(record)
    elsewhere = tmp_path / "evals"
    elsewhere.mkdir()
    (elsewhere / "other.jsonl").write_text(record)
    (input_dir / "linked").symlink_to(elsewhere, target_is_directory=True)
    for path, input_name in [
        (input_dir / "evals", "evals/bench.jsonl"),
        (elsewhere / "other.jsonl", "linked/other.jsonl"),
    ]:
        root = tmp_path / "refused"
        result = _run(input_dir, root, {"paths": [str(path)]})
        assert not result.success
        error = _failure_message(result)
        assert "decontaminate.paths" in error and "also read as input" in error
        assert f"(input file {input_name!r})" in error
        assert not (root / RAW_DOCUMENTS).exists()

    (input_dir / "linked").unlink()
    (input_dir / "evals").rename(input_dir / "_evals")
    root = tmp_path / "aside"
    result = _run(input_dir, root, {"paths": [str(input_dir / "_evals")]})
    assert result.success
    rejects = _rejects(root)
    assert rejects
    assert all(v.startswith(f"{input_dir}/_evals/bench.jsonl:1 text: ") for v in rejects.values())
    assert set(_kept(root)) | set(rejects) == set(wiki[2])  # no eval record was ingested


def test_eval_texts_follow_the_normalization_the_documents_came_through(wiki, tmp_path):
    """``normalized_documents`` materialized alone with another preset since the tokenized
    documents were made: the filter stage, materialized alone, still normalizes the eval texts
    like the documents it reads (their lineage), so an accented quote still matches."""
    input_dir = wiki[0]
    root = tmp_path / "wh"
    no_language = {"language": {"enabled": False}}
    assert _run(input_dir, root, filters=no_language).success
    kept = _kept(root)
    doc_id, quote = next(
        (d, " ".join(t.split()[i : i + 14]))
        for d, t in sorted(kept.items())
        for i in range(len(t.split()) - 14)
        # An accented word in the middle: both 13-grams of the 14 words hold it.
        if not t.split()[i + 7].isascii()
        and all(any(c.isalnum() for c in w) for w in t.split()[i : i + 14])
    )
    (tmp_path / "e.jsonl").write_text(json.dumps({"text": quote}) + "\n")
    config = {**no_language, "decontaminate": {"paths": [str(tmp_path / "e.jsonl")]}}
    assert _run(input_dir, root, filters=config).success
    assert doc_id in _rejects(root)

    resources = {"compute": ComputeResource(), "warehouse": WarehouseResource(root=str(root))}
    for asset, asset_config in [
        (NORMALIZED_DOCUMENTS, {"preset": "ascii_lower"}),
        (FILTERED_DOCUMENTS, config),
    ]:
        result = dg.materialize(
            PIPELINE_ASSET_DEFS,
            selection=[asset],
            resources=resources,
            run_config={"ops": {asset: {"config": asset_config}}},
            raise_on_error=False,
        )
        assert result.success
    assert doc_id in _rejects(root)

"""Mistakes a first-time user makes, each caught and named, through real
materializations on small data: a ``text_field`` that matches no record (every row rejected, the
run green, zero training steps), an input folder of empty files, one file of another layout
among good ones, labels with the ``packed`` layout (labels dropped), a ``seq_len`` that cuts
most of every document, and an empty label cell."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS, raw_documents, training_batches
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import RAW_DOCUMENTS, TRAINING_BATCHES
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.conftest import pipeline_run_config

QUICK_FILTERS = {
    "min_tokens": 1,
    "quality": {"enabled": False},
    "repetition": {"enabled": False},
    "flagged_words": {"enabled": False},
    "language": {"enabled": False},
    "dedup": {"exact": False, "near": False},
}


def _text(i: int, words: int = 40) -> str:
    return " ".join(f"word{i}x{j}" for j in range(words)) + f" document number {i}."


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _run(assets, input_dir: Path, root: Path, **ops) -> tuple[dg.ExecuteInProcessResult, list]:
    """Materialize ``assets``; the result and the run's WARNING log lines."""
    instance = dg.DagsterInstance.ephemeral()
    config = pipeline_run_config(input_dir, rows_per_shard=10, **ops)
    names = {a.key.to_user_string() for a in assets}
    config["ops"] = {op: c for op, c in config["ops"].items() if op in names}
    result = dg.materialize(
        assets,
        resources={
            "compute": ComputeResource(),
            "warehouse": WarehouseResource(root=str(root)),
        },
        run_config=config,
        raise_on_error=False,
        instance=instance,
    )
    warnings = [
        entry.user_message
        for entry in instance.all_logs(result.run_id)
        if entry.level == logging.WARNING and not entry.is_dagster_event
    ]
    return result, warnings


def _failure(result) -> tuple[str, str]:
    """(step, message) of the run's first step failure."""
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failures, "expected a step failure"
    return failures[0].step_key, failures[0].step_failure_data.error.to_string()


def _sql(root: Path, query: str) -> list[tuple]:
    with duckdb.connect(str(root / "catalog.duckdb"), read_only=True) as con:
        return con.execute(query).fetchall()


def test_a_text_field_that_matches_no_record_fails_raw_documents_and_again_on_a_rerun(tmp_path):
    """The text in ``content``, ``text_field`` left at ``text``: every record was a
    ``missing_text`` reject, the run succeeded with every check passing and no batch. Now
    raw_documents fails, naming the counts, the setting and its value, after recording its
    shards and rejects (queryable); the re-run, which reuses those shards, fails the same way;
    the right ``text_field`` then works."""
    (tmp_path / "in").mkdir()
    _write_jsonl(
        tmp_path / "in" / "train.jsonl", [{"id": i, "content": _text(i)} for i in range(25)]
    )
    root = tmp_path / "wh"
    first, _ = _run(PIPELINE_ASSET_DEFS, tmp_path / "in", root, filtered_documents=QUICK_FILTERS)
    assert not first.success
    step, message = _failure(first)
    assert step == RAW_DOCUMENTS
    assert "no document kept: all 25 record(s) of 1 input file(s)" in message
    assert "missing_text: 25" in message
    assert "field 'text' (raw_documents.config.text_field)" in message
    assert "set raw_documents.config.text_field" in message
    assert '"content"' in message  # the first rejected record shows where the text is
    # Recorded before failing: the rejects are queryable, nothing downstream ran.
    assert _sql(root, "SELECT reason, count(*) FROM raw_documents_rejects GROUP BY 1") == [
        ("missing_text", 25)
    ]
    assert not first.get_asset_materialization_events()

    again, _ = _run(PIPELINE_ASSET_DEFS, tmp_path / "in", root, filtered_documents=QUICK_FILTERS)
    assert not again.success
    assert _failure(again) == (RAW_DOCUMENTS, message.replace(first.run_id, again.run_id))
    assert _sql(
        root,
        "SELECT shards, shards_skipped FROM materializations "
        "WHERE asset = 'raw_documents' ORDER BY finished_at",
    ) == [(3, 0), (3, 3)]

    fixed, _ = _run(
        PIPELINE_ASSET_DEFS,
        tmp_path / "in",
        root,
        raw_documents={"text_field": "content"},
        filtered_documents=QUICK_FILTERS,
    )
    assert fixed.success
    assert _sql(root, "SELECT count(*) FROM training_batches")[0][0] > 0


def test_an_input_folder_of_empty_files_fails_saying_so(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(b"")
    (tmp_path / "in" / "b.csv").write_bytes(b"")
    result, _ = _run([raw_documents], tmp_path / "in", tmp_path / "wh")
    assert not result.success
    step, message = _failure(result)
    assert step == RAW_DOCUMENTS
    assert "no document kept: all 2 record(s) of 2 input file(s)" in message
    assert "empty_file: 2" in message and "The input files are empty" in message
    assert "text_field" not in message


def test_a_file_whose_records_are_all_rejected_among_good_ones_is_named_in_a_warning(tmp_path):
    """One file of another layout (its text under ``body``) and one empty file beside a good one:
    the run goes on with the good file's documents, and a WARNING names each file that gave nothing,
    with its top reason."""
    (tmp_path / "in").mkdir()
    _write_jsonl(tmp_path / "in" / "good.jsonl", [{"text": _text(i)} for i in range(5)])
    _write_jsonl(tmp_path / "in" / "other.jsonl", [{"body": _text(i)} for i in range(12)])
    (tmp_path / "in" / "empty.jsonl").write_bytes(b"")
    result, warnings = _run([raw_documents], tmp_path / "in", tmp_path / "wh")
    assert result.success
    (warning,) = [w for w in warnings if "gave no document" in w]
    assert "2 input file(s) gave no document" in warning
    assert "'empty.jsonl' (1 record(s); empty_file: 1)" in warning
    assert "'other.jsonl' (12 record(s); missing_text: 12)" in warning
    assert "good.jsonl" not in warning


def _labelled_csv(folder: Path) -> None:
    folder.mkdir()
    rows = ["text,label"] + [f"{_text(i)},{'pos' if i % 2 else 'neg'}" for i in range(12)]
    rows.append(f"{_text(99)},")  # an empty label cell
    (folder / "reviews.csv").write_text("\n".join(rows) + "\n")


def test_labels_with_the_packed_layout_are_refused_at_the_first_step(tmp_path):
    """``label_field`` with the default ``packed`` layout: every label was dropped silently (a
    packed block has no label column). Refused before any work, naming both settings; the padded
    layout keeps the labels, and an empty label cell is a ``missing_label`` reject.
    ``training_batches`` run alone with ``packed`` on labelled documents is refused too."""
    _labelled_csv(tmp_path / "in")
    root = tmp_path / "wh"
    filters = {**QUICK_FILTERS, "label_field": "label"}
    result, _ = _run(PIPELINE_ASSET_DEFS, tmp_path / "in", root, filtered_documents=filters)
    assert not result.success
    step, message = _failure(result)
    assert step == RAW_DOCUMENTS
    assert "filtered_documents.config.label_field is set" in message
    assert "training_batches.config.layout is 'packed'" in message
    assert "'padded' or 'bucketed'" in message
    assert not (root / RAW_DOCUMENTS).exists()

    result, _ = _run(
        PIPELINE_ASSET_DEFS,
        tmp_path / "in",
        root,
        filtered_documents=filters,
        training_batches={"layout": "padded", "seq_len": 64},
    )
    assert result.success
    assert dict(_sql(root, "SELECT label, count(*) FROM training_batches GROUP BY 1")) == {
        "pos": 6,
        "neg": 6,
    }
    assert _sql(root, "SELECT reason, value FROM filtered_documents_rejects") == [
        ("missing_label", "label=''")
    ]

    alone, _ = _run([training_batches], tmp_path / "in", root)  # packed, on labelled documents
    assert not alone.success
    step, message = _failure(alone)
    assert step == TRAINING_BATCHES and "'padded' or 'bucketed'" in message


@pytest.mark.parametrize(
    ("batches", "keeps"),
    [
        ({"layout": "padded"}, "Layout 'packed' keeps them"),
        ({"layout": "bucketed"}, "Layout 'packed' keeps them"),
        ({"layout": "packed", "overflow": "truncate"}, "Overflow 'split' keeps them"),
    ],
)
def test_a_layout_that_cuts_most_tokens_warns(tmp_path, batches, keeps):
    """Documents of ~200 tokens at seq_len 32: most tokens cut, said only by the metadata's
    ``truncated_tokens``. Now a WARNING says how many, what share, and what keeps them."""
    (tmp_path / "in").mkdir()
    _write_jsonl(tmp_path / "in" / "long.jsonl", [{"text": _text(i, 60)} for i in range(6)])
    result, warnings = _run(
        PIPELINE_ASSET_DEFS,
        tmp_path / "in",
        tmp_path / "wh",
        filtered_documents=QUICK_FILTERS,
        training_batches={**batches, "seq_len": 32},
    )
    assert result.success
    (warning,) = [w for w in warnings if "were cut off" in w]
    assert warning.startswith("training_batches: ") and keeps in warning
    assert "raise seq_len" in warning
    meta = {
        e.asset_key.to_user_string(): e.step_materialization_data.materialization.metadata
        for e in result.get_asset_materialization_events()
    }[TRAINING_BATCHES]
    cut, share = meta["truncated_tokens"].value, meta["truncated_fraction"].value
    assert share > 0.5 and f"{cut:,} of the documents'" in warning and f"({share:.0%})" in warning


def test_a_layout_that_cuts_little_does_not_warn(tmp_path):
    (tmp_path / "in").mkdir()
    _write_jsonl(tmp_path / "in" / "short.jsonl", [{"text": _text(i, 10)} for i in range(6)])
    result, warnings = _run(
        PIPELINE_ASSET_DEFS,
        tmp_path / "in",
        tmp_path / "wh",
        filtered_documents=QUICK_FILTERS,
        training_batches={"layout": "padded", "seq_len": 256},
    )
    assert result.success
    assert not [w for w in warnings if "were cut off" in w]

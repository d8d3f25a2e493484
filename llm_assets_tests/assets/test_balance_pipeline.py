"""``training_batches.config.balance`` end to end on the shipped reviews (36 negative, 125
positive once mapped): real materializations, real Parquet and DuckDB, the process pool."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from llm_assets.constants import TRAINING_BATCHES
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.assets.test_pipeline import (
    SHORT_TEXT_FILTERS,
    materializations,
    materialize,
    output_checksums,
)
from llm_assets_tests.conftest import REPO

MAPPING = {"1": "negative", "2": "negative", "4": "positive", "5": "positive"}
FILTERS = {"label_field": "rating", "label_mapping": MAPPING, **SHORT_TEXT_FILTERS}
BATCHES = {"layout": "padded", "seq_len": 256, "shuffle_buckets": 3, "validation_fraction": 0.2}


def _run(input_dir: Path, root: Path, backend: str = "in_process", **batches):
    return materialize(
        input_dir,
        root,
        backend=backend,
        filtered_documents=FILTERS,
        training_batches={**BATCHES, **batches},
    )


def _split_rows(root: Path) -> dict[str, list[tuple[str, str]]]:
    """(doc_id, label) of every row of the current batch files, per split, in file order."""
    catalog = WarehouseResource(root=str(root)).catalog()
    rows: dict[str, list[tuple[str, str]]] = {"train": [], "validation": []}
    for shard in catalog.current_shards(TRAINING_BATCHES):
        table = pq.read_table(shard.path, columns=["doc_id", "label"])
        split = shard.shard.rsplit("-", 1)[0]
        rows[split] += list(
            zip(table["doc_id"].to_pylist(), table["label"].to_pylist(), strict=True)
        )
    return rows


@pytest.fixture(scope="module")
def reviews(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("reviews")
    shutil.copy(REPO / "data" / "sample" / "reviews.csv", folder)
    return folder


def test_oversample_evens_out_the_train_classes_leaves_validation_alone_on_every_backend(
    reviews, tmp_path
):
    """Unbalanced, then oversampled: train holds as many negative as positive rows (each
    negative document 2 to 5 times, copies under its own doc_id, placed apart), validation is
    the same rows as unbalanced, no document is in both splits, the counts are in the metadata
    and in SQL (the view's ``split`` column), and the check passes; the process pool writes the
    same bytes."""
    root = tmp_path / "wh"
    plain = _run(reviews, root)
    assert plain.success
    before = _split_rows(root)
    counts = {split: Counter(label for _, label in rows) for split, rows in before.items()}
    assert counts["train"]["positive"] > 2 * counts["train"]["negative"] > 0  # the case at hand
    meta = materializations(plain)[TRAINING_BATCHES]
    assert meta["label_documents"].value == {k: dict(sorted(c.items())) for k, c in counts.items()}

    result = _run(reviews, root, balance="oversample")
    assert result.success
    assert all(c.passed for c in result.get_asset_check_evaluations())
    after = _split_rows(root)
    largest = counts["train"]["positive"]
    assert Counter(label for _, label in after["train"]) == {
        "negative": largest,
        "positive": largest,
    }
    assert after["validation"] == before["validation"]
    copies = Counter(doc for doc, label in after["train"] if label == "negative")
    assert set(copies) == {doc for doc, label in before["train"] if label == "negative"}
    low, high = (
        divmod(largest, counts["train"]["negative"])[0],
        -(-largest // counts["train"]["negative"]),
    )
    assert set(copies.values()) == {low, high}
    train_docs = {doc for doc, _ in after["train"]}
    assert not train_docs & {doc for doc, _ in after["validation"]}
    # Copies of one document are not side by side (in each file, rows are in shuffle order).
    neighbours = sum(
        a == b for (a, _), (b, _) in zip(after["train"], after["train"][1:], strict=False)
    )
    assert neighbours < len(after["train"]) // 10
    # The view says each row's split: the counts per split and class in SQL.
    catalog = WarehouseResource(root=str(root)).catalog()
    in_sql = catalog.query("SELECT split, label, count(*) FROM training_batches GROUP BY ALL")
    assert {(split, label): n for split, label, n in in_sql} == {
        (split, label): n
        for split, rows in after.items()
        for label, n in Counter(label for _, label in rows).items()
    }
    meta = materializations(result)[TRAINING_BATCHES]
    assert meta["label_documents"].value["train"] == {"negative": largest, "positive": largest}
    assert meta["label_documents_in"].value["train"] == dict(sorted(counts["train"].items()))
    assert meta["rows_in"].value == meta["documents"].value == sum(map(len, before.values()))
    assert meta["rows_out"].value == sum(map(len, after.values()))
    for shard in WarehouseResource(root=str(root)).catalog().current_shards(TRAINING_BATCHES):
        footer = pq.read_schema(shard.path).metadata
        train = shard.shard.startswith("train-")  # validation is never balanced
        assert footer.get(b"llm_assets.balance") == (b"oversample" if train else None)

    pooled = _run(reviews, tmp_path / "pool", backend="multiprocess", balance="oversample")
    assert pooled.success
    assert output_checksums(tmp_path / "pool") == output_checksums(root)


def test_undersample_keeps_the_smallest_class_count_and_the_rest_are_rejects_in_sql(
    reviews, tmp_path
):
    """Undersampled: the positive train documents beyond the negative count are
    ``undersampled`` rejects naming the counts (queryable with their source line); the rows
    reconcile; and max_copies caps an oversample at 2 copies per document."""
    root = tmp_path / "wh"
    result = _run(reviews, root, balance="undersample")
    assert result.success
    assert all(c.passed for c in result.get_asset_check_evaluations())
    rows = _split_rows(root)
    train = Counter(label for _, label in rows["train"])
    assert train["negative"] == train["positive"] > 0
    assert len({doc for doc, _ in rows["train"]}) == len(rows["train"])  # no copies
    catalog = WarehouseResource(root=str(root)).catalog()
    rejects = catalog.query(
        "SELECT reason, value, count(*), min(source_line) > 0 FROM training_batches_rejects "
        "GROUP BY ALL"
    )
    meta = materializations(result)[TRAINING_BATCHES]
    positive_in = meta["label_documents_in"].value["train"]["positive"]
    kept = train["positive"]
    assert rejects == [
        (
            "undersampled",
            f"class 'positive': {kept} of its {positive_in} train documents kept "
            "(balance: undersample)",
            positive_in - kept,
            True,
        )
    ]
    assert meta["rows_rejected"].value == positive_in - kept
    assert "undersampled" in meta["reject_reasons"].value

    capped = _run(reviews, root, balance="oversample", max_copies=2)
    assert capped.success
    train = Counter(label for _, label in _split_rows(root)["train"])
    negative_in = meta["label_documents_in"].value["train"]["negative"]
    assert train == {"negative": 2 * negative_in, "positive": positive_in}


def test_sft_rows_are_balanced_as_the_layout_uses_them_not_before_their_rejects(tmp_path):
    """Labelled SFT rows where half of one class's prompts fill ``seq_len``: those are
    ``prompt_fills_sequence`` rejects, and the classes are even among the rows that remain."""
    import random

    rng = random.Random(0)
    folder = tmp_path / "in"
    folder.mkdir()
    records = []
    for i in range(240):
        label = "pos" if i % 3 else "neg"  # 160 pos, 80 neg
        long_prompt = label == "pos" and i % 2 == 0  # half of pos: a prompt over seq_len
        words = 80 if long_prompt else 5
        records.append(
            {
                "instruction": " ".join(f"w{rng.randrange(1000)}" for _ in range(words)),
                "output": f"answer {i} " + " ".join(f"a{rng.randrange(1000)}" for _ in range(8)),
                "label": label,
            }
        )
    (folder / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    for balance in ("oversample", "undersample"):
        root = tmp_path / balance
        result = materialize(
            folder,
            root,
            raw_documents={"text_field": "output"},
            normalized_documents={"preset": "none"},
            tokenized_documents={"prompt_template": "Q: {instruction}\nA: "},
            filtered_documents={"min_tokens": 1, "label_field": "label", **SHORT_TEXT_FILTERS},
            training_batches={**BATCHES, "seq_len": 64, "balance": balance},
        )
        assert result.success
        rows = _split_rows(root)
        train = Counter(label for _, label in rows["train"])
        assert train["neg"] == train["pos"] > 0, (balance, train)
        catalog = WarehouseResource(root=str(root)).catalog()
        fills = catalog.query(
            "SELECT count(*) FROM training_batches_rejects WHERE reason = 'prompt_fills_sequence'"
        )[0][0]
        assert fills > 50  # the case at hand


def _warnings(instance, result) -> list[str]:
    import logging

    return [
        entry.user_message
        for entry in instance.all_logs(result.run_id)
        if entry.level == logging.WARNING and not entry.is_dagster_event
    ]


@pytest.mark.parametrize(
    ("labels", "balance", "warning"),
    [
        (["rare"] + ["common"] * 30, "oversample", "'rare' up to 30 times (1 documents)"),
        (["rare"] + ["common"] * 30, "undersample", "keeps 2 of 31 train documents"),
        (["only"] * 12, "oversample", "the train split has 1 class(es) ('only'): nothing to"),
    ],
)
def test_a_balance_that_does_little_good_says_so_in_a_warning(tmp_path, labels, balance, warning):
    """Extreme cases run as asked, with a WARNING: one document copied 30 times (set
    max_copies), an undersample keeping 2 of 31 documents, a single class."""
    import dagster as dg

    folder = tmp_path / "in"
    folder.mkdir()
    records = [
        {
            "text": f"review number {i} says the product is fine in words of its own {i * 7}",
            "label": label,
        }
        for i, label in enumerate(labels)
    ]
    (folder / "reviews.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    instance = dg.DagsterInstance.ephemeral()
    result = materialize(
        folder,
        tmp_path / "wh",
        instance=instance,
        filtered_documents={"min_tokens": 1, "label_field": "label", **SHORT_TEXT_FILTERS},
        training_batches={**BATCHES, "validation_fraction": 0, "balance": balance},
    )
    assert result.success
    assert any(warning in line for line in _warnings(instance, result)), _warnings(instance, result)


def test_a_scatter_folder_of_an_earlier_release_is_scattered_again_for_its_label_counts(
    reviews, tmp_path
):
    """A scatter folder written before the class counts (no ``labels`` in its manifest) is
    scattered again, not read as a bucket without labels (every class count 0)."""
    root = tmp_path / "wh"
    assert _run(reviews, root).success
    manifests = list((root / TRAINING_BATCHES / "_scatter").glob("*/manifest.json"))
    assert manifests
    for path in manifests:
        manifest = json.loads(path.read_text())
        del manifest["labels"]
        path.write_text(json.dumps(manifest))
    result = _run(reviews, root, balance="oversample")
    assert result.success
    assert all("labels" in json.loads(p.read_text()) for p in manifests)
    train = Counter(label for _, label in _split_rows(root)["train"])
    assert train["negative"] == train["positive"]


@pytest.mark.parametrize(
    ("filters", "batches", "message"),
    [
        (SHORT_TEXT_FILTERS, {"balance": "oversample"}, "has no label column"),
        (FILTERS, {"balance": "undersample", "megatron": True}, "megatron is true"),
        (FILTERS, {"balance": "undersample", "max_copies": 2}, "max_copies caps the copies"),
    ],
)
def test_a_balance_that_cannot_be_done_is_refused_at_the_first_step(
    reviews, tmp_path, filters, batches, message
):
    """Balance without labels, with the Megatron export (which has no labels), or with a
    max_copies it would ignore: refused before any work, naming the settings."""
    result = materialize(
        reviews,
        tmp_path / "wh",
        filtered_documents=filters,
        training_batches={**BATCHES, **batches},
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "raw_documents"
    assert message in failure.step_failure_data.error.to_string()
    assert not (tmp_path / "wh" / "raw_documents").exists()

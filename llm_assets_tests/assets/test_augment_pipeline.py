"""``training_batches.config.augment`` end to end on the shipped reviews (36 negative, 125
positive once mapped): real materializations, real Parquet and DuckDB, the process pool."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from llm_assets.constants import FILTERED_DOCUMENTS, TRAINING_BATCHES
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.reader import TokenBatchDataset
from llm_assets.stages.engine import StageInputError
from llm_assets.stages.tokenized_documents import tokenizer_metadata
from llm_assets.stages.training_batches.checks import _augment_tokenizer
from llm_assets.warehouse.prune import _current_scatter_names
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.assets.test_balance_pipeline import (
    BATCHES,
    FILTERS,
    _run,
    reviews,  # noqa: F401 (the fixture)
)
from llm_assets_tests.assets.test_pipeline import (
    SHORT_TEXT_FILTERS,
    materializations,
    materialize,
    output_checksums,
)


def _rows(root: Path) -> dict[str, list[dict]]:
    """Every row of the current batch files per split, in file order: doc_id, label (or None),
    augmented, and the real tokens (attention mask 1)."""
    catalog = WarehouseResource(root=str(root)).catalog()
    out: dict[str, list[dict]] = {"train": [], "validation": []}
    for shard in catalog.current_shards(TRAINING_BATCHES):
        table = pq.read_table(shard.path)
        names = table.column_names
        for row in table.to_pylist():
            out[shard.shard.rsplit("-", 1)[0]].append(
                {
                    "doc_id": row["doc_id"],
                    "label": row.get("label"),
                    "augmented": row["augmented"] if "augmented" in names else None,
                    "tokens": [
                        t for t, m in zip(row["input_ids"], row["attention_mask"], strict=True) if m
                    ],
                }
            )
    return out


def _document_tokens(root: Path) -> dict[str, list[int]]:
    catalog = WarehouseResource(root=str(root)).catalog()
    return dict(catalog.query(f"SELECT doc_id, input_ids FROM {FILTERED_DOCUMENTS}"))


def test_oversampled_copies_are_variants_flagged_in_sql_and_validation_is_left_alone(
    reviews,  # noqa: F811
    tmp_path,
):
    """Oversample with ``augment: eda``: train is as even as without it, each negative document
    is there once as itself and its copies are variants (other tokens, ``augmented`` true, the
    edits counted in the metadata and the train files' footers), validation is the same rows as
    a run without augment, a rerun reuses everything, the augment run's scatter folders are its
    own (with the text) and prune keeps them, and the process pool writes the same bytes."""
    plain_root = tmp_path / "plain"
    assert _run(reviews, plain_root, balance="oversample").success
    plain = _rows(plain_root)

    root = tmp_path / "wh"
    result = _run(reviews, root, balance="oversample", augment="eda")
    assert result.success
    assert all(c.passed for c in result.get_asset_check_evaluations())
    rows = _rows(root)
    assert Counter(r["label"] for r in rows["train"]) == Counter(r["label"] for r in plain["train"])
    assert rows["validation"] == [{**r, "augmented": False} for r in plain["validation"]]
    documents = _document_tokens(root)
    itself = Counter(r["doc_id"] for r in rows["train"] if not r["augmented"])
    assert set(itself.values()) == {1}
    variants = [r for r in rows["train"] if r["augmented"]]
    assert {r["label"] for r in variants} == {"negative"}  # the copies: the smaller class's
    assert len(variants) == len(rows["train"]) - len(itself) > 40
    for r in rows["train"]:
        same = r["tokens"] == documents[r["doc_id"]]
        assert same != r["augmented"], r["doc_id"]  # reviews have words enough for every edit
    meta = materializations(result)[TRAINING_BATCHES]
    made = {k: meta[k].value for k in meta if k.startswith("augmented")}
    assert made["augmented"] == len(variants)
    assert sum(made[f"augmented_{e}"] for e in ("deletion", "swap", "insertion")) == len(variants)
    assert min(made[f"augmented_{e}"] for e in ("deletion", "swap", "insertion")) > 5
    catalog = WarehouseResource(root=str(root)).catalog()
    assert catalog.query(
        "SELECT split, augmented, count(*) FROM training_batches GROUP BY ALL ORDER BY ALL"
    ) == [
        ("train", False, len(itself)),
        ("train", True, len(variants)),
        ("validation", False, len(rows["validation"])),
    ]
    for shard in catalog.current_shards(TRAINING_BATCHES):
        footer = pq.read_schema(shard.path).metadata
        train = shard.shard.startswith("train-")
        assert footer.get(b"llm_assets.augment") == (b"eda" if train else None)
    # The scatter folders of augment runs hold the text: their own, kept by prune.
    scatter = root / TRAINING_BATCHES / "_scatter"
    plain_names = {p.name for p in (plain_root / TRAINING_BATCHES / "_scatter").iterdir()}
    names = {p.name for p in scatter.iterdir()}
    assert names and not names & plain_names
    filtered = catalog.current_shards(FILTERED_DOCUMENTS)
    assert _current_scatter_names(catalog, filtered) == names

    again = _run(reviews, root, balance="oversample", augment="eda")
    assert again.success
    assert materializations(again)[TRAINING_BATCHES]["shards_computed"].value == 0
    pooled = tmp_path / "pool"
    assert _run(reviews, pooled, "multiprocess", balance="oversample", augment="eda").success
    assert output_checksums(pooled) == output_checksums(root)


def test_augment_copies_vary_every_train_document_with_or_without_labels(
    reviews,  # noqa: F811
    tmp_path,
):
    """Unlabelled documents with ``augment_copies: 2``: each train document three times, two of
    them variants (numbered copies, so not twice the same), and the reader's batches keep the
    flag a bool mask; with an undersample, each kept document twice and the classes even."""
    root = tmp_path / "plain"
    result = materialize(
        reviews,
        root,
        filtered_documents=SHORT_TEXT_FILTERS,
        training_batches={**BATCHES, "pad_to": "longest", "augment": "eda", "augment_copies": 2},
    )
    assert result.success
    rows = _rows(root)
    assert {r["label"] for r in rows["train"]} == {None}
    per_document: dict[str, list[dict]] = {}
    for r in rows["train"]:
        per_document.setdefault(r["doc_id"], []).append(r)
    assert {len(v) for v in per_document.values()} == {3}
    for copies in per_document.values():
        assert sorted(r["augmented"] for r in copies) == [False, True, True]
        assert len({tuple(r["tokens"]) for r in copies}) == 3
    assert {r["augmented"] for r in rows["validation"]} == {False}
    assert materializations(result)[TRAINING_BATCHES]["augmented"].value == 2 * len(per_document)
    # Found by review: pre-formed batches as tensors turned the flag into int64 0/1, which
    # indexes rows instead of masking them.
    folder = Path(
        WarehouseResource(root=str(root)).catalog().current_shards(TRAINING_BATCHES)[0].path
    ).parent
    flags = []
    for tensors in ("np", "pt"):
        ds = TokenBatchDataset(folder, "train", batches=True, return_tensors=tensors)
        batch = ds[0]["augmented"]
        assert str(batch.dtype) in ("bool", "torch.bool"), batch.dtype
        flags.append([bool(f) for f in batch])
        assert str(
            TokenBatchDataset(folder, "train", return_tensors=tensors)[0]["augmented"].dtype
        ) in ("bool", "torch.bool")
    assert flags[0] == flags[1] and any(flags[0])

    under = _run(
        reviews, tmp_path / "under", balance="undersample", augment="eda", augment_copies=1
    )
    assert under.success
    train = _rows(tmp_path / "under")["train"]
    counts = Counter((r["label"], r["augmented"]) for r in train)
    n = counts[("negative", False)]
    assert counts == {
        ("negative", False): n,
        ("negative", True): n,
        ("positive", False): n,
        ("positive", True): n,
    }


def test_mostly_unchanged_variants_say_so_in_a_warning(tmp_path):
    """Text without spaces between words is one word: its variants are the documents (only an
    insertion can vary it), and the run says so in a WARNING rather than claim variety."""
    folder = tmp_path / "in"
    folder.mkdir()
    records = [
        {"text": f"这是第{i}条评论，产品质量很好，物流也很快，非常满意，推荐购买{i * 7}"}
        for i in range(40)
    ]
    (folder / "zh.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    )
    instance = dg.DagsterInstance.ephemeral()
    result = materialize(
        folder,
        tmp_path / "wh",
        instance=instance,
        normalized_documents={"preset": "none"},
        filtered_documents={"min_tokens": 1, **SHORT_TEXT_FILTERS},
        training_batches={**BATCHES, "augment": "eda", "augment_copies": 1},
    )
    assert result.success
    warnings = [
        entry.user_message
        for entry in instance.all_logs(result.run_id)
        if entry.level == logging.WARNING and not entry.is_dagster_event
    ]
    assert any("are their documents unchanged: too few words" in w for w in warnings), warnings


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            {"training_batches": {"augment": "eda", "balance": "oversample", "megatron": True}},
            "megatron is true",
        ),
        (
            {
                "tokenized_documents": {"prompt_template": "Q: {title}\nA: "},
                "training_batches": {"augment": "eda", "augment_copies": 1},
            },
            "the documents are SFT or chat rows",
        ),
        ({"training_batches": {"augment_copies": 1}}, "augment_copies is 1 but augment is 'none'"),
        ({"training_batches": {"augment": "eda"}}, "makes no copy to vary"),
        (
            {"training_batches": {"augment": "eda", "augment_copies": 1, "augment_rate": 0.7}},
            "augment_rate",
        ),
    ],
)
def test_an_augment_that_cannot_be_done_is_refused_at_the_first_step(
    reviews,  # noqa: F811
    tmp_path,
    ops,
    message,
):
    """With the Megatron export, with SFT rows, with copies that would be unvaried or variants
    of no copy, or a rate over half the words: refused before any work, naming the settings."""
    batches = {**BATCHES, **ops.pop("training_batches")}
    result = materialize(
        reviews, tmp_path / "wh", filtered_documents=FILTERS, training_batches=batches, **ops
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "raw_documents"
    assert message in failure.step_failure_data.error.to_string()
    assert not (tmp_path / "wh" / "raw_documents").exists()


def test_the_stage_refuses_sft_rows_and_a_tokenizer_changed_since_tokenization(tmp_path):
    """What ``training_batches`` checks itself when it runs alone (the run's first step does not
    see how its input was made): SFT rows; a tokenizer whose files are not those that made the
    ids; one that can no longer be built."""
    spec = BatchSpec(layout="padded", augment="eda", augment_copies=1)
    meta = tokenizer_metadata(TokenizerSpec())
    columns = ["doc_id", "input_ids", "text"]
    assert _augment_tokenizer(spec, columns, meta, megatron=False) == TokenizerSpec(
        engine=meta["llm_assets.tokenizer.engine"]
    )
    with pytest.raises(StageInputError, match="the documents are SFT or chat rows"):
        _augment_tokenizer(spec, [*columns, "prompt_tokens"], meta, megatron=False)
    changed = {**meta, "llm_assets.tokenizer.fingerprint": "sha256:0000"}
    with pytest.raises(StageInputError, match="has changed since tokenized_documents"):
        _augment_tokenizer(spec, columns, changed, megatron=False)
    gone = {**meta, "llm_assets.tokenizer.name": str(tmp_path / "deleted-tokenizer")}
    with pytest.raises(StageInputError, match="cannot be built"):
        _augment_tokenizer(spec, columns, gone, megatron=False)
    assert _augment_tokenizer(BatchSpec(), columns, changed, megatron=True) is None

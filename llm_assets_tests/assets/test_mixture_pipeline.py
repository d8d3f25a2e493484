"""``training_batches.config.mixture`` end to end: the shipped wiki sample (1,790 train documents
of most of the tokens) mixed with the shipped notes and reviews (206 short ones), in real
materializations, real Parquet and DuckDB, the process pool, and the prune."""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from llm_assets.assets.pipeline import validate_run_config
from llm_assets.constants import FILTERED_DOCUMENTS, TRAINING_BATCHES
from llm_assets.stages.engine import StageInputError
from llm_assets.warehouse.layout import SCATTER_FOLDER
from llm_assets.warehouse.prune import plan_prune
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.assets.test_pipeline import (
    SHORT_TEXT_FILTERS,
    _failure_message,
    materializations,
    materialize,
    output_checksums,
)
from llm_assets_tests.conftest import SAMPLE_DIR

BATCHES = {"layout": "padded", "seq_len": 1024, "shuffle_buckets": 3}
HALVES = [
    {"name": "wiki", "files": ["wiki/"], "weight": 1},
    {"name": "notes", "files": ["*"], "weight": 1},
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """wiki/wiki_sample.jsonl, notes/notes.txt and notes/reviews.csv."""
    folder = tmp_path_factory.mktemp("mixture")
    (folder / "wiki").mkdir()
    (folder / "notes").mkdir()
    shutil.copy(SAMPLE_DIR / "wiki_sample.jsonl", folder / "wiki")
    shutil.copy(SAMPLE_DIR / "notes.txt", folder / "notes")
    shutil.copy(SAMPLE_DIR / "reviews.csv", folder / "notes")
    return folder


def _run(
    corpus: Path,
    root: Path,
    mixture: dict | None = None,
    backend="in_process",
    instance: dg.DagsterInstance | None = None,
    **batches,
):
    return materialize(
        corpus,
        root,
        backend=backend,
        instance=instance,
        filtered_documents=SHORT_TEXT_FILTERS,
        training_batches={**BATCHES, **batches, **({"mixture": mixture} if mixture else {})},
    )


def _rows(root: Path) -> dict[str, list[tuple[str, str, int]]]:
    """(doc_id, source, tokens) of every row of the current batch files, per split; the source
    is the first folder of the row's input file, the tokens the document's own."""
    catalog = WarehouseResource(root=str(root)).catalog()
    known = {
        doc: (file.split("/")[0], n)
        for doc, file, n in catalog.query(
            f"SELECT doc_id, source_file, n_tokens FROM {FILTERED_DOCUMENTS}"
        )
    }
    rows: dict[str, list[tuple[str, str, int]]] = {"train": [], "validation": []}
    for shard in catalog.current_shards(TRAINING_BATCHES):
        ids = pq.read_table(shard.path, columns=["doc_id"])["doc_id"].to_pylist()
        rows[shard.shard.rsplit("-", 1)[0]] += [(doc, *known[doc]) for doc in ids]
    return rows


def _shares(rows: list[tuple[str, str, int]]) -> dict[str, float]:
    tokens: Counter[str] = Counter()
    for _, source, n in rows:
        tokens[source] += n
    return {source: n / sum(tokens.values()) for source, n in tokens.items()}


def test_undersample_by_tokens_meets_the_weights_and_every_left_out_document_is_a_reject(
    corpus, tmp_path
):
    """Equal weights by tokens: the notes (5 % of the train tokens) are kept whole, the wiki
    documents cut to as many tokens; every train document of the unmixed run is in the batches
    or an ``mixture_undersampled`` reject naming its source, queryable in SQL; validation is
    unchanged; no document twice; the shares are in the metadata (from the files' footers,
    which say the mixture), a rerun computes nothing and the process pool writes the same
    bytes."""
    root = tmp_path / "wh"
    plain = _run(corpus, root)
    assert plain.success
    before = _rows(root)
    assert _shares(before["train"])["wiki"] > 0.9  # the case at hand

    result = _run(corpus, root, {"sources": HALVES})
    assert result.success, _failure_message(result)
    assert all(c.passed for c in result.get_asset_check_evaluations())
    after = _rows(root)
    shares = _shares(after["train"])
    assert shares["wiki"] == pytest.approx(0.5, abs=0.03)
    assert after["validation"] == before["validation"]
    train = {doc for doc, _, _ in after["train"]}
    assert len(train) == len(after["train"])  # undersample: no copies
    notes_before = {doc for doc, source, _ in before["train"] if source == "notes"}
    assert notes_before <= train  # the source shortest of its share is kept whole
    catalog = WarehouseResource(root=str(root)).catalog()
    rejects = catalog.query(
        "SELECT doc_id, reason, value, source_file FROM training_batches_rejects"
    )
    assert {r[1] for r in rejects} == {"mixture_undersampled"}
    assert all(r[3].startswith("wiki/") and r[2].startswith("source 'wiki': ") for r in rejects)
    assert "mixture: undersample by tokens, share 50.0%" in rejects[0][2]
    assert train | {r[0] for r in rejects} == {doc for doc, _, _ in before["train"]}
    assert not train & {r[0] for r in rejects}

    meta = materializations(result)[TRAINING_BATCHES]
    mixture = meta["mixture"].value
    assert mixture["wiki"]["token_share"] == pytest.approx(shares["wiki"], abs=1e-5)
    assert mixture["notes"]["documents"] == len(notes_before)
    assert mixture["wiki"]["tokens"] == sum(n for _, s, n in after["train"] if s == "wiki")
    # The README's query gives the same per top folder.
    per_folder = catalog.query(
        "SELECT split_part(f.source_file, '/', 1) AS folder, count(*), sum(f.n_tokens) "
        "FROM training_batches b JOIN filtered_documents f USING (doc_id) "
        "WHERE b.split = 'train' GROUP BY 1"
    )
    assert {folder: (n, tokens) for folder, n, tokens in per_folder} == {
        name: (m["documents"], m["tokens"]) for name, m in mixture.items()
    }
    planned = meta["mixture_planned"].value
    assert planned["notes"]["documents"] == planned["notes"]["train_documents"]
    assert "| wiki | 50.0% |" in meta["mixture_table"].value
    for shard in catalog.current_shards(TRAINING_BATCHES):
        footer = pq.read_schema(shard.path).metadata
        assert (b"llm_assets.mixture" in footer) is shard.shard.startswith("train-")

    again = _run(corpus, root, {"sources": HALVES})
    assert again.success
    assert materializations(again)[TRAINING_BATCHES]["shards_computed"].value == 0
    assert materializations(again)[TRAINING_BATCHES]["mixture"].value == mixture
    pooled = _run(corpus, tmp_path / "pool", {"sources": HALVES}, backend="multiprocess")
    assert pooled.success
    assert output_checksums(tmp_path / "pool") == output_checksums(root)


def test_oversample_by_documents_repeats_the_small_source_capped_and_varied_by_augment(
    corpus, tmp_path
):
    """Equal weights by documents, oversampled with max_copies 3: every wiki document once,
    every note three times (its copies EDA variants, flagged), a WARNING that the cap keeps the
    notes below their share, no reject."""
    mixture = {"sources": HALVES, "by": "documents", "mode": "oversample", "max_copies": 3}
    instance = dg.DagsterInstance.ephemeral()
    result = _run(corpus, tmp_path / "wh", mixture, instance=instance, augment="eda")
    assert result.success, _failure_message(result)
    rows = _rows(tmp_path / "wh")
    held = Counter(doc for doc, _, _ in rows["train"])
    sources = {doc: source for doc, source, _ in rows["train"]}
    assert {held[d] for d in held if sources[d] == "wiki"} == {1}
    assert {held[d] for d in held if sources[d] == "notes"} == {3}
    catalog = WarehouseResource(root=str(tmp_path / "wh")).catalog()
    flagged = catalog.query(
        "SELECT augmented, count(*) FROM training_batches WHERE split = 'train' GROUP BY ALL"
    )
    notes = sum(1 for d in held if sources[d] == "notes")
    assert dict(flagged)[True] == 2 * notes
    meta = materializations(result)[TRAINING_BATCHES]
    assert meta["mixture"].value["notes"]["documents"] == 3 * notes
    assert meta["rows_rejected"].value == 0
    warnings = [
        entry.user_message
        for entry in instance.all_logs(result.run_id)
        if entry.level == logging.WARNING and not entry.is_dagster_event
    ]
    assert any("mixture max_copies 3 keeps 'notes' at 25.7% (share 50.0%)" in w for w in warnings)


def test_a_file_of_no_source_or_a_source_of_no_file_fails_the_batches_naming_them(corpus, tmp_path):
    """A mixture that leaves notes/reviews.csv out fails training_batches naming the file and
    how to include it; a source whose files match nothing names the source and the files there
    are; a source after a catch-all that holds its files says to put it first. The stages
    before it are reused from the first run."""
    root = tmp_path / "wh"
    narrow = [HALVES[0], {"name": "notes", "files": ["notes/notes.txt"], "weight": 1}]
    result = _run(corpus, root, {"sources": narrow})
    assert not result.success
    message = _failure_message(result)
    assert "belong to no source: 'notes/reviews.csv'" in message
    assert "files: ['*']" in message

    ghost = [*HALVES[:1], {"name": "code", "files": ["code/"], "weight": 1}, HALVES[1]]
    result = _run(corpus, root, {"sources": ghost})
    assert not result.success
    message = _failure_message(result)
    assert "source 'code' (files ['code/']) has no train document" in message
    assert "'notes/notes.txt'" in message

    catch_all_first = [HALVES[1], HALVES[0]]
    result = _run(corpus, root, {"sources": catch_all_first})
    assert not result.success
    message = _failure_message(result)
    assert "source 'wiki' (files ['wiki/']) has no train document" in message
    assert "belong to the earlier source(s) ['notes']" in message
    assert "put 'wiki' before them" in message


@pytest.mark.parametrize(
    ("batches", "message"),
    [
        ({"mixture": {"sources": HALVES[:1]}}, "at least two"),
        (
            {"mixture": {"sources": [HALVES[0], {**HALVES[1], "weight": 0}]}},
            "weight must be a number > 0",
        ),
        ({"mixture": {"sources": HALVES}, "balance": "undersample"}, "mixture and balance"),
        ({"mixture": {"sources": HALVES}, "megatron": True}, "Megatron-LM blends sources"),
        ({"mixture": {"sources": HALVES, "max_copies": 2}}, "caps the copies of mode"),
        ({"mixture": {"max_copies": 2}}, "mixture.sources is empty"),
    ],
)
def test_a_bad_mixture_fails_before_any_work_naming_the_setting(batches, message, tmp_path):
    config = {"ops": {TRAINING_BATCHES: {"config": batches}}}
    with pytest.raises(StageInputError, match=message) as caught:
        validate_run_config(config, tmp_path)
    assert str(caught.value).startswith(TRAINING_BATCHES)


def test_a_megatron_mixture_fails_the_first_step(corpus, tmp_path):
    result = _run(corpus, tmp_path / "wh", {"sources": HALVES}, megatron=True)
    assert not result.success
    assert "Megatron-LM blends sources itself" in _failure_message(result)
    catalog = WarehouseResource(root=str(tmp_path / "wh")).catalog()
    assert catalog.query("SELECT count(*) FROM shards")[0][0] == 0


def test_prune_keeps_the_scatter_of_the_current_mixed_batches(corpus, tmp_path):
    """Mixed, unmixed, then mixed again (its complete folder reused, nothing scattered): the
    current batches are the mixed ones, so prune keeps their scatter folders (which hold the
    source columns: folders of their own) and removes the unmixed run's."""
    root = tmp_path / "wh"
    assert _run(corpus, root, {"sources": HALVES}).success
    scatter = root / TRAINING_BATCHES / SCATTER_FOLDER
    mixed = {p.name for p in scatter.iterdir()}
    assert _run(corpus, root).success
    unmixed = {p.name for p in scatter.iterdir()} - mixed
    assert unmixed and mixed
    assert _run(corpus, root, {"sources": HALVES}).success
    catalog = WarehouseResource(root=str(root)).catalog()
    with catalog.session():
        plan = plan_prune(root, catalog)
    removed = {Path(item.path).name for item in plan.remove if Path(item.path).parent == scatter}
    assert removed == unmixed

"""Pruning a warehouse removes what no current output needs, keeps everything a re-run reuses,
and never changes an output: runs on real stages, a real catalog and real files."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llm_assets.compute.in_process import InProcessBackend
from llm_assets.constants import FILTERED_DOCUMENTS, PIPELINE_ASSETS, TRAINING_BATCHES
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.filters.chain import FilterSpec
from llm_assets.kernels.ingest.read import IngestSpec
from llm_assets.kernels.normalize import NormalizeSpec
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.reader import check_complete
from llm_assets.stages.engine import StageContext, StageReport
from llm_assets.stages.filtered_documents.dedup import _dedup_memo
from llm_assets.stages.filtered_documents.driver import run_filtered_documents
from llm_assets.stages.normalized_documents import run_normalized_documents
from llm_assets.stages.raw_documents import run_raw_documents
from llm_assets.stages.tokenized_documents import run_tokenized_documents
from llm_assets.stages.training_batches.driver import run_training_batches
from llm_assets.warehouse import prune as prune_module
from llm_assets.warehouse.catalog import Catalog, CatalogLockedError
from llm_assets.warehouse.layout import DEDUP_MEMO
from llm_assets.warehouse.prune import main, prune
from llm_assets_tests.conftest import SAMPLE_DIR

FILTER = FilterSpec.standard(quality=None, repetition=None)  # dedup on: an annotate phase


def _ctx(root: Path) -> StageContext:
    return StageContext(
        warehouse_root=root,
        catalog=Catalog(root / "catalog.duckdb"),
        compute=InProcessBackend(),
        log=logging.getLogger("test"),
    )


def _run(ctx: StageContext, input_dir: Path, preset: str = "default", seed: int = 0):
    reports = [
        run_raw_documents(ctx, input_dir, IngestSpec(), 1000),
        run_normalized_documents(ctx, NormalizeSpec(preset=preset)),
        run_tokenized_documents(ctx, TokenizerSpec()),
        run_filtered_documents(ctx, FILTER),
        run_training_batches(ctx, BatchSpec(seed=seed)),
    ]
    return {report.asset: report for report in reports}


def _views(ctx: StageContext) -> dict[str, list]:
    return {
        asset: ctx.catalog.query(f"SELECT * FROM {asset} ORDER BY ALL") for asset in PIPELINE_ASSETS
    } | {"rejects": ctx.catalog.query("SELECT * FROM rejects ORDER BY ALL")}


def _batches_folder(report: StageReport) -> Path:
    return Path(report.shards[0].path).parent


@pytest.fixture(scope="module")
def _grown_template(tmp_path_factory):
    """A warehouse as months of use leave it: the input grew (a file added: new shards, a new
    batches folder), a second normalization preset was tried and dropped, four batch seeds.
    Built once per module under ``work/`` and copied aside as it is: each test gets it back at
    the same absolute path (the catalog names its files by that path), mtimes kept."""
    base = tmp_path_factory.mktemp("grown")
    work = base / "work"
    inputs = work / "in"
    shutil.copytree(SAMPLE_DIR, inputs, ignore=shutil.ignore_patterns("wiki_more*"))
    ctx = _ctx(work / "wh")
    _run(ctx, inputs, preset="ascii_lower")
    first = _run(ctx, inputs)
    for name in ("wiki_more.jsonl.gz", "wiki_more.jsonl.zst"):
        shutil.copy(SAMPLE_DIR / name, inputs / name)
    older = [_batches_folder(_run(ctx, inputs, seed=s)[TRAINING_BATCHES]) for s in (1, 2, 3)]
    latest = _run(ctx, inputs)
    shutil.copytree(work, base / "template", symlinks=True)
    return base, first, older, latest


@pytest.fixture()
def grown(_grown_template):
    """The grown warehouse (:func:`_grown_template`), as it was built, for one test to change."""
    base, first, older, latest = _grown_template
    work = base / "work"
    shutil.rmtree(work)
    shutil.copytree(base / "template", work, symlinks=True)
    return _ctx(work / "wh"), work / "in", first, older, latest


def test_prune_removes_what_no_current_output_needs_and_changes_no_output(grown):
    ctx, inputs, first, older, latest = grown
    root = ctx.warehouse_root.resolve()
    before = _views(ctx)
    plan = prune(root, dry_run=True)
    assert plan.remove and all(Path(item.path).exists() for item in plan.remove)  # dry run
    removed = {Path(item.path) for item in plan.remove}
    # The ascii_lower normalized folder, the first input state's batches folder (older than the
    # two kept) and the scatter folders of shards whose content changed go; nothing current does.
    ascii_folder = root / "normalized_documents"
    assert sum(1 for p in removed if p.parent == ascii_folder) == 1
    assert _batches_folder(first[TRAINING_BATCHES]) in removed
    assert older[0] in removed and older[1] not in removed and older[2] not in removed
    assert _batches_folder(latest[TRAINING_BATCHES]) not in removed
    assert any(p.parent.name == "_scatter" for p in removed)
    for report in latest.values():
        for shard in report.shards:
            for path in (shard.path, shard.rejects_path, *shard.input_shards):
                assert path is None or not any(
                    Path(path).resolve() == p or p in Path(path).resolve().parents for p in removed
                ), path

    applied = prune(root, dry_run=False)
    assert [i.path for i in applied.remove] == [i.path for i in plan.remove]
    assert not any(Path(item.path).exists() for item in plan.remove)
    assert _views(ctx) == before
    # A re-run reuses everything (the annotate phase included: its folder is kept whole).
    again = _run(ctx, inputs)
    assert all(report.computed == 0 for report in again.values())
    assert again[FILTERED_DOCUMENTS].extra["filter_seconds"] >= 0
    assert check_complete(_batches_folder(again[TRAINING_BATCHES]))
    assert prune(root, dry_run=True).remove == []  # nothing left to remove


def test_after_pruning_an_earlier_config_is_computed_again_with_the_same_output(grown, tmp_path):
    ctx, inputs, *_ = grown
    reference = _ctx(tmp_path / "fresh")
    _run(reference, inputs, preset="ascii_lower")
    prune(ctx.warehouse_root, dry_run=False, keep_batches=0)
    back = _run(ctx, inputs, preset="ascii_lower")
    assert back["normalized_documents"].computed > 0  # its folder was pruned: recomputed
    assert _views(ctx) == _views(reference)


def test_keep_batches_zero_keeps_only_the_current_batches_folder(grown):
    ctx, *_, latest = grown
    prune(ctx.warehouse_root, dry_run=False, keep_batches=0)
    folders = [p for p in (ctx.warehouse_root / TRAINING_BATCHES).iterdir() if p.name != "_scatter"]
    assert folders == [_batches_folder(latest[TRAINING_BATCHES])]


def test_shard_files_of_an_input_file_since_removed_are_pruned(tmp_path):
    """The current folder keeps its current shards; those of an input file removed since (no
    longer in any current output) go."""
    inputs = tmp_path / "in"
    shutil.copytree(SAMPLE_DIR, inputs)
    ctx = _ctx(tmp_path / "wh")
    _run(ctx, inputs)
    (inputs / "notes.txt").unlink()
    _run(ctx, inputs)
    plan = prune(ctx.warehouse_root, dry_run=False)
    root = ctx.warehouse_root.resolve()
    gone = [Path(i.path).relative_to(root) for i in plan.remove if "notes.txt" in i.path]
    # Its shards in raw, normalized, tokenized, the filter's annotate phase and filtered, and
    # its scatter folder.
    assert sorted(str(p.parts[0]) for p in gone) == [
        "filtered_documents", "filtered_documents", "normalized_documents", "raw_documents",
        "tokenized_documents", "training_batches",
    ]  # fmt: skip
    assert not list(ctx.warehouse_root.rglob("part-notes.txt-*"))
    assert all(report.computed == 0 for report in _run(ctx, inputs).values())


def test_prune_waits_for_a_running_stage_and_fails_saying_so(grown):
    """A stage holds the catalog while it runs; a prune meanwhile waits (here 0.5 s), then fails
    saying so, having removed nothing. The stage here is another process holding the catalog."""
    ctx, *_ = grown
    path = ctx.warehouse_root / "catalog.duckdb"
    code = (
        "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); input()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"ready"
        with pytest.raises(CatalogLockedError, match="in use by another process"):
            prune(ctx.warehouse_root, dry_run=False, catalog=Catalog(path, lock_timeout_s=0.5))
    finally:
        holder.communicate(b"\n", timeout=30)
    assert all(Path(item.path).exists() for item in prune(ctx.warehouse_root).remove)


def test_the_command_line_prints_the_plan_and_removes_only_with_yes(grown, capsys):
    ctx, *_ = grown
    root = str(ctx.warehouse_root)
    assert main(["--warehouse", root]) == 0
    out = capsys.readouterr().out
    assert "to remove" in out and "run again with --yes" in out
    plan = prune(root)
    assert all(Path(i.path).exists() for i in plan.remove)
    assert main(["--warehouse", root, "--yes"]) == 0
    assert "freed" in capsys.readouterr().out
    assert not any(Path(i.path).exists() for i in plan.remove)
    assert main(["--warehouse", str(Path(root) / "nowhere")]) == 2
    assert "no warehouse at" in capsys.readouterr().err
    assert main(["--warehouse", root, "--keep-batches", "-1"]) == 2
    assert "keep_batches must be 0 or more" in capsys.readouterr().err
    assert prune_module.DEFAULT_KEEP_BATCHES == 2


def test_the_dagster_job_lists_by_default_and_removes_when_told(grown):
    """``prune_warehouse`` as the UI runs it: a dry run unless ``dry_run: false``, the plan in
    the log and in the op's output metadata."""
    import dagster as dg

    from llm_assets.constants import PRUNE_JOB
    from llm_assets.definitions import defs

    ctx, *_ = grown
    plan = prune(ctx.warehouse_root)
    job = defs.resolve_job_def(PRUNE_JOB)
    resources = {"warehouse": {"config": {"root": str(ctx.warehouse_root)}}}
    for dry_run in (True, False):
        result = job.execute_in_process(
            run_config={
                "resources": resources,
                "ops": {"prune_warehouse_op": {"config": {"dry_run": dry_run}}},
            },
            instance=dg.DagsterInstance.ephemeral(),
        )
        assert result.success
        summary = result.output_for_node("prune_warehouse_op")
        assert summary["to_remove"] == len(plan.remove) and summary["bytes"] == plan.bytes
        assert all(Path(i.path).exists() == dry_run for i in plan.remove)
        output = next(e for e in result.all_events if e.event_type_value == "STEP_OUTPUT")
        assert "to remove" in output.event_specific_data.metadata["plan"].value
    assert prune(ctx.warehouse_root).remove == []


def test_the_dedup_decisions_the_last_step_used_are_kept_even_if_older(tmp_path):
    """Input A, then A plus a file (B), then A again: the step decides A's duplicates again and
    finds its decisions file there already (older than B's). Prune keeps that one, which the
    memo names, not the newest file, so the next unchanged run still reuses it."""
    import json

    inputs = tmp_path / "in"
    shutil.copytree(SAMPLE_DIR, inputs)
    ctx = _ctx(tmp_path / "wh")
    _run(ctx, inputs)
    shutil.copy(inputs / "wiki_sample.jsonl", inputs / "again.jsonl")
    _run(ctx, inputs)
    (inputs / "again.jsonl").unlink()
    _run(ctx, inputs)
    memo = next(ctx.warehouse_root.rglob(f"dedup/{DEDUP_MEMO}"))
    used = Path(json.loads(memo.read_text())["path"])
    newest = max(memo.parent.glob("drops-*.parquet"), key=lambda p: p.stat().st_mtime)
    assert newest != used  # the case at hand
    removed = {Path(i.path) for i in prune(ctx.warehouse_root, dry_run=False).remove}
    assert newest in removed and used.exists()
    assert _dedup_memo(memo, json.loads(memo.read_text())["key"]) is not None


# --- what a review found prune could lose -------------------------------------------------------
def _current_files(ctx: StageContext) -> set[Path]:
    files = set()
    for asset in PIPELINE_ASSETS:
        for shard in ctx.catalog.current_shards(asset):
            files.update(Path(p) for p in (shard.path, shard.rejects_path) if p)
    return files


def test_asset_folders_moved_to_another_disk_behind_links_keep_their_current_outputs(grown):
    """tokenized_documents and training_batches moved elsewhere and linked back (a full disk): their
    current folders are kept."""
    ctx, *_ = grown
    root = ctx.warehouse_root
    elsewhere = root.parent / "other-disk"
    elsewhere.mkdir()
    for asset in ("tokenized_documents", TRAINING_BATCHES):
        shutil.move(str(root / asset), str(elsewhere / asset))
        (root / asset).symlink_to(elsewhere / asset)
    prune(root, dry_run=False, keep_batches=0)
    assert all(path.exists() for path in _current_files(ctx))
    assert check_complete(Path(ctx.catalog.current_shards(TRAINING_BATCHES)[0].path).parent)


def test_a_catalog_written_through_another_path_is_refused_removing_nothing(grown, tmp_path):
    """A copy of the warehouse (or a bind mount, a container volume): its catalog names files under
    the other path, so none of this root's files would match a current one. Refused."""
    ctx, *_ = grown
    copy = tmp_path / "copy"
    shutil.copytree(ctx.warehouse_root, copy, symlinks=True)
    before = sorted(p for p in copy.rglob("*") if p.is_file())
    with pytest.raises(prune_module.PruneRefusedError, match="written through another path"):
        prune(copy, dry_run=False)
    assert sorted(p for p in copy.rglob("*") if p.is_file()) == before
    assert main(["--warehouse", str(copy), "--yes"]) == 2


def test_a_warehouse_without_its_catalog_is_refused_even_with_a_catalog_given(grown):
    """The catalog moved away (as the unreadable-catalog message advises): the job's catalog object
    would create an empty one, and every shard would look unneeded. Refused."""
    ctx, *_ = grown
    (ctx.warehouse_root / "catalog.duckdb").rename(ctx.warehouse_root.parent / "moved.duckdb")
    with pytest.raises(FileNotFoundError, match=r"has no catalog\.duckdb"):
        prune(ctx.warehouse_root, dry_run=False, catalog=Catalog(ctx.warehouse_root / "c.duckdb"))
    assert not (ctx.warehouse_root / "catalog.duckdb").exists()
    assert all(path.exists() for path in _current_files_from(ctx.warehouse_root))


def _current_files_from(root: Path) -> list[Path]:
    return [p for p in root.rglob("part-*.parquet")]


class _KilledAfter(InProcessBackend):
    """Runs the first ``n`` tasks of a stage, then fails as a killed or full-disk run would."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def run(self, fn, tasks, on_result=None):
        for i, task in enumerate(tasks[: self.n]):
            result = fn(task)
            if on_result is not None:
                on_result(i, result)
        raise RuntimeError("no space left on device")


def test_the_progress_of_a_run_that_did_not_finish_is_kept_for_its_retry(grown):
    """A run with a new config fails after 3 shards (its error says they are kept and reused);
    pruning to free space keeps them, and the retry computes only the rest."""
    ctx, *_ = grown
    failing = StageContext(
        warehouse_root=ctx.warehouse_root,
        catalog=ctx.catalog,
        compute=_KilledAfter(3),
        log=logging.getLogger("test"),
    )
    with pytest.raises(RuntimeError, match="no space left"):
        run_normalized_documents(failing, NormalizeSpec(preset="none"))
    plan = prune(ctx.warehouse_root, dry_run=False)
    assert any(prune_module.UNFINISHED in item.why for item in plan.keep)
    retry = run_normalized_documents(ctx, NormalizeSpec(preset="none"))
    assert (retry.computed, retry.skipped) == (len(retry.shards) - 3, 3)


def test_files_and_folders_that_are_not_the_pipelines_are_left_alone(grown):
    ctx, *_ = grown
    root = ctx.warehouse_root
    current = Path(ctx.catalog.current_shards(TRAINING_BATCHES)[0].path).parent
    (root / TRAINING_BATCHES / "hf_export").mkdir()
    (root / TRAINING_BATCHES / "hf_export" / "data.arrow").write_text("mine")
    (root / TRAINING_BATCHES / "latest").symlink_to(current)
    (root / "raw_documents" / "manual_backup").mkdir()
    (root / "raw_documents" / "NOTES.txt").write_text("mine")
    prune(root, dry_run=False, keep_batches=0)
    assert (root / TRAINING_BATCHES / "hf_export" / "data.arrow").exists()
    assert (root / TRAINING_BATCHES / "latest").resolve() == current.resolve()
    assert (root / "raw_documents" / "manual_backup").is_dir()
    assert (root / "raw_documents" / "NOTES.txt").exists()


def test_the_scatter_of_the_current_batches_is_kept_not_the_newest(tmp_path, caplog):
    """Seeds 0, 1, then 0 again (its complete folder reused, its scatter untouched): prune keeps
    seed 0's scatter folders, which the current batches were made from, so adding a file scatters
    only that file's shard."""
    inputs = tmp_path / "in"
    shutil.copytree(SAMPLE_DIR, inputs, ignore=shutil.ignore_patterns("notes.txt"))
    ctx = _ctx(tmp_path / "wh")
    for seed in (0, 1, 0):
        _run(ctx, inputs, seed=seed)
    prune(ctx.warehouse_root, dry_run=False, keep_batches=0)
    shutil.copy(SAMPLE_DIR / "notes.txt", inputs / "notes.txt")
    with caplog.at_level(logging.INFO, logger="test"):
        _run(ctx, inputs, seed=0)
    filtered = len(ctx.catalog.current_shards(FILTERED_DOCUMENTS))
    assert f"scattering 1 of {filtered} shard(s)" in caplog.text


def test_a_warehouse_in_object_storage_is_pruned_object_by_object(s3, tmp_path):
    """The same plan from one listing of the bucket: what an earlier normalization preset and
    batch seed left goes (their objects deleted), the current outputs stay unchanged and a
    re-run computes nothing."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    lines = (SAMPLE_DIR / "wiki_sample.jsonl").read_bytes().splitlines(keepends=True)
    (inputs / "wiki.jsonl").write_bytes(b"".join(lines[:400]))
    root = s3.url("wh")
    catalog = Catalog(tmp_path / "catalog.duckdb", remote_root=root)
    ctx = StageContext(
        warehouse_root=root,
        catalog=catalog,
        compute=InProcessBackend(),
        log=logging.getLogger("test"),
    )
    _run(ctx, inputs, preset="ascii_lower", seed=1)
    _run(ctx, inputs)
    views = _views(ctx)
    before = set(s3.keys("wh/"))

    plan = prune(root, keep_batches=0, dry_run=False, catalog=catalog)

    removed = {item.path.removeprefix(f"{root}/") for item in plan.remove}
    assert any(path.startswith("normalized_documents/") for path in removed)
    assert any(path.startswith("training_batches/_scatter/") for path in removed)
    assert sum(path.startswith("training_batches/") for path in removed) >= 2
    after = set(s3.keys("wh/"))
    gone = before - after
    assert gone and all(any(key.startswith(f"wh/{p}") for p in removed) for key in gone)
    assert plan.bytes > 0
    assert _views(ctx) == views
    again = _run(ctx, inputs)
    assert all(report.computed == 0 for report in again.values()), {
        asset: report.computed for asset, report in again.items()
    }
    assert not prune(root, keep_batches=0, dry_run=True, catalog=catalog).remove

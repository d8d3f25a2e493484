"""Free the disk a warehouse no longer needs: folders and files no current output is made of.

Every config change writes a new stage folder (``<asset>/<fingerprint>/``) beside the old one,
every new upstream state a new ``training_batches`` folder (a full copy of the batches), every
changed filtered shard a new scatter folder, every dedup outcome a new drops file; nothing is ever
removed by a run, so a warehouse on a nightly schedule grows by a batches folder a night. This
module finds what no current output needs and removes it, and only that:

- kept: the folder of every asset's current shards, and every folder those shards were computed
  from (their ``input_shards``: the dedup's annotate folder of ``filtered_documents``), but not
  the ``part-*.parquet`` shard and rejects files in them that are neither (shards of input files
  since removed, or cut another way);
- kept: the ``keep_batches`` most recent earlier ``training_batches`` folders (a training job
  may still be reading one), besides the current one;
- kept: per current ``filtered_documents`` shard, its newest scatter folder (the next run with a
  new input reuses it), and the last dedup step's decisions file (an unchanged re-run reuses it);
- removed: every other stage folder, those shard files, every other scatter folder and drops
  file.

Nothing removed is data: all of it is recomputed from the input files when needed (going back to
an earlier config recomputes its stages instead of reusing them). The input files, the catalog
(its history and lineage rows stay, naming files that may be gone) and the dedup history are never
touched. Planning and removal hold the catalog, which every stage holds while it runs, so no stage
runs meanwhile: a prune waits for a running stage (up to the catalog's lock timeout), and a stage
started meanwhile waits for the prune.

``python -m llm_assets.warehouse.prune [--warehouse data/warehouse] [--keep-batches 2] [--yes]``
prints the plan, and removes it only with ``--yes``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llm_assets.constants import (
    CATALOG_FILE,
    DEFAULT_WAREHOUSE_DIR,
    FILTERED_DOCUMENTS,
    PIPELINE_ASSETS,
    TRAINING_BATCHES,
)
from llm_assets.stages import DEDUP_MEMO, SCATTER_FOLDER
from llm_assets.warehouse.catalog import (
    Catalog,
    CatalogLockedError,
    CatalogUnreadableError,
    ShardRecord,
)
from llm_assets.warehouse.shards import stage_dir

DEFAULT_KEEP_BATCHES = 2
"""Earlier ``training_batches`` folders kept besides the current one: a training job started on
yesterday's batches may still read them."""


@dataclass(frozen=True)
class PruneItem:
    """One folder or file to remove (or kept), with what it holds and why."""

    path: str
    bytes: int
    files: int
    why: str


@dataclass
class PrunePlan:
    """What :func:`plan_prune` found: what to remove, and the folders kept, with their sizes."""

    root: str
    remove: list[PruneItem] = field(default_factory=list)
    keep: list[PruneItem] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        """Bytes the removal frees."""
        return sum(item.bytes for item in self.remove)

    def describe(self) -> str:
        """The plan as text: each kept and removed folder or file, and the totals."""
        lines = [f"warehouse {self.root}"]
        for item in self.keep:
            lines.append(f"  keep    {_size(item.bytes):>9}  {item.path}  ({item.why})")
        for item in self.remove:
            lines.append(f"  remove  {_size(item.bytes):>9}  {item.path}  ({item.why})")
        kept = sum(item.bytes for item in self.keep)
        lines.append(
            f"{len(self.remove)} folder(s) or file(s) to remove, {_size(self.bytes)} "
            f"({sum(i.files for i in self.remove)} file(s)); {_size(kept)} kept"
        )
        return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def _usage(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path`` (a file or a folder); links are not followed."""
    if not path.is_dir() or path.is_symlink():
        return (path.lstat().st_size, 1) if path.exists() or path.is_symlink() else (0, 0)
    total = files = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
                files += 1
            except FileNotFoundError:
                pass
    return total, files


def _item(path: Path, why: str) -> PruneItem:
    size, files = _usage(path)
    return PruneItem(str(path), size, files, why)


def _folder_of(root: Path, path: str) -> Path | None:
    """The stage folder (``<root>/<asset>/<name>``) holding ``path``, or None outside them."""
    try:
        parts = Path(path).resolve().relative_to(root).parts
    except ValueError:
        return None
    return root.joinpath(*parts[:2]) if len(parts) >= 3 else None


def plan_prune(
    root: str | Path, catalog: Catalog, *, keep_batches: int = DEFAULT_KEEP_BATCHES
) -> PrunePlan:
    """What in the warehouse at ``root`` no current output needs (see the module docstring).
    Reads the catalog and lists the folders; changes nothing. Call it inside
    ``catalog.session()`` with :func:`apply_prune`, so that no stage runs in between."""
    if keep_batches < 0:
        raise ValueError(f"keep_batches must be 0 or more, got {keep_batches}")
    root = Path(root).resolve()
    plan = PrunePlan(str(root))
    current = {asset: catalog.current_shards(asset) for asset in PIPELINE_ASSETS}
    needed: dict[Path, str] = {}
    own: set[Path] = set()  # folders of current and input shards: their other shard files go
    files: set[str] = set()
    for asset, shards in current.items():
        for shard in shards:
            folder = stage_dir(root, asset, shard.fingerprint).resolve()
            needed[folder] = f"current {asset}"
            own.add(folder)
            files.update(str(Path(p).resolve()) for p in (shard.path, shard.rejects_path) if p)
    inputs: list[str] = []
    for asset, shards in current.items():
        for source in sorted({path for shard in shards for path in shard.input_shards}):
            folder = _folder_of(root, source)
            if folder is not None:  # e.g. the annotate phase of filtered_documents (with dedup)
                needed.setdefault(folder, f"input of the current {asset}")
                own.add(folder)
                inputs.append(source)
    # The input shards and the rejects files recorded with them (the annotate phase's rejects
    # are the filter's, which the dedup's apply phase copies).
    for path, rejects in catalog.query(
        "SELECT path, rejects_path FROM shards WHERE list_contains(?, path)", [inputs]
    ):
        files.update(str(Path(p).resolve()) for p in (path, rejects) if p)
    needed.update(
        (folder, "an earlier training_batches folder, kept (keep_batches)")
        for folder in _recent_batches(root, catalog, set(needed), keep_batches)
    )
    for asset in PIPELINE_ASSETS:
        asset_dir = root / asset
        if not asset_dir.is_dir():
            continue
        for folder in sorted(asset_dir.iterdir()):
            if folder.name == SCATTER_FOLDER and asset == TRAINING_BATCHES:
                _plan_scatter(plan, folder, current[FILTERED_DOCUMENTS])
            elif not folder.is_dir():
                continue
            elif folder in needed:
                plan.keep.append(_item(folder, needed[folder]))
                if folder in own and asset != TRAINING_BATCHES:
                    _plan_inside(plan, folder, files, asset == FILTERED_DOCUMENTS)
            else:
                plan.remove.append(_item(folder, f"no current {asset} is in it"))
    return plan


def _recent_batches(root: Path, catalog: Catalog, needed: set[Path], keep: int) -> list[Path]:
    """The ``keep`` training_batches folders last materialized, other than those in ``needed``
    (the current one), newest first: by the catalog's materializations, else by mtime."""
    finished = dict(
        catalog.query(
            "SELECT fingerprint, max(finished_at) FROM materializations WHERE asset = ? "
            "GROUP BY fingerprint",
            [TRAINING_BATCHES],
        )
    )
    folders = [
        folder
        for folder in (root / TRAINING_BATCHES).glob("*")
        if folder.is_dir() and folder.name != SCATTER_FOLDER and folder not in needed
    ]

    def newest(folder: Path) -> tuple[float, float]:
        when = finished.get(folder.name)
        return (when.timestamp() if when is not None else 0.0, folder.stat().st_mtime)

    return sorted(folders, key=newest, reverse=True)[:keep]


def _plan_inside(plan: PrunePlan, folder: Path, current: set[str], dedup: bool) -> None:
    """In a kept document-stage folder: shard and rejects files that are neither current nor an
    input of a current shard, and every dedup decisions file but the last step's (the newest
    when no memo names it)."""
    for pattern in ("part-*.parquet", "rejects/part-*.parquet"):
        for path in sorted(folder.glob(pattern)):
            if str(path.resolve()) not in current:
                plan.remove.append(_item(path, "a shard file no current output needs"))
    if dedup:
        drops = sorted((folder / "dedup").glob("drops-*.parquet"), key=lambda p: p.stat().st_mtime)
        kept = drops[-1:]
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            memo = json.loads((folder / "dedup" / DEDUP_MEMO).read_text())
            kept = [Path(memo["path"]).resolve()]  # what the current filtered shards applied
        for path in drops:
            if path.resolve() not in kept:
                plan.remove.append(_item(path, "an earlier dedup outcome"))


def _plan_scatter(plan: PrunePlan, scatter: Path, filtered: Sequence[ShardRecord]) -> None:
    """Scatter folders are named ``<filtered shard key>-<input fingerprint>``: keep the newest
    of each current filtered shard (its current content, scattered by the last batches run)."""
    keys = {shard.shard for shard in filtered}
    newest: dict[str, Path] = {}
    folders = sorted((p for p in scatter.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for folder in folders:
        key = folder.name.rpartition("-")[0]
        if key in keys:
            newest[key] = folder  # sorted by mtime: the last one wins
    kept = set(newest.values())
    for folder in folders:
        if folder in kept:
            continue
        key = folder.name.rpartition("-")[0]
        why = (
            f"an earlier scatter of the filtered shard {key}" if key in keys
            else "the scatter of no current filtered shard"
        )  # fmt: skip
        plan.remove.append(_item(folder, why))
    if kept:
        usage = [_usage(folder) for folder in kept]
        why = f"{len(kept)} scatter folder(s): the newest of each current filtered shard"
        plan.keep.append(
            PruneItem(str(scatter), sum(b for b, _ in usage), sum(f for _, f in usage), why)
        )


def apply_prune(plan: PrunePlan) -> int:
    """Remove what ``plan`` lists; return the bytes freed. What is gone already is skipped."""
    freed = 0
    for item in plan.remove:
        path = Path(item.path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        freed += item.bytes
    return freed


def prune(
    root: str | Path,
    *,
    keep_batches: int = DEFAULT_KEEP_BATCHES,
    dry_run: bool = True,
    catalog: Catalog | None = None,
) -> PrunePlan:
    """Plan (and unless ``dry_run``, apply) the pruning of the warehouse at ``root``, holding
    its catalog throughout. Raises FileNotFoundError when ``root`` holds no catalog."""
    root = Path(root).expanduser().resolve()
    if catalog is None:
        if not (root / CATALOG_FILE).exists():
            raise FileNotFoundError(f"no warehouse at {root}: it has no {CATALOG_FILE}")
        catalog = Catalog(root / CATALOG_FILE)
    with catalog.session():
        plan = plan_prune(root, catalog, keep_batches=keep_batches)
        if not dry_run:
            apply_prune(plan)
    return plan


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llm_assets.warehouse.prune",
        description="Remove the stage folders and files no current output of the warehouse "
        "needs (old configs, earlier batches folders, stale scatter and dedup files). Prints "
        "the plan; removes only with --yes.",
    )
    parser.add_argument("--warehouse", default=DEFAULT_WAREHOUSE_DIR, help="warehouse root")
    parser.add_argument(
        "--keep-batches",
        type=int,
        default=DEFAULT_KEEP_BATCHES,
        help="earlier training_batches folders to keep besides the current one",
    )
    parser.add_argument("--yes", action="store_true", help="remove (default: only print)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        plan = prune(args.warehouse, keep_batches=args.keep_batches, dry_run=not args.yes)
    except (FileNotFoundError, ValueError, CatalogLockedError, CatalogUnreadableError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(plan.describe())
    if args.yes:
        print(f"removed: {_size(plan.bytes)} freed")
    elif plan.remove:
        print("nothing removed: run again with --yes to remove it")
    return 0


if __name__ == "__main__":
    sys.exit(main())

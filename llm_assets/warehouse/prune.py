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
- kept: the scatter folders the current batches were made from (the next run with a new input
  reuses them), and the last dedup step's decisions file (an unchanged re-run reuses it);
- kept: whatever was written since its asset's last materialization (the shards of a run that
  failed or was killed, which its retry reuses);
- left alone: anything the pipeline does not write (entries not named by a fingerprint, links);
- removed: every other stage folder, those shard files, every other scatter folder and
  decisions file.

It refuses (:class:`PruneRefusedError`, nothing removed) a warehouse whose catalog names its
current files under another path (a copy, a bind mount, a relative root), and one without a
catalog.

A warehouse in object storage (``s3://bucket/prefix``, its catalog a local file named with
``--catalog``) is planned the same way from one listing of its objects (a folder is a key prefix,
its time its newest object's; see :mod:`llm_assets.warehouse.listing`), and removing a folder
deletes every object under its prefix.

Nothing removed is data: all of it is recomputed from the input files when needed (going back to
an earlier config recomputes its stages instead of reusing them). The input files, the catalog
(its history and lineage rows stay, naming files that may be gone) and the dedup history are never
touched. Planning and removal hold the catalog, which every stage holds while it runs, so no stage
runs meanwhile: a prune waits for a running stage (up to the catalog's lock timeout), and a stage
started meanwhile waits for the prune.

``python -m llm_assets.warehouse.prune [--warehouse data/warehouse] [--catalog FILE]
[--keep-batches 2] [--yes]`` prints the plan, and removes it only with ``--yes``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llm_assets import storage
from llm_assets.constants import (
    CATALOG_FILE,
    DEFAULT_WAREHOUSE_DIR,
    FILTERED_DOCUMENTS,
    PIPELINE_ASSETS,
    TRAINING_BATCHES,
)
from llm_assets.storage import is_remote
from llm_assets.warehouse.catalog import (
    Catalog,
    CatalogLockedError,
    CatalogUnreadableError,
    ShardRecord,
)
from llm_assets.warehouse.layout import DEDUP_MEMO, SCATTER_FOLDER, scatter_folder_name
from llm_assets.warehouse.listing import Listed

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


def _usage(path: Path | Listed) -> tuple[int, int, float]:
    """(bytes, files, newest mtime) under ``path`` (a file or a folder); links not followed."""
    if isinstance(path, Listed):
        return path.usage()
    if not path.is_dir() or path.is_symlink():
        try:
            stat = path.lstat()
        except FileNotFoundError:
            return 0, 0, 0.0
        return stat.st_size, 1, stat.st_mtime
    total = files = 0
    newest = path.lstat().st_mtime
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                stat = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            total += stat.st_size
            files += 1
            newest = max(newest, stat.st_mtime)
    return total, files, newest


def _item(path: Path, why: str, usage: tuple[int, int, float] | None = None) -> PruneItem:
    size, files, _ = usage or _usage(path)
    return PruneItem(str(path), size, files, why)


class PruneRefusedError(RuntimeError):
    """The warehouse cannot be pruned safely as it stands (nothing was removed)."""


STAGE_FOLDER = re.compile(r"[0-9a-f]{16}")
"""Names of the stage folders the pipeline writes (a 16-hex-digit fingerprint): nothing else in
an asset's folder is the pipeline's, so nothing else is pruned."""
SCATTER_NAME = re.compile(r".+-[0-9a-f]{16}")


class _Where:
    """Where a recorded path lies in the warehouse: its parts relative to the root (asset,
    stage folder, file...), found lexically from the root as given and as resolved, so that a
    link anywhere (the root, an asset folder moved to another disk) does not hide a match."""

    def __init__(self, given: Path | Listed) -> None:
        self.url = str(given) if isinstance(given, Listed) else None
        self.roots = [] if self.url else [Path(os.path.abspath(given)), given.resolve()]

    def __call__(self, path: str | Path) -> tuple[str, ...] | None:
        if self.url is not None:  # in object storage: keys below the root's prefix
            below = str(path).removeprefix(f"{self.url}/")
            return tuple(below.split("/")) if below != str(path) else None
        for candidate in (Path(os.path.abspath(path)), Path(path).resolve()):
            for root in self.roots:
                with contextlib.suppress(ValueError):
                    return candidate.relative_to(root).parts
        return None


def _check_paths(where: _Where, root: Path | Listed, current: dict[str, list[ShardRecord]]) -> None:
    """Refuse (:class:`PruneRefusedError`) when a current shard's recorded file is not inside
    ``root`` or is missing: the catalog was written through another path to these files (a
    bind mount, a container volume, a relative root, a copy), so this root's files cannot be
    matched with the catalog's, and every current file would look unneeded."""
    bad = []
    for shards in current.values():
        for shard in shards:
            for path in (shard.path, shard.rejects_path):
                if path and not _recorded_file_is_here(where, root, path):
                    bad.append(path)
    if bad:
        raise PruneRefusedError(
            f"{len(bad)} current shard file(s) recorded in the catalog of {root} are not under "
            f"that folder or are gone, e.g. {bad[0]!r}: the catalog was written through another "
            "path to the warehouse (a mount, a container volume, a relative root), or the "
            "warehouse was copied or moved. Nothing removed: prune it through the path its runs "
            "use, or materialize the pipeline first"
        )


def _recorded_file_is_here(where: _Where, root: Path | Listed, path: str) -> bool:
    """Whether a file the catalog records is inside the warehouse at ``root``, and there."""
    parts = where(path)
    if parts is None:
        return False
    if isinstance(root, Listed):
        return (root / "/".join(parts)).is_file()
    return Path(path).exists()


def _last_materialized(catalog: Catalog) -> dict[str, float]:
    """Per asset, when its latest materialization finished (seconds since the epoch). Cast
    back through the session's time zone, as ``to_timestamp`` stored it."""
    rows = catalog.query(
        "SELECT asset, epoch(max(finished_at)::TIMESTAMPTZ) FROM materializations GROUP BY asset"
    )
    return {asset: float(when) for asset, when in rows if when is not None}


UNFINISHED = (
    "written since the asset's last materialization: a run that did not finish (its retry "
    "reuses it)"
)


def plan_prune(
    root: str | Path, catalog: Catalog, *, keep_batches: int = DEFAULT_KEEP_BATCHES
) -> PrunePlan:
    """What in the warehouse at ``root`` no current output needs (see the module docstring).
    Reads the catalog and lists the folders; changes nothing. Call it inside
    ``catalog.session()`` with :func:`apply_prune`, so that no stage runs in between. Raises
    :class:`PruneRefusedError` when the catalog's files are not this root's."""
    if keep_batches < 0:
        raise ValueError(f"keep_batches must be 0 or more, got {keep_batches}")
    if is_remote(str(root)):
        root = given = Listed.root(str(root))
    else:
        given = Path(root).expanduser()
        root = given.resolve()
    where = _Where(given)
    plan = PrunePlan(str(root))
    current = {asset: catalog.current_shards(asset) for asset in PIPELINE_ASSETS}
    _check_paths(where, root, current)
    last = _last_materialized(catalog)
    # Folders are (asset, name) and files their parts under the root: see _Where.
    needed: dict[tuple[str, ...], str] = {}
    own: set[tuple[str, ...]] = set()  # folders of current and input shards: other files go
    files: set[tuple[str, ...]] = set()
    for asset, shards in current.items():
        for shard in shards:
            folder = (asset, shard.fingerprint)
            needed[folder] = f"current {asset}"
            own.add(folder)
            files.update(where(p) for p in (shard.path, shard.rejects_path) if p)
    inputs: list[str] = []
    for asset, shards in current.items():
        for source in sorted({path for shard in shards for path in shard.input_shards}):
            parts = where(source)
            if parts is not None and len(parts) >= 3:  # e.g. the dedup's annotate phase
                needed.setdefault(parts[:2], f"input of the current {asset}")
                own.add(parts[:2])
                inputs.append(source)
    # The input shards and the rejects files recorded with them (the annotate phase's rejects
    # are the filter's, which the dedup's apply phase copies).
    for path, rejects in catalog.query(
        "SELECT path, rejects_path FROM shards WHERE list_contains(?, path)", [inputs]
    ):
        files.update(where(p) for p in (path, rejects) if p)
    for asset in PIPELINE_ASSETS:
        asset_dir = root / asset
        if not asset_dir.is_dir():
            continue
        since = last.get(asset, 0.0)
        entries = sorted(asset_dir.iterdir())
        if asset == TRAINING_BATCHES:
            stage_folders = [e for e in entries if _is_stage_folder(e)]
            needed.update(
                ((asset, folder.name), "an earlier training_batches folder, kept (keep_batches)")
                for folder in _recent_batches(catalog, stage_folders, set(needed), keep_batches)
            )
            if (scatter := asset_dir / SCATTER_FOLDER).is_dir() and not scatter.is_symlink():
                _plan_scatter(plan, scatter, current[FILTERED_DOCUMENTS], catalog, since)
        for entry in entries:
            if not _is_stage_folder(entry):
                continue  # not the pipeline's (a user's file or folder, a link): left alone
            folder = (asset, entry.name)
            usage = _usage(entry)
            if folder in needed:
                plan.keep.append(_item(entry, needed[folder], usage))
                if folder in own and asset != TRAINING_BATCHES:
                    _plan_inside(plan, entry, folder, files, asset == FILTERED_DOCUMENTS, since)
            elif usage[2] > since:
                plan.keep.append(_item(entry, UNFINISHED, usage))
            else:
                plan.remove.append(_item(entry, f"no current {asset} is in it", usage))
    return plan


def _is_stage_folder(entry: Path) -> bool:
    """A folder the pipeline wrote (named by a fingerprint), not a link nor a user's entry."""
    return bool(STAGE_FOLDER.fullmatch(entry.name)) and entry.is_dir() and not entry.is_symlink()


def _recent_batches(
    catalog: Catalog, folders: Sequence[Path], needed: set[tuple[str, ...]], keep: int
) -> list[Path]:
    """The ``keep`` training_batches folders last materialized, other than those in ``needed``
    (the current one), newest first: by the catalog's materializations, else by mtime."""
    finished = dict(
        catalog.query(
            "SELECT fingerprint, epoch(max(finished_at)::TIMESTAMPTZ) FROM materializations "
            "WHERE asset = ? GROUP BY fingerprint",
            [TRAINING_BATCHES],
        )
    )
    others = [folder for folder in folders if (TRAINING_BATCHES, folder.name) not in needed]

    def newest(folder: Path) -> tuple[float, float]:
        return (float(finished.get(folder.name) or 0.0), folder.stat().st_mtime)

    return sorted(others, key=newest, reverse=True)[:keep]


def _plan_inside(
    plan: PrunePlan,
    folder: Path,
    parts: tuple[str, ...],
    current: set[tuple[str, ...]],
    dedup: bool,
    since: float,
) -> None:
    """In a kept document-stage folder: shard and rejects files that are neither current nor an
    input of a current shard (nor written since the last materialization), and every dedup
    decisions file but the last step's (the newest when no memo names it)."""
    for pattern in ("part-*.parquet", "rejects/part-*.parquet"):
        for path in sorted(folder.glob(pattern)):
            if (*parts, *path.relative_to(folder).parts) in current or path.is_symlink():
                continue
            usage = _usage(path)
            if usage[2] <= since:
                plan.remove.append(_item(path, "a shard file no current output needs", usage))
    if dedup:
        drops = sorted((folder / "dedup").glob("drops-*.parquet"), key=lambda p: p.stat().st_mtime)
        kept = {p.name for p in drops[-1:]}
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            memo = json.loads((folder / "dedup" / DEDUP_MEMO).read_text())
            kept = {Path(memo["path"]).name}  # what the current filtered shards applied
        for path in drops:
            if path.name not in kept and path.stat().st_mtime <= since:
                plan.remove.append(_item(path, "an earlier dedup outcome"))


def _plan_scatter(
    plan: PrunePlan,
    scatter: Path,
    filtered: Sequence[ShardRecord],
    catalog: Catalog,
    since: float,
) -> None:
    """Keep the scatter folders the current batches were made from (named from the current
    filtered shards and the current batches' seed, validation fraction and bucket count: the
    next run with a new input reuses them), and those written since the last materialization;
    remove the others. Without that record (a release before it), keep each current filtered
    shard's newest."""
    wanted = _current_scatter_names(catalog, filtered)
    keys = {shard.shard for shard in filtered}
    folders = sorted(
        (p for p in scatter.iterdir() if SCATTER_NAME.fullmatch(p.name) and _is_dir(p)),
        key=lambda p: p.stat().st_mtime,
    )
    if wanted is None:
        newest = {folder.name.rpartition("-")[0]: folder.name for folder in folders}
        wanted = {name for key, name in newest.items() if key in keys}
    kept_usage = []
    for folder in folders:
        usage = _usage(folder)
        if folder.name in wanted or usage[2] > since:
            kept_usage.append(usage)
            continue
        key = folder.name.rpartition("-")[0]
        why = (
            f"an earlier scatter of the filtered shard {key}" if key in keys
            else "the scatter of no current filtered shard"
        )  # fmt: skip
        plan.remove.append(_item(folder, why, usage))
    if kept_usage:
        plan.keep.append(
            PruneItem(
                str(scatter),
                sum(u[0] for u in kept_usage),
                sum(u[1] for u in kept_usage),
                f"{len(kept_usage)} scatter folder(s) of the current batches",
            )
        )


def _is_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _current_scatter_names(catalog: Catalog, filtered: Sequence[ShardRecord]) -> set[str] | None:
    """The scatter folder names of the current batches (see :func:`scatter_folder_name`), or
    None when the current materialization does not say its seed and bucket count."""
    rows = catalog.query(
        "SELECT m.config, m.extra FROM materializations m WHERE m.materialization_id = "
        "(SELECT any_value(materialization_id) FROM current_shards WHERE asset = ?)",
        [TRAINING_BATCHES],
    )
    try:
        config, extra = (json.loads(value) for value in rows[0])
        seed, fraction = config["seed"], config["validation_fraction"]
        buckets = extra["shuffle_buckets"]
        text = config.get("augment", "none") != "none"  # absent: a run without augment
        sources = bool(config.get("mixture"))  # absent: a run without a mixture
    except (IndexError, TypeError, ValueError, KeyError):
        return None
    return {
        scatter_folder_name(
            shard.shard, shard.checksum, seed, fraction, buckets, text=text, sources=sources
        )
        for shard in filtered
    }


def apply_prune(plan: PrunePlan) -> int:
    """Remove what ``plan`` lists; return the bytes freed. What is gone already is skipped."""
    freed = 0
    for item in plan.remove:
        if is_remote(item.path):  # an object, else a folder: every object under the prefix
            if storage.file_size(item.path) is not None:
                storage.remove(item.path)
            else:
                storage.remove_tree(item.path)
            freed += item.bytes
            continue
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
    its catalog throughout. Raises FileNotFoundError when ``root`` holds no catalog (a root in
    object storage needs ``catalog``, its local catalog)."""
    if is_remote(str(root)):
        if catalog is None or not catalog.path.is_file():
            raise FileNotFoundError(
                f"no catalog for the warehouse {str(root)!r} in object storage: name its local "
                f"catalog file (--catalog, the warehouse resource's catalog_path); nothing removed"
            )
        with catalog.session():
            plan = plan_prune(root, catalog, keep_batches=keep_batches)
            if not dry_run:
                apply_prune(plan)
        return plan
    root = Path(root).expanduser().resolve()
    # Checked whatever catalog is given: opening a missing one creates it, empty, and with no
    # current output every shard would look unneeded.
    if not (root / CATALOG_FILE).is_file():
        raise FileNotFoundError(
            f"no warehouse at {root}: it has no {CATALOG_FILE} (nothing removed; a warehouse "
            "whose catalog was moved away is recovered by running the pipeline, which finds "
            "its shards by their footers)"
        )
    if catalog is None:
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
    parser.add_argument(
        "--warehouse", default=DEFAULT_WAREHOUSE_DIR, help="warehouse root (a folder or a URL)"
    )
    parser.add_argument(
        "--catalog",
        default=None,
        help="the catalog file (default: catalog.duckdb in the root; required for a URL root)",
    )
    parser.add_argument(
        "--keep-batches",
        type=int,
        default=DEFAULT_KEEP_BATCHES,
        help="earlier training_batches folders to keep besides the current one",
    )
    parser.add_argument("--yes", action="store_true", help="remove (default: only print)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        catalog = None
        if args.catalog or is_remote(args.warehouse):
            catalog = Catalog(
                Path(args.catalog or CATALOG_FILE).expanduser().resolve(),
                remote_root=args.warehouse if is_remote(args.warehouse) else None,
            )
        plan = prune(
            args.warehouse, keep_batches=args.keep_batches, dry_run=not args.yes, catalog=catalog
        )
    except (
        FileNotFoundError,
        ValueError,
        CatalogLockedError,
        CatalogUnreadableError,
        PruneRefusedError,
    ) as error:
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

"""Where configured paths lead: input paths are read where they are, outputs stay in the data root.

An input path named in run config (``raw_documents``' ``input_dir``, so also the sensor's and the
schedules' ``$LLM_ASSETS_INPUT_DIR``, a tokenizer, ``decontaminate.paths``,
``flagged_words.path``) is read wherever it is: a relative one is resolved against the working
directory, and messages show the absolute path. What a run finds on disk rather than is told is
held to the folders it was given: a symbolic link inside an input folder may lead anywhere inside
that folder or inside the data root, and is refused, named, when it leads elsewhere (a link
dropped into a watched folder cannot make a run read ``~/.ssh``). The warehouse a run writes must
lie inside the data root when it is a local folder (one in object storage is where its URL says).
An ``input_dir`` in object storage (``s3://bucket/prefix``) has no links and is not held to the
data root: these rules concern local folders (and ``file://`` URLs, which name one). The data root
is the warehouse resource's ``data_root``, else ``$LLM_ASSETS_DATA_ROOT``, else the folder that
holds the warehouse (``data/`` by default), or its catalog for one in object storage.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ROOT_ENV = "LLM_ASSETS_DATA_ROOT"


class PathEscapeError(ValueError):
    """A path resolves outside the folders it must stay in."""


def resolve_data_root(configured: str | None, warehouse_root: Path) -> Path:
    """The data root as an absolute, resolved path (see the module docstring for the order)."""
    chosen = configured or os.environ.get(DATA_ROOT_ENV) or str(warehouse_root.parent)
    return Path(chosen).expanduser().resolve()


def shown(path: str | Path) -> str:
    """``path`` as a message names it: absolute, as given (``..`` and links kept); a relative
    one made absolute, followed by the working directory it was resolved against."""
    given = Path(path).expanduser()
    if given.is_absolute():
        return repr(str(given))
    return f"{os.path.abspath(given)!r} ({str(path)!r} in the working directory {os.getcwd()!r})"


def _within(resolved: Path, root: Path) -> bool:
    return resolved == root or resolved.is_relative_to(root)


def inside(path: str | Path, root: Path, what: str) -> Path:
    """``path`` resolved (relative to the working directory, symlinks followed); raises
    :class:`PathEscapeError` naming ``what`` when it is not ``root`` or below it."""
    resolved = Path(path).expanduser().resolve()
    if not _within(resolved, root):
        raise PathEscapeError(
            f"{what} {shown(path)} resolves to {str(resolved)!r}, outside the data root "
            f"{str(root)!r}; move it under the root, or set the warehouse resource's data_root "
            f"(or ${DATA_ROOT_ENV}) to a folder that holds it"
        )
    return resolved


def found_inside(path: Path, folder: Path, data_root: Path, what: str) -> Path:
    """``path``, found inside the input ``folder`` (resolved), resolved with its links followed;
    raises :class:`PathEscapeError` naming ``what`` when it leads out of both ``folder`` and
    ``data_root``."""
    resolved = path.resolve()
    if not _within(resolved, folder) and not _within(resolved, data_root):
        raise PathEscapeError(
            f"{what} {shown(path)} leads through a symbolic link to {str(resolved)!r}, outside "
            f"the input folder {str(folder)!r} and outside the data root {str(data_root)!r}: "
            "links in an input folder are followed only within those. Give the folder it leads "
            "to as the input folder itself, or set the warehouse resource's data_root (or "
            f"${DATA_ROOT_ENV}) to a folder that holds it"
        )
    return resolved

"""The data root: every input and output path a run touches must resolve inside it.

Paths come from run config, sensors and schedules, that is from people and from files on disk; a
``..`` or a symlink that leads elsewhere would let a run read or overwrite anything the process
can reach. So each one is resolved (symlinks followed) and refused when it lands outside the root.
The root is ``WarehouseResource.data_root``, else ``$LLM_ASSETS_DATA_ROOT``, else the folder that
holds the warehouse (``data/`` for the README's commands).
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ROOT_ENV = "LLM_ASSETS_DATA_ROOT"


class PathEscapeError(ValueError):
    """A configured path resolves outside the data root."""


def resolve_data_root(configured: str | None, warehouse_root: Path) -> Path:
    """The data root as an absolute, resolved path (see the module docstring for the order)."""
    chosen = configured or os.environ.get(DATA_ROOT_ENV) or str(warehouse_root.parent)
    return Path(chosen).expanduser().resolve()


def inside(path: str | Path, root: Path, what: str) -> Path:
    """``path`` resolved (relative to the working directory, symlinks followed); raises
    :class:`PathEscapeError` naming ``what`` when it is not ``root`` or below it."""
    resolved = Path(path).expanduser().resolve()
    if resolved != root and not resolved.is_relative_to(root):
        raise PathEscapeError(
            f"{what} {str(path)!r} resolves to {str(resolved)!r}, outside the data root "
            f"{str(root)!r}; move it under the root, or set the warehouse resource's data_root "
            f"(or ${DATA_ROOT_ENV}) to a folder that holds it"
        )
    return resolved

"""Facts about this machine and checkout that benchmark results are recorded with.

Kept apart from the benchmark so that the ``auto`` compute backend, which picks only results
recorded with this machine's core count, counts cores exactly as the recorder does.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import psutil


def machine_cores() -> int:
    """This machine's core count as results record it (``machine_cores``): backend ``auto`` uses
    only results recorded with the same count, so both must count alike."""
    return os.cpu_count() or 1


def machine_info() -> dict[str, Any]:
    """Cores, memory and platform of this machine (stored with every result)."""
    return {
        "cores": machine_cores(),
        "memory_gb": round(psutil.virtual_memory().total / 1024**3, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
    }


def _git(where: Path, *args: str) -> str | None:
    """``git <args>``'s output in ``where``, stripped; None when git fails or is missing."""
    try:
        out = subprocess.run(
            # --no-optional-locks: a status must not rewrite the index of the checkout it reads
            ["git", "--no-optional-locks", *args],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit(path: str | Path | None = None) -> str | None:
    """The commit of the checkout holding this package, ``<hash>-dirty`` when tracked files have
    uncommitted changes (as ``git describe --dirty``: untracked files do not count), so a result
    measured on edited code is never filed under the clean commit. None outside a git checkout."""
    where = Path(path) if path else Path(__file__).resolve().parent
    head = _git(where, "rev-parse", "HEAD")
    if not head:
        return None
    changes = _git(where, "status", "--porcelain", "--untracked-files=no")
    return f"{head}-dirty" if changes else head

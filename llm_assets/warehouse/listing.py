"""A warehouse in object storage as one listing of its root shows it, through the few ``Path``
methods the prune walks a local warehouse with (``/``, ``name``, ``is_dir``, ``iterdir``,
``glob``, ``stat``, ``relative_to``, ``read_text``): the prune's plan is then the same code for
both. Folders are the prefixes of the objects' keys; a folder's modification time is its newest
object's; nothing is a link. One listing request per 1,000 objects, then no request per call."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from types import SimpleNamespace
from typing import Any

from llm_assets import storage

Parts = tuple[str, ...]


@dataclass
class _Index:
    """Every object under the root (its key's parts below the root -> size and modification
    time), each folder's children and each folder's totals (bytes, objects, newest time)."""

    files: dict[Parts, tuple[int, float]]
    children: dict[Parts, set[str]] = field(default_factory=dict)
    totals: dict[Parts, tuple[int, int, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for parts, (size, mtime) in self.files.items():
            for depth in range(len(parts)):
                folder = parts[:depth]
                self.children.setdefault(folder, set()).add(parts[depth])
                held = self.totals.get(folder, (0, 0, 0.0))
                self.totals[folder] = (held[0] + size, held[1] + 1, max(held[2], mtime))


class Listed:
    """A folder or object of a listed warehouse (see the module docstring); ``str()`` is its
    URL."""

    def __init__(self, url: str, parts: Parts, index: _Index) -> None:
        self.url = url
        self.parts_below_root = parts
        self._index = index

    @classmethod
    def root(cls, url: str) -> Listed:
        """The warehouse at ``url``, listed now."""
        listing = storage.list_tree(url)
        files = {tuple(key.split("/")): info for key, info in listing.items()}
        return cls(url.rstrip("/"), (), _Index(files))

    def __truediv__(self, name: str) -> Listed:
        parts = tuple(p for p in str(name).split("/") if p)
        return Listed("/".join((self.url, *parts)), self.parts_below_root + parts, self._index)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"Listed({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Listed) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __lt__(self, other: Listed) -> bool:
        return self.url < other.url

    @property
    def name(self) -> str:
        return self.parts_below_root[-1] if self.parts_below_root else self.url

    def is_dir(self) -> bool:
        return self.parts_below_root in self._index.children

    def is_file(self) -> bool:
        return self.parts_below_root in self._index.files

    def exists(self) -> bool:
        return self.is_dir() or self.is_file()

    def is_symlink(self) -> bool:
        return False

    def iterdir(self) -> Iterator[Listed]:
        for name in sorted(self._index.children.get(self.parts_below_root, ())):
            yield self / name

    def glob(self, pattern: str) -> Iterator[Listed]:
        """The objects below this folder whose relative key matches ``pattern`` part by part
        (``rejects/part-*.parquet``)."""
        wanted = pattern.split("/")
        depth = len(self.parts_below_root)
        for parts in sorted(self._index.files):
            below = parts[depth:]
            if (
                parts[:depth] == self.parts_below_root
                and len(below) == len(wanted)
                and all(fnmatch.fnmatchcase(p, w) for p, w in zip(below, wanted, strict=True))
            ):
                yield self / "/".join(below)

    def usage(self) -> tuple[int, int, float]:
        """(bytes, objects, newest modification time) at or below this key."""
        if self.is_file():
            size, mtime = self._index.files[self.parts_below_root]
            return size, 1, mtime
        return self._index.totals.get(self.parts_below_root, (0, 0, 0.0))

    def stat(self) -> Any:
        size, _, mtime = self.usage()
        return SimpleNamespace(st_size=size, st_mtime=mtime)

    def relative_to(self, other: Listed) -> PurePosixPath:
        depth = len(other.parts_below_root)
        if self.parts_below_root[:depth] != other.parts_below_root:
            raise ValueError(f"{self} is not below {other}")
        return PurePosixPath(*self.parts_below_root[depth:])

    def read_text(self) -> str:
        return storage.read_text(self.url)

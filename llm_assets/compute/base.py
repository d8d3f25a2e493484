"""The one operation every compute backend offers: run a task on every shard, in parallel.

A task is a small frozen dataclass naming its input and output shards; the worker reads and writes
the Parquet itself and returns small stats. Rows never travel through pickling or an object store
one by one: that per-row traffic is what made the published Ray pipeline ten times slower than a
single process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import sys
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")

OnResult = Callable[[int, Any], None]
"""Called in the driver as each task finishes (task index, result): progress logs, catalog rows."""


class Logger(Protocol):
    """What backends log to: a ``logging.Logger`` or Dagster's ``context.log``."""

    def info(self, msg: str) -> Any: ...
    def warning(self, msg: str) -> Any: ...


class ShardTaskFailed(RuntimeError):
    """A shard task failed on every attempt. The message names the shard and the last error."""

    def __init__(self, key: str, attempts: int, error: str) -> None:
        super().__init__(f"shard task {key!r} failed after {attempts} attempt(s): {error}")
        self.key = key
        self.attempts = attempts
        self.error = error


def describe_error(exc: BaseException) -> str:
    """One line naming the exception and the line that raised it (for logs and ShardTaskFailed)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def task_key(task: object) -> str:
    """The name of a task in logs and errors: its ``key`` attribute, else its repr."""
    return str(getattr(task, "key", repr(task)))


HEARTBEAT_S = 60.0
"""How long a backend may go without a finished task before it logs which tasks are still
running (one big input file is one ingest task that may take minutes)."""
_LISTED_RUNNING = 5


class Heartbeat:
    """Logs, every ``every`` seconds in which no task finished, how many tasks are done and
    which are running, for how long: so a stage whose last shards take minutes shows it is
    working, and on which shards. The backend calls :meth:`finished` on every result and
    :meth:`tick` from its wait loop."""

    def __init__(self, log: Logger, total: int, every: float = HEARTBEAT_S) -> None:
        self.log, self.total, self.every = log, total, every
        self.last = time.monotonic()

    def finished(self) -> None:
        self.last = time.monotonic()

    def tick(self, done: int, running: dict[str, float]) -> None:
        """``running``: key -> ``time.monotonic()`` at which each running task started."""
        now = time.monotonic()
        if now - self.last < self.every or not running:
            return
        self.last = now
        oldest = sorted(running.items(), key=lambda item: item[1])
        listed = ", ".join(
            f"{key} (for {now - began:.0f} s)" for key, began in oldest[:_LISTED_RUNNING]
        )
        more = len(oldest) - _LISTED_RUNNING
        self.log.info(
            f"still working: {done} of {self.total} shard(s) done; running: {listed}"
            + (f" and {more} more" if more > 0 else "")
        )


class ComputeBackend(ABC):
    """Runs ``fn(task)`` for every task and returns the results in task order.

    Implementations retry a task whose worker raised, died or timed out, up to ``max_attempts``
    in all, then raise :class:`ShardTaskFailed`. Tasks must be idempotent (they write their output
    atomically), so a retry after a partial attempt is safe.
    """

    name: str = "abstract"
    ready_seconds: float | None = None
    """How long the backend took to start its workers, once it has (None: nothing to start, or
    not started yet). Benchmarks report it as start-up time."""

    def __init__(
        self,
        *,
        max_attempts: int = 3,
        task_timeout_s: float | None = None,
        logger: Logger | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if task_timeout_s is not None and task_timeout_s <= 0:
            raise ValueError(f"task_timeout_s must be > 0 or None, got {task_timeout_s}")
        self.max_attempts = max_attempts
        self.task_timeout_s = task_timeout_s
        self.heartbeat_s = HEARTBEAT_S
        self.log: Logger = logger or logging.getLogger(f"llm_assets.compute.{self.name}")

    @abstractmethod
    def run(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        on_result: OnResult | None = None,
    ) -> list[R]:
        """Run ``fn`` on every task; return results in task order.

        ``fn`` must be a module-level function of an installed package: spawned workers and Ray
        workers import it by name.
        """

    @property
    def parallelism(self) -> int:
        """How many tasks run at once."""
        return 1

    def worker_pids(self) -> list[int]:
        """Process ids of the worker processes this backend runs (for memory accounting)."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op for in-process
        """Stop workers and release what this backend started. Safe to call twice."""

    def __enter__(self) -> ComputeBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.cache
def _libc() -> Any:
    """glibc, for ``malloc_trim``; None where there is none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def give_back_memory() -> None:
    """Return freed memory to the OS: Arrow's pool keeps freed blocks for reuse and glibc keeps
    the top of a fragmented heap; after a shard neither is needed. Costs about a millisecond."""
    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)

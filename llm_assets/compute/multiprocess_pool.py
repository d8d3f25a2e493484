"""A supervised pool of worker processes built on the ``multiprocess`` package.

Why not ``Pool.imap``: when a pool worker is killed, the standard pool silently replaces it and the
task it held never returns, so the run hangs. Here the driver hands each worker one task at a time
over its own pipe, so it always knows which shard a dead or stuck worker held: it restarts the
worker and retries the shard, or fails the run naming the shard.

Workers are spawned (not forked: the driver may hold Dagster's or Ray's threads), once per backend,
and import the task function by name, so the package must be installed (``pip install -e .``).

Memory (every worker counts towards the run's footprint):

- A spawned child normally re-imports the driver's ``__main__`` (the ``dagster`` CLI, a benchmark
  script...) in case the task lives there. Ours never does: task functions live in the installed
  package, and a function from ``__main__`` is pickled by value by ``dill`` anyway. So our workers
  skip that import, which under Dagster saves importing all of Dagster in every worker.
- After each task a worker hands freed memory back to the OS (Arrow's pool and glibc's heap), so
  its footprint is its largest task, not the sum of its fragments.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import multiprocess as mp
import multiprocess.spawn as mp_spawn
from multiprocess.connection import wait

from llm_assets.compute.base import (
    ComputeBackend,
    Heartbeat,
    OnResult,
    R,
    ShardTaskFailed,
    T,
    describe_error,
    give_back_memory,
    task_key,
)

_POLL_SECONDS = 0.5
_WORKER_ENV = {
    # Parallelism comes from the pool; libraries must not add threads of their own per worker.
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
}


WORKER_NAME = "llm-assets-worker"
"""Name of our worker processes; :func:`_preparation_data` recognizes them by it."""
_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")


def _preparation_data(name: str, _original: Callable[[str], dict] = mp_spawn.get_preparation_data):
    """``multiprocess.spawn.get_preparation_data`` minus the re-import of ``__main__`` for our
    workers (see the module docstring); every other process keeps the standard behaviour."""
    data = _original(name)
    if name == WORKER_NAME:
        for key in _MAIN_KEYS:
            data.pop(key, None)
    return data


mp_spawn.get_preparation_data = _preparation_data


def _worker_main(conn: Any) -> None:
    """Worker loop: receive ``(index, fn, task)``, send back ``(index, ok, result_or_error)``."""
    os.environ.update(_WORKER_ENV)
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        index, fn, task = message
        try:
            reply = (index, True, fn(task))
        except Exception as exc:
            reply = (index, False, describe_error(exc))
        del message, fn, task
        give_back_memory()
        conn.send(reply)
        del reply


@dataclass
class _Worker:
    process: Any
    conn: Any
    task_index: int | None = None
    started_at: float = 0.0


class MultiprocessBackend(ComputeBackend):
    """Runs tasks on ``workers`` spawned processes; retries shards whose worker died or hung."""

    name = "multiprocess"

    def __init__(self, workers: int = 0, start_method: str = "spawn", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.workers = workers if workers > 0 else (os.cpu_count() or 1)
        self._ctx = mp.get_context(start_method)
        self._pool: list[_Worker] = []

    @property
    def parallelism(self) -> int:
        return self.workers

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._pool if w.process.is_alive()]

    def _start_worker(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main, args=(child,), daemon=True, name=WORKER_NAME
        )
        process.start()
        child.close()
        return _Worker(process=process, conn=parent)

    def _ensure_started(self, tasks: int) -> None:
        """Workers for ``tasks`` tasks, at most ``workers``: a stage of one shard starts one
        process, not one per core; the pool grows when a later stage has more shards."""
        wanted = min(self.workers, tasks)
        if len(self._pool) < wanted:
            self.log.info(
                f"starting {wanted - len(self._pool)} multiprocess worker(s) "
                f"({wanted} of at most {self.workers})"
            )
            self._pool += [self._start_worker() for _ in range(wanted - len(self._pool))]

    def _replace(self, worker: _Worker) -> _Worker:
        _stop(worker, kill=True)
        fresh = self._start_worker()
        self._pool[self._pool.index(worker)] = fresh
        return fresh

    def run(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        on_result: OnResult | None = None,
    ) -> list[R]:
        if not tasks:
            return []
        self._ensure_started(len(tasks))
        pending: deque[int] = deque(range(len(tasks)))
        attempts = [0] * len(tasks)
        results: dict[int, R] = {}
        beat = Heartbeat(self.log, len(tasks), self.heartbeat_s)

        def failed(index: int, error: str) -> None:
            key = task_key(tasks[index])
            if attempts[index] >= self.max_attempts:
                self.close()
                raise ShardTaskFailed(key, attempts[index], error)
            self.log.warning(f"shard {key}: attempt {attempts[index]} failed ({error}); retrying")
            pending.appendleft(index)

        try:
            while len(results) < len(tasks):
                for worker in self._pool:
                    if worker.task_index is None and pending:
                        if not worker.process.is_alive():
                            # Died while idle (killed between runs, OOM): not the next shard's
                            # fault, so it costs that shard no attempt.
                            self.log.warning(
                                "a multiprocess worker died while idle (exit code "
                                f"{_exit_code(worker)}); starting another"
                            )
                            worker = self._replace(worker)
                        index = pending.popleft()
                        attempts[index] += 1
                        worker.task_index, worker.started_at = index, time.monotonic()
                        try:
                            worker.conn.send((index, fn, tasks[index]))
                        except (BrokenPipeError, OSError) as exc:
                            self._replace(worker)
                            failed(index, f"could not hand the task to a worker: {exc}")
                busy = [w for w in self._pool if w.task_index is not None]
                ready = set(
                    wait(
                        [w.conn for w in busy] + [w.process.sentinel for w in busy],
                        timeout=_POLL_SECONDS,
                    )
                )
                for worker in busy:
                    index = worker.task_index
                    assert index is not None
                    if worker.conn in ready:
                        try:
                            got_index, ok, payload = worker.conn.recv()
                        except (EOFError, OSError):
                            code = _exit_code(worker)
                            self._replace(worker)
                            failed(index, f"worker process died (exit code {code})")
                            continue
                        worker.task_index = None
                        if got_index != index:  # pragma: no cover - protocol guard
                            raise RuntimeError(f"worker answered task {got_index}, gave {index}")
                        if ok:
                            results[index] = payload
                            beat.finished()
                            if on_result is not None:
                                on_result(index, payload)
                        else:
                            failed(index, payload)
                    elif worker.process.sentinel in ready or not worker.process.is_alive():
                        code = _exit_code(worker)
                        self._replace(worker)
                        failed(index, f"worker process died (exit code {code})")
                    elif (
                        self.task_timeout_s is not None
                        and time.monotonic() - worker.started_at > self.task_timeout_s
                    ):
                        self._replace(worker)
                        failed(index, f"timed out after {self.task_timeout_s:g} s")
                beat.tick(
                    len(results),
                    {
                        task_key(tasks[w.task_index]): w.started_at
                        for w in self._pool
                        if w.task_index is not None
                    },
                )
        except BaseException:
            self.close()
            raise
        return [results[i] for i in range(len(tasks))]

    def close(self) -> None:
        for worker in self._pool:
            _stop(worker, kill=worker.task_index is not None)
        self._pool = []


def _exit_code(worker: _Worker) -> int | None:
    worker.process.join(timeout=1)
    return worker.process.exitcode


def _stop(worker: _Worker, *, kill: bool) -> None:
    """Ask a worker to exit (or kill it when it is busy), then reap it."""
    if not kill:
        with contextlib.suppress(BrokenPipeError, OSError):
            worker.conn.send(None)
        worker.process.join(timeout=5)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join(timeout=5)
    worker.conn.close()

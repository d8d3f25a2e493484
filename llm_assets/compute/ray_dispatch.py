"""The driver's side of a run on Ray: submit shard tasks, collect them, retry, time them out.

The driver retries, not Ray, so that every failed attempt is counted and logged: a task that
raised, whose worker or node died, or that timed out runs again, up to ``max_attempts`` in all.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from llm_assets.compute.base import Heartbeat, Logger, OnResult, R, ShardTaskFailed, T, task_key
from llm_assets.compute.ray_shard_call import OTHER_CODE, RAISED, RayCodeMismatchError

CLUSTER_CHECK_S = 5.0
"""On a cluster, how long ``ray.wait`` may return nothing before the driver checks that the
cluster still answers (:func:`~llm_assets.compute.ray_cluster.check_cluster_answers`). Ray itself
notices a stopped cluster only after 60 s of reconnecting at full CPU, and then ends the whole
process."""

RETRIED_RAY_ERRORS = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "RayTaskError")
"""The Ray errors (in ``ray.exceptions``) that end one attempt: the worker or its node died
(e.g. killed for memory), or the wrapper itself raised. The driver tries the shard again, up to
``max_attempts``. Any other Ray error (the driver's own raylet died, the task was cancelled, its
runtime environment failed) is final: Ray would not have retried it either."""


class ShardDispatch:
    """One run's shards on Ray through ``remote`` (the shard call as a Ray remote function).

    Two tasks per CPU (``slots``) in flight: a worker that finishes a shard starts the next one
    at once instead of waiting for the driver to see the result, run ``on_result`` and submit.
    More would only hold references. Ray runs a node's tasks in submission order, so the clock of
    a queued task starts when an earlier one finishes: the timeout measures running time.

    ``results`` and ``used`` (attempts per shard) may hold what was done before; ``expected`` is
    the code identity each task checks its node against (None: not checked); ``check_cluster``
    raises if the cluster stopped answering (None: a local Ray).
    """

    def __init__(
        self,
        remote: Any,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        on_result: OnResult | None,
        *,
        results: dict[int, R],
        used: list[int],
        expected: str | None,
        check_cluster: Callable[[], None] | None,
        slots: int,
        max_attempts: int,
        task_timeout_s: float | None,
        log: Logger,
        heartbeat_s: float,
    ) -> None:
        self.remote, self.fn, self.tasks, self.on_result = remote, fn, tasks, on_result
        self.results, self.used = results, used
        self.expected, self.check_cluster, self.slots = expected, check_cluster, slots
        self.max_attempts, self.task_timeout_s, self.log = max_attempts, task_timeout_s, log
        self.queue = deque(i for i in range(len(tasks)) if i not in results)
        self.in_flight: dict[Any, int] = {}
        self.running_since: dict[Any, float] = {}
        self.waiting: deque[Any] = deque()
        self.last_news = time.monotonic()
        self.beat = Heartbeat(log, len(tasks), heartbeat_s)

    def run(self) -> None:
        """Run every shard not in ``results`` yet, filling it; raise if one fails for good."""
        import ray

        while self.queue or self.in_flight:
            self._submit()
            done, _ = ray.wait(list(self.in_flight), num_returns=1, timeout=0.5)
            if done:
                self.last_news = time.monotonic()
            elif self.check_cluster and time.monotonic() - self.last_news >= CLUSTER_CHECK_S:
                self.check_cluster()
                self.last_news = time.monotonic()
            for ref in done:
                self._collect(ref)
            self.beat.tick(
                len(self.results),
                {
                    task_key(self.tasks[self.in_flight[r]]): began
                    for r, began in self.running_since.items()
                },
            )
            if self.task_timeout_s is not None:
                self._time_out_late()

    def _submit(self) -> None:
        """Fill the slots in flight from the queue; start the clock of those now running."""
        from ray import cloudpickle

        while self.queue and len(self.in_flight) < 2 * self.slots:
            index = self.queue.popleft()
            payload = cloudpickle.dumps((self.fn, self.tasks[index]))
            ref = self.remote.remote(payload, self.expected)
            self.in_flight[ref] = index
            self.waiting.append(ref)
        now = time.monotonic()
        while self.waiting and len(self.running_since) < self.slots:
            self.running_since[self.waiting.popleft()] = now

    def _collect(self, ref: Any) -> None:
        """Take the finished task ``ref``: keep its result, retry it, or fail the run."""
        import ray
        from ray.exceptions import RayError

        index = self.in_flight.pop(ref)
        if self.running_since.pop(ref, None) is None:
            self.waiting.remove(ref)
        try:
            status, value = ray.get(ref)
        except RayError as exc:
            if self.check_cluster:  # a node or raylet that died: is it the whole cluster?
                self.check_cluster()
            cause = getattr(exc, "cause", None) or exc
            error = f"{type(cause).__name__}: {cause}"
            retried = tuple(getattr(ray.exceptions, name) for name in RETRIED_RAY_ERRORS)
            if isinstance(exc, retried):
                self._attempt_failed(index, error)
                return
            self._cancel()
            self.used[index] += 1
            raise ShardTaskFailed(
                task_key(self.tasks[index]), self.used[index], f"Ray gave up, no retry: {error}"
            ) from exc
        if status == OTHER_CODE:
            self._cancel()
            raise RayCodeMismatchError(f"shard {task_key(self.tasks[index])}: {value}")
        if status == RAISED:
            self._attempt_failed(index, value)
            return
        self.results[index] = value
        self.beat.finished()
        if self.on_result is not None:
            self.on_result(index, value)

    def _time_out_late(self) -> None:
        """Kill the tasks running longer than the timeout; each counts as a failed attempt."""
        import ray

        now = time.monotonic()
        late = [r for r, began in self.running_since.items() if now - began > self.task_timeout_s]
        for ref in late:
            index = self.in_flight.pop(ref)
            del self.running_since[ref]
            ray.cancel(ref, force=True)  # kills the worker running it
            self._attempt_failed(index, f"timed out after {self.task_timeout_s:g} s")

    def _attempt_failed(self, index: int, error: str) -> None:
        """Count a failed attempt of shard ``index``: retry it, or fail the run."""
        self.used[index] += 1
        key = task_key(self.tasks[index])
        if self.used[index] >= self.max_attempts:
            self._cancel()
            raise ShardTaskFailed(key, self.used[index], error)
        self.log.warning(
            f"shard {key}: attempt {self.used[index]} of {self.max_attempts} failed ({error}); "
            "retrying"
        )
        self.queue.appendleft(index)

    def _cancel(self) -> None:
        import ray

        for ref in self.in_flight:
            ray.cancel(ref, force=True)

"""Run every task in the calling process, one after another."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llm_assets.compute.base import (
    ComputeBackend,
    OnResult,
    R,
    ShardTaskFailed,
    T,
    describe_error,
    task_key,
)


class InProcessBackend(ComputeBackend):
    """No workers, no start-up cost: the fastest choice for small inputs and for debugging.

    A task that raises is retried up to ``max_attempts`` times (an I/O hiccup can pass); timeouts
    cannot be enforced without a second process and are ignored here.
    """

    name = "in_process"

    def run(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        on_result: OnResult | None = None,
    ) -> list[R]:
        results: list[R] = []
        for index, task in enumerate(tasks):
            for attempt in range(1, self.max_attempts + 1):
                try:
                    result = fn(task)
                    break
                except Exception as exc:
                    if attempt == self.max_attempts:
                        raise ShardTaskFailed(task_key(task), attempt, describe_error(exc)) from exc
                    error = describe_error(exc)
                    self.log.warning(
                        f"shard {task_key(task)}: attempt {attempt} failed ({error}); retrying"
                    )
            results.append(result)
            if on_result is not None:
                on_result(index, result)
        return results

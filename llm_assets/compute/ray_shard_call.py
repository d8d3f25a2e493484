"""The remote function that runs one shard task in a Ray worker, and the code identity it checks.

The functions shipped to the workers are built by factories on purpose: cloudpickle then ships
their *code* to the worker (a module-level function it ships by name, and the worker runs its
own installed copy). So the check runs on a node whose llm_assets is older or newer than the
driver's, even one that predates the check, and before anything of llm_assets is unpickled there
(the shard function and task travel as bytes, loaded after the check).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

# What the shard call returns, with the shard's result, its error or the node's mismatch.
DONE, RAISED, OTHER_CODE = 0, 1, 2


class RayCodeMismatchError(RuntimeError):
    """A node of the Ray cluster runs another llm_assets than the driver (or none)."""


def _identity_function() -> Callable[[Any], str]:
    """The function that computes a package's code identity, to ship by value."""

    def identity_of(package: Any) -> str:
        """SHA-256 over what a wheel of the package holds: its ``.py`` files and its ``.txt``
        data (``lib/flagged_words_en.txt``, read by the flagged-words filter), in sorted
        relative-path order, each as path, length and bytes. Not other files an editable
        checkout may hold (editor backups, ``__pycache__``)."""
        import hashlib
        import os

        file = getattr(package, "__file__", None)
        root = os.path.dirname(file) if file else next(iter(package.__path__))
        paths = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            paths += [os.path.join(folder, f) for f in files if f.endswith((".py", ".txt"))]
        digest = hashlib.sha256()
        for relative in sorted(os.path.relpath(p, root).replace(os.sep, "/") for p in paths):
            with open(os.path.join(root, relative), "rb") as handle:
                data = handle.read()
            digest.update(relative.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
        return digest.hexdigest()

    return identity_of


def _code_check(identity_of: Callable[[Any], str]) -> Callable[[str], str | None]:
    """The worker's check of its llm_assets against the driver's, to ship by value."""

    def other_code(expected: str) -> str | None:
        """None if this worker's llm_assets has the driver's identity ``expected``, else why not.

        The worker's identity is computed once per worker process (kept on the package module)."""
        import socket

        try:
            import ray

            node = f"node {ray.get_runtime_context().get_node_id()} ({socket.gethostname()})"
        except Exception:
            node = f"node {socket.gethostname()}"
        try:
            import llm_assets as package
        except Exception as exc:
            return (
                f"llm_assets cannot be imported on Ray {node} ({type(exc).__name__}: {exc}); "
                "install the same llm_assets version as the driver's on every node of the Ray "
                "cluster"
            )
        mine = getattr(package, "_ray_code_identity", None)
        if mine is None:
            mine = identity_of(package)
            package._ray_code_identity = mine
        if mine == expected:
            return None
        where = getattr(package, "__file__", None) or next(iter(package.__path__))
        return (
            f"Ray {node} runs other llm_assets code than this run's driver: its package at "
            f"{where} has code identity {mine[:16]}, the driver's is {expected[:16]} (SHA-256 "
            "over the package's files). Its shards would be computed with that code but "
            "recorded under the driver's code version, and reused by later runs; nothing was "
            "computed there. Install the same llm_assets version on every node of the Ray "
            "cluster (and the driver), then run again"
        )

    return other_code


def _shard_call_with(other_code: Callable[[str], str | None]) -> Callable[..., tuple[int, Any]]:
    """The shard call that first checks its node's code with ``other_code``, to ship by value."""

    def call(payload: bytes, expected: str | None) -> tuple[int, Any]:
        """One shard task in a Ray worker: ``(DONE, result)``, ``(RAISED, error)`` if the
        task raised (the driver retries it, logging the attempt), or ``(OTHER_CODE, why)`` if
        this node's llm_assets is not the driver's (``expected``; None: not checked, for a local
        Ray, whose workers run this machine's installed package).

        Unlike a multiprocess worker, a Ray worker keeps the memory a shard freed (Arrow's pool
        and glibc hold it) for the next shard instead of handing it back to the OS after each
        one: the next shard then reuses those pages instead of faulting in fresh zeroed ones.
        Ray's memory budget has the room (peak 920-980 MB over all processes at 200K-1M rows on
        2 cores, target 1.5 GB, against 860-880 MB with the give-back); the multiprocess
        backend's 600 MB does not. Still bounded: a worker's heap is its largest shard's,
        whatever the corpus size. 200K rows, alternating: 6.64-7.09 s instead of 7.14-7.62 s (4
        pairs, each faster); 1M: 25.4 s, 26.7 s.
        """
        import pickle
        import traceback

        if expected is not None:
            why = other_code(expected)
            if why is not None:
                return 2, why  # OTHER_CODE
        try:
            fn, task = pickle.loads(payload)
            return 0, fn(task)  # DONE
        except Exception as exc:
            frames = traceback.extract_tb(exc.__traceback__)
            where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
            return 1, f"{type(exc).__name__}: {exc}{where}"  # RAISED

    # What Ray shows as the worker's process title (``ray::shard_task``) while it runs a shard.
    # No module attribute has this name, so cloudpickle still ships the function by value.
    call.__name__ = call.__qualname__ = "shard_task"
    return call


_identity_of = _identity_function()
shard_call = _shard_call_with(_code_check(_identity_of))
"""One shard task in a Ray worker (see the inner ``call``); run it with ``ray.remote``."""


@functools.cache
def code_identity() -> str:
    """This process's llm_assets code identity (see the module doc), computed once."""
    import llm_assets

    return _identity_of(llm_assets)

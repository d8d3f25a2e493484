"""A run config that does not fit a job, told in a line per mistake, with the key it most likely
meant ("did you mean 'seq_len'?").

``dagster job execute`` checks the run config against the job's schema before the run exists,
in the command's own process, and lets Dagster's error escape as a Python traceback whose
message holds the whole expected schema (a thousand characters for one misspelt key). Nothing of
ours runs between the check and the traceback but the interpreter's last resort for an uncaught
exception, ``sys.excepthook``: :func:`install_config_error_hook` (called where the definitions
are loaded) prints these errors short there and leaves every other exception to the hook before
it. The UI's launchpad shows the same errors beside the keys, and is left as it is.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

import dagster as dg

_JOB = re.compile(r"for job (\S+)")


def _unwrap(config_type: Any) -> Any:
    """The type inside optional (``Noneable``) wrappers."""
    while getattr(config_type, "inner_type", None) is not None and not hasattr(
        config_type, "fields"
    ):
        config_type = config_type.inner_type
    return config_type


def _at(config_type: Any, path: Iterable[str]) -> Any:
    """The type of the value at ``path``, or None where the schema has no such key."""
    for name in path:
        fields = getattr(_unwrap(config_type), "fields", None) or {}
        if name not in fields:
            return None
        config_type = fields[name].config_type
    return _unwrap(config_type)


def _keys_at(config_type: Any, path: Iterable[str]) -> list[str]:
    """The keys the schema allows at ``path`` (empty where it is not a mapping of fields)."""
    return sorted(getattr(_at(config_type, path), "fields", None) or {})


def _unknown_key(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r}: did you mean {close[0]!r}?"
    return f"unknown key {key!r}; the keys here are {', '.join(known)}"


def _path(mistake: Any) -> list[str]:
    """The keys leading to ``mistake`` (list positions left out)."""
    names = (getattr(entry, "field_name", None) for entry in mistake.stack.entries)
    return [str(name) for name in names if name is not None]


def _fit(error: dg.DagsterInvalidConfigError, schema: Any) -> int:
    """How many of ``error``'s mistakes lie on a path ``schema`` has: the job's has them all."""
    return sum(_at(schema, _path(mistake)) is not None for mistake in error.errors)


def describe_config_error(error: dg.DagsterInvalidConfigError, schema: Any) -> list[str]:
    """One line per mistake of ``error``, found checking a run config against ``schema`` (the
    job's run config type): where (``ops.training_batches.config``) and what."""
    lines = []
    for mistake in error.errors:
        path = _path(mistake)
        where = ".".join(path) or "the top level"
        key = getattr(mistake.error_data, "field_name", None)
        if key is not None and str(mistake.reason).endswith("FIELD_NOT_DEFINED"):
            known = _keys_at(schema, path)
            lines.append(f"{where}: {_unknown_key(key, known)}")
        else:  # a value of the wrong type, a missing key: Dagster's sentence, without the schema
            lines.append(mistake.message.split(" Expected: ")[0])
    return lines


def _schemas(defs: dg.Definitions, message: str) -> list[Any]:
    """The run config types the error may be about: its job's when the message names one (with a
    job config mapping, such as a default logger config, it does not), else every job's."""
    named = _JOB.search(message)
    jobs = (
        [defs.resolve_job_def(named[1])]
        if named
        else [job for job in defs.resolve_all_job_defs() if not job.name.startswith("__")]
    )
    return [job.run_config_schema.config_type for job in jobs]


def install_config_error_hook(defs: dg.Definitions) -> None:
    """Print a :class:`dagster.DagsterInvalidConfigError` that nothing caught (in a process that
    loaded ``defs``) as :func:`describe_config_error`'s lines; other exceptions, and errors in no
    job of ``defs``, go to the hook before."""
    previous = sys.excepthook
    if getattr(previous, "_llm_assets_config_errors", False):
        return

    def hook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        if isinstance(error, dg.DagsterInvalidConfigError):
            try:
                schemas = _schemas(defs, str(error))
            except dg.DagsterError:
                schemas = []
            if schemas:
                lines = describe_config_error(error, max(schemas, key=lambda s: _fit(error, s)))
                print("Error: the run config does not fit the job:", file=sys.stderr)
                print("\n".join(f"  {line}" for line in lines), file=sys.stderr)
                return
        previous(kind, error, tb)

    hook_: Callable[..., None] = hook
    hook_._llm_assets_config_errors = True  # type: ignore[attr-defined]
    sys.excepthook = hook_

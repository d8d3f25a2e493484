"""Dagster instance classes: storage whose relative folders are relative to ``DAGSTER_HOME``.

Dagster resolves a relative ``base_dir`` in ``dagster.yaml`` against the working directory of
whichever process reads it, so the same ``DAGSTER_HOME`` used from two folders makes two
instances: runs listed in one and not the other, and, worse for this project, two separate
concurrency pools (two runs could write the catalog at once), dead-run detection that never saw
the other folder's runs, and sensor cursors kept twice. These drop-in classes (named in the
shipped ``dagster.yaml``) read a relative ``base_dir`` against ``DAGSTER_HOME`` instead, so the
repository's ``.dagster/`` is the one instance wherever a command runs from. Absolute paths are
used as they are; without ``DAGSTER_HOME`` (an ephemeral instance) nothing changes. The variable
is what counts, not the folder the file was read from: ``DagsterInstance.from_config(folder)``
with another ``DAGSTER_HOME`` set uses that one's folders (Dagster hands the classes no folder).

This is the one module of the package that imports ``dagster._core``, Dagster's private API,
because what it extends is not exported at the top level of ``dagster``: the storage classes
above, the run launcher's worker-health answer (:class:`WorkerCheckingRunLauncher`) and the
failure reason of a run whose process died (:func:`report_run_died`). Dagster's own launchers
and events import them from there too. Keeping them here means one place to check when Dagster
is upgraded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.events import JobFailureData, RunFailureReason
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.local_compute_log_manager import LocalComputeLogManager
from dagster._core.storage.root import LocalArtifactStorage
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage


def home_path(base_dir: str) -> str:
    """``base_dir`` made absolute: as it is if absolute, else under ``$DAGSTER_HOME`` (when set)
    or the working directory (Dagster's own rule, the only one without a home)."""
    path = Path(os.path.expanduser(base_dir))
    home = os.environ.get("DAGSTER_HOME")
    if path.is_absolute() or not home:
        return str(path.absolute())
    return str(Path(home).expanduser().absolute() / path)


def _home_config(config_value: Any) -> dict[str, Any]:
    """A class's config with its ``base_dir`` made home-relative (:func:`home_path`)."""
    return {**config_value, "base_dir": home_path(config_value["base_dir"])}


class HomeSqliteStorage(DagsterSqliteStorage):
    """Dagster's SQLite run, event and schedule storage (``storage: sqlite``), home-relative."""

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> HomeSqliteStorage:
        return cls.from_local(inst_data=inst_data, base_dir=home_path(config_value["base_dir"]))


class HomeComputeLogManager(LocalComputeLogManager):
    """Dagster's local compute log manager (step stdout and stderr), home-relative."""

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> HomeComputeLogManager:
        return cls(inst_data=inst_data, **_home_config(config_value))


class HomeArtifactStorage(LocalArtifactStorage):
    """Dagster's local artifact storage (the instance's root directory), home-relative."""

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> HomeArtifactStorage:
        return cls(inst_data=inst_data, **_home_config(config_value))


def report_run_died(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Mark ``run`` failed with the reason Dagster gives a run whose process ended unexpectedly
    (``UNEXPECTED_TERMINATION``), as its own run monitoring does."""
    failure = JobFailureData(error=None, failure_reason=RunFailureReason.UNEXPECTED_TERMINATION)
    instance.report_run_failed(run, message, failure)


class WorkerCheckingRunLauncher(dg.DefaultRunLauncher):
    """Dagster's ``DefaultRunLauncher`` that answers run monitoring's question, is this run's
    process alive, with :meth:`worker_dead`, which a subclass implements."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def worker_dead(self, run: dg.DagsterRun) -> tuple[bool, str]:
        """Whether ``run``'s process is known to be gone, and the message saying why."""
        raise NotImplementedError

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        dead, message = self.worker_dead(run)
        return CheckRunHealthResult(WorkerStatus.FAILED if dead else WorkerStatus.RUNNING, message)

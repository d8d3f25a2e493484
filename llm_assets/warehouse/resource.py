"""The Dagster resource that says where the warehouse (shards and catalog) lives."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from llm_assets.constants import CATALOG_FILE, DEFAULT_WAREHOUSE_DIR
from llm_assets.orchestration.runs import RunWatch
from llm_assets.paths import inside, resolve_data_root
from llm_assets.warehouse.catalog import Catalog


class WarehouseResource(dg.ConfigurableResource):
    """Parquet shards under ``root/<asset>/<fingerprint>/`` and the DuckDB catalog beside them.

    A relative ``root`` is resolved against the working directory of the run (the repository root
    for the README's commands).

    Every step that writes the catalog is in one concurrency pool, and every such step needs this
    resource, which Dagster sets up before the run's first step claims a slot: so its setup is
    where the run records its process and frees the slots of runs whose process died (see
    :mod:`llm_assets.orchestration.runs`), and keeps doing so while the run runs.
    """

    root: str = DEFAULT_WAREHOUSE_DIR
    """Folder of the Parquet shards and the DuckDB catalog (relative: to the working directory)."""
    data_root: str = ""
    """The warehouse must lie inside this folder, and links in an input folder may lead only
    inside it or that input folder (empty: $LLM_ASSETS_DATA_ROOT, else the folder holding the
    warehouse; see :mod:`llm_assets.paths`)."""
    catalog_lock_timeout_s: float = 120.0
    """How long a run waits for the catalog while another process holds it."""
    _run_watch: RunWatch | None = PrivateAttr(default=None)

    @property
    def root_path(self) -> Path:
        """The warehouse folder as an absolute path."""
        return Path(self.root).expanduser().resolve()

    @property
    def data_root_path(self) -> Path:
        """The data root, resolved; the warehouse itself must lie inside it."""
        root = resolve_data_root(self.data_root, self.root_path)
        inside(self.root_path, root, "warehouse root")
        return root

    def catalog(self) -> Catalog:
        """The catalog of this warehouse (connections are opened per call)."""
        return Catalog(self.root_path / CATALOG_FILE, lock_timeout_s=self.catalog_lock_timeout_s)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Record this run's process in its tags and reclaim pool slots from dead runs, before
        any step of this run waits for one (nothing happens outside a run in progress)."""
        self._run_watch = RunWatch.start(context)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """Stop looking for dead runs."""
        if self._run_watch is not None:
            self._run_watch.stop()
            self._run_watch = None

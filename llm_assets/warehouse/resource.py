"""The Dagster resource that says where the warehouse (shards and catalog) lives."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from llm_assets.constants import CATALOG_FILE, DEFAULT_WAREHOUSE_DIR
from llm_assets.orchestration.runs import RunWatch
from llm_assets.paths import inside, resolve_data_root
from llm_assets.storage import is_remote
from llm_assets.warehouse.catalog import Catalog


class WarehouseConfigError(ValueError):
    """The warehouse resource's settings do not go together (the message names the setting)."""


class WarehouseResource(dg.ConfigurableResource):
    """Parquet shards under ``root/<asset>/<fingerprint>/`` and the DuckDB catalog beside them.

    A relative ``root`` is resolved against the working directory of the run (the repository root
    for the README's commands). A ``root`` in object storage (``s3://bucket/prefix``) holds the
    shards, which workers write straight to the bucket; the catalog is then a local file of the
    driver, ``catalog_path`` (see docs/object-storage.md).

    Every step that writes the catalog is in one concurrency pool, and every such step needs this
    resource, which Dagster sets up before the run's first step claims a slot: so its setup is
    where the run records its process and frees the slots of runs whose process died (see
    :mod:`llm_assets.orchestration.runs`), and keeps doing so while the run runs.
    """

    root: str = DEFAULT_WAREHOUSE_DIR
    """Folder of the Parquet shards and the DuckDB catalog (relative: to the working directory),
    or an object-storage URL such as `s3://bucket/prefix` (credentials and endpoint from the
    standard environment; then set `catalog_path`)."""
    catalog_path: str = ""
    """The DuckDB catalog, a local file of the driver (relative: to the working directory).
    Empty: `catalog.duckdb` in `root`; required when `root` is a URL."""
    data_root: str = ""
    """A local warehouse must lie inside this folder, and links in an input folder may lead only
    inside it or that input folder (empty: $LLM_ASSETS_DATA_ROOT, else the folder holding the
    warehouse, or the catalog's for a warehouse in object storage; see :mod:`llm_assets.paths`)."""
    catalog_lock_timeout_s: float = 120.0
    """How long a run waits for the catalog while another process holds it."""
    _run_watch: RunWatch | None = PrivateAttr(default=None)

    @property
    def remote(self) -> bool:
        """Whether the shards live in object storage."""
        return is_remote(self.root)

    @property
    def location(self) -> str:
        """Where the shards live: the absolute local folder, or the URL (no trailing ``/``)."""
        return self.root.rstrip("/") if self.remote else str(self.root_path)

    @property
    def root_path(self) -> Path:
        """The local warehouse folder as an absolute path (a ``file://`` URL's path)."""
        if self.remote:
            raise WarehouseConfigError(
                f"the warehouse root {self.root!r} is in object storage, not a local folder"
            )
        root = self.root.removeprefix("file://")
        return Path(root).expanduser().resolve()

    @property
    def catalog_file(self) -> Path:
        """The catalog's local file, resolved: ``catalog_path``, else ``catalog.duckdb`` in the
        local root. A URL root without ``catalog_path`` is refused, naming the setting."""
        if self.catalog_path:
            if is_remote(self.catalog_path):
                raise WarehouseConfigError(
                    f"resources.warehouse.config.catalog_path {self.catalog_path!r} is a URL: "
                    "the DuckDB catalog is a local file of the driver; give a local path"
                )
            return Path(self.catalog_path).expanduser().resolve()
        if self.remote:
            raise WarehouseConfigError(
                f"resources.warehouse.config.catalog_path is required when the warehouse root "
                f"is in object storage ({self.root!r}): the DuckDB catalog is a local file of "
                "the driver. Set it to a local file, e.g. catalog_path: data/catalog.duckdb"
            )
        return self.root_path / CATALOG_FILE

    @property
    def data_root_path(self) -> Path:
        """The data root, resolved; a local warehouse must lie inside it (one in object storage
        is where its URL says)."""
        if self.remote:
            return resolve_data_root(self.data_root, self.catalog_file)
        root = resolve_data_root(self.data_root, self.root_path)
        inside(self.root_path, root, "warehouse root")
        return root

    def catalog(self) -> Catalog:
        """The catalog of this warehouse (connections are opened per call; in object storage,
        each connection reads the shards through the bucket's filesystem)."""
        return Catalog(
            self.catalog_file,
            lock_timeout_s=self.catalog_lock_timeout_s,
            remote_root=self.location if self.remote else None,
        )

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Refuse settings that do not go together (before any step), record this run's process
        in its tags and reclaim pool slots from dead runs, before any step of this run waits for
        one (nothing happens outside a run in progress)."""
        self.catalog_file  # noqa: B018 - raises WarehouseConfigError naming the setting
        self._run_watch = RunWatch.start(context)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """Stop looking for dead runs."""
        if self._run_watch is not None:
            self._run_watch.stop()
            self._run_watch = None

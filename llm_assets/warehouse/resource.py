"""The Dagster resource that says where the warehouse (shards and catalog) lives."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from llm_assets.constants import CATALOG_FILE, DEFAULT_WAREHOUSE_DIR
from llm_assets.paths import inside, resolve_data_root
from llm_assets.warehouse.catalog import Catalog


class WarehouseResource(dg.ConfigurableResource):
    """Parquet shards under ``root/<asset>/<fingerprint>/`` and the DuckDB catalog beside them.

    A relative ``root`` is resolved against the working directory of the run (the repository root
    for the README's commands).
    """

    root: str = DEFAULT_WAREHOUSE_DIR
    data_root: str = ""
    """Every input and output path must resolve inside this folder (empty: $LLM_ASSETS_DATA_ROOT,
    else the folder holding the warehouse)."""
    catalog_lock_timeout_s: float = 120.0
    """How long a run waits for the catalog while another process holds it."""

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

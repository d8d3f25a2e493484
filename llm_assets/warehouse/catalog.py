"""The DuckDB catalog beside the Parquet shards: lineage, restart bookkeeping and SQL views.

Only the driver process writes it, through short-lived connections (DuckDB lets one process hold a
file read-write and no other process open it at the same time). A connection that finds the file
locked by another process waits and retries, then fails with a message that says so.

Tables: ``materializations`` (one row per asset per run), ``shards`` (every shard ever written,
with rows, bytes, checksum, what it was computed from and on which node or host) and
``current_shards`` (which shards make up each asset now). Views: one per asset over its current
Parquet, one per asset's rejects (``<asset>_rejects``) and ``rejects`` over all of them.

With the shards in object storage (``remote_root``), the file stays local and every connection
registers the bucket's fsspec filesystem with DuckDB (DuckDB's own ``httpfs`` extension is not
needed), so the views read the remote Parquet; a connection opened by other means (the ``duckdb``
shell) reads the tables, not those views (see docs/object-storage.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from llm_assets import storage
from llm_assets.constants import PIPELINE_ASSETS, TRAINING_BATCHES
from llm_assets.kernels.schema import REJECT_SCHEMA

_log = logging.getLogger(__name__)

_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS materializations (
    materialization_id VARCHAR PRIMARY KEY,
    asset VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    run_id VARCHAR,
    backend VARCHAR,
    config JSON,
    code_version VARCHAR,
    started_at TIMESTAMP,
    finished_at TIMESTAMP,
    wall_seconds DOUBLE,
    shards INTEGER,
    shards_skipped INTEGER,
    rows_in BIGINT,
    rows_out BIGINT,
    rows_rejected BIGINT,
    extra JSON
);
CREATE TABLE IF NOT EXISTS shards (
    asset VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    shard VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    rejects_path VARCHAR,
    rows_in BIGINT,
    rows_out BIGINT,
    rows_rejected BIGINT,
    bytes BIGINT,
    checksum VARCHAR,
    input_fingerprint VARCHAR,
    input_shards JSON,
    config JSON,
    code_version VARCHAR,
    run_id VARCHAR,
    seconds DOUBLE,
    recorded_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (asset, fingerprint, shard)
);
ALTER TABLE shards ADD COLUMN IF NOT EXISTS node VARCHAR;
CREATE TABLE IF NOT EXISTS current_shards (
    asset VARCHAR NOT NULL,
    position INTEGER NOT NULL,
    shard VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    rejects_path VARCHAR,
    materialization_id VARCHAR,
    PRIMARY KEY (asset, position)
);
"""

_SHARD_COLUMNS = (
    "asset",
    "fingerprint",
    "shard",
    "path",
    "rejects_path",
    "rows_in",
    "rows_out",
    "rows_rejected",
    "bytes",
    "checksum",
    "input_fingerprint",
    "input_shards",
    "config",
    "code_version",
    "run_id",
    "seconds",
    "node",
)


class CatalogLockedError(RuntimeError):
    """Another process holds the catalog file (a second run, or an open ``duckdb`` shell)."""


class CatalogUnreadableError(OSError):
    """The catalog file exists but DuckDB cannot open it (not a DuckDB database, truncated, a
    folder, or written by a newer DuckDB): reported as such at once, not as a lock waited for."""


@dataclass(frozen=True)
class MaterializationState:
    """Which run materialized an asset, into which stage folder, with which config (JSON)."""

    run_id: str
    fingerprint: str
    config: str


@dataclass(frozen=True)
class ShardRecord:
    """One finished shard, as the catalog stores it."""

    asset: str
    fingerprint: str
    shard: str
    path: str
    rejects_path: str | None
    rows_in: int
    rows_out: int
    rows_rejected: int
    bytes: int
    checksum: str
    input_fingerprint: str
    input_shards: Sequence[str] = field(default_factory=tuple)
    config: str = "{}"
    code_version: str = ""
    run_id: str = ""
    seconds: float = 0.0
    node: str | None = None
    """Where it was computed: ``ray:<node id>`` on Ray, else the host name (None: unknown)."""

    def values(self) -> list[Any]:
        row = asdict(self)
        row["input_shards"] = json.dumps(list(self.input_shards))
        return [row[c] for c in _SHARD_COLUMNS]


INSERT_CHUNK_ROWS = 500


def insert_values(
    con: duckdb.DuckDBPyConnection,
    statement: str,
    rows: Sequence[Sequence[Any]],
    placeholders: str | None = None,
) -> None:
    """Run ``statement`` (``INSERT ... INTO t [(cols)]``) with ``rows`` as multi-row ``VALUES``.

    DuckDB's ``executemany`` runs (and, outside a transaction, commits) one statement per row:
    ~6-45 ms a row on this machine, so recording 20 shards took up to a second. One statement per
    ``INSERT_CHUNK_ROWS`` rows takes milliseconds. ``placeholders`` is one row's ``?, ?, ...``
    (default: one ``?`` per value of the first row), e.g. to wrap a value in ``to_timestamp(?)``."""
    if not rows:
        return
    row_sql = f"({placeholders or ', '.join('?' for _ in rows[0])})"
    for start in range(0, len(rows), INSERT_CHUNK_ROWS):
        chunk = rows[start : start + INSERT_CHUNK_ROWS]
        con.execute(
            f"{statement} VALUES {', '.join(row_sql for _ in chunk)}",
            [value for row in chunk for value in row],
        )


def _check_asset(asset: str) -> str:
    """Asset names become SQL identifiers: only names from the allow-list pass."""
    if asset not in PIPELINE_ASSETS:
        raise ValueError(f"{asset!r} is not a pipeline asset; expected one of {PIPELINE_ASSETS}")
    return asset


def _sql_list(paths: Sequence[str]) -> str:
    """A SQL list literal of file paths (paths are ours, still quoted and escaped)."""
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


_OPEN_SESSIONS: dict[Path, duckdb.DuckDBPyConnection] = {}
"""The connection of every :meth:`Catalog.session` open in this process, by resolved file path.

While a session holds a file read-write, DuckDB refuses this process a read-only connection to it
("Can't open a connection to same database file with a different configuration"): a reader in the
same process (backend ``auto`` reading ``benchmark_results`` inside a stage) must use the
session's connection, whichever :class:`Catalog` object opened it."""


class Catalog:
    """The warehouse's DuckDB file. Cheap to construct; connects only inside each call."""

    def __init__(
        self, path: str | Path, lock_timeout_s: float = 60.0, remote_root: str | None = None
    ) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self.remote_root = remote_root
        """The object-storage URL of the shards the catalog records, None for a local warehouse."""
        self._session: duckdb.DuckDBPyConnection | None = None

    def _open_session(self) -> duckdb.DuckDBPyConnection | None:
        """This catalog's open session, else one another Catalog opened on the same file."""
        return self._session or _OPEN_SESSIONS.get(self.path.resolve())

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Keep one writable connection open for a block (a stage): every :meth:`connect` inside
        reuses it, on this Catalog or any other of the same file in this process. Opening a
        DuckDB file costs ~15 ms, and a stage makes a dozen calls; the file is still held only
        while the stage runs. Re-entrant."""
        if self._open_session() is not None:
            yield
            return
        key = self.path.resolve()
        with self.connect() as con:
            self._session = _OPEN_SESSIONS[key] = con
            try:
                yield
            finally:
                self._session = None
                _OPEN_SESSIONS.pop(key, None)

    @contextlib.contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived connection (or the open :meth:`session`'s); waits up to
        ``lock_timeout_s`` while another process holds the file."""
        session = self._open_session()
        if session is not None:
            yield session
            return
        folder = self.path.parent
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(
                f"the warehouse root {folder} is a file, not a folder: move it away or set the "
                "warehouse resource's root to a folder"
            )
        folder.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=read_only and self.path.exists())
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise CatalogUnreadableError(
                        f"the warehouse catalog {self.path} cannot be opened: {exc} (the "
                        "Parquet shards beside it are intact: move the file away and the next "
                        "run starts a new catalog, finding finished shards by their footers)"
                    ) from exc
                if time.monotonic() > deadline:
                    raise CatalogLockedError(
                        f"the warehouse catalog {self.path} is in use by another process "
                        f"(waited {self.lock_timeout_s:g} s): {exc}"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        try:
            if self.remote_root is not None:
                # A filesystem of its own per connection: it remembers the objects' details for
                # the connection's life (a stage's session at most), never across stages.
                con.register_filesystem(storage.query_filesystem(self.remote_root))
                # Each view's rebuild binds every view again (``rejects`` over all of them):
                # one footer read per object and connection, not one per bind.
                con.execute("SET parquet_metadata_cache = true")
            if not read_only:
                con.execute(_SCHEMA_SQL)
            yield con
        finally:
            con.close()

    # --- writes (driver only) ----------------------------------------------------------------
    def record_shards(self, records: Sequence[ShardRecord]) -> None:
        """Insert or replace shard rows."""
        if not records:
            return
        with self.connect() as con:
            insert_values(
                con,
                f"INSERT OR REPLACE INTO shards ({', '.join(_SHARD_COLUMNS)})",
                [r.values() for r in records],
            )

    def record_materialization(
        self,
        *,
        materialization_id: str,
        asset: str,
        fingerprint: str,
        run_id: str,
        backend: str,
        config: dict[str, Any],
        code_version: str,
        started_at: float,
        finished_at: float,
        shards: Sequence[ShardRecord],
        shards_skipped: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Record a finished materialization and make ``shards`` the asset's current output;
        then rebuild the asset's SQL views."""
        _check_asset(asset)
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(
                    "INSERT OR REPLACE INTO materializations VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, to_timestamp(?), to_timestamp(?), ?, ?, ?, ?, ?, ?, ?)",
                    [
                        materialization_id,
                        asset,
                        fingerprint,
                        run_id,
                        backend,
                        json.dumps(config, sort_keys=True, default=str),
                        code_version,
                        started_at,
                        finished_at,
                        finished_at - started_at,
                        len(shards),
                        shards_skipped,
                        sum(s.rows_in for s in shards),
                        sum(s.rows_out for s in shards),
                        sum(s.rows_rejected for s in shards),
                        json.dumps(extra or {}, sort_keys=True, default=str),
                    ],
                )
                con.execute("DELETE FROM current_shards WHERE asset = ?", [asset])
                insert_values(
                    con,
                    "INSERT INTO current_shards",
                    [
                        [
                            asset,
                            i,
                            s.shard,
                            s.fingerprint,
                            s.path,
                            s.rejects_path,
                            materialization_id,
                        ]
                        for i, s in enumerate(shards)
                    ],
                )
                self._rebuild_views(con, asset, shards)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    @staticmethod
    def _rebuild_views(
        con: duckdb.DuckDBPyConnection, asset: str, shards: Sequence[ShardRecord]
    ) -> None:
        paths = [s.path for s in shards]
        if paths and asset == TRAINING_BATCHES:
            # Each batch file holds one split (part-<split>-<bucket>.parquet): the view says which.
            con.execute(
                f"CREATE OR REPLACE VIEW {asset} AS "
                "SELECT * EXCLUDE (filename), "
                "regexp_extract(filename, 'part-([^/]+)-[0-9]+\\.parquet$', 1) AS split "
                f"FROM read_parquet({_sql_list(paths)}, union_by_name = true, filename = true)"
            )
        elif paths:
            con.execute(
                f"CREATE OR REPLACE VIEW {asset} AS "
                f"SELECT * FROM read_parquet({_sql_list(paths)}, union_by_name = true)"
            )
        else:
            con.execute(f"DROP VIEW IF EXISTS {asset}")
        reject_paths = [s.rejects_path for s in shards if s.rejects_path]
        if reject_paths:
            body = f"SELECT * FROM read_parquet({_sql_list(reject_paths)})"
        else:
            columns = ", ".join(
                f"CAST(NULL AS {'BIGINT' if f.type == 'int64' else 'VARCHAR'}) AS {f.name}"
                for f in REJECT_SCHEMA
            )
            body = f"SELECT {columns} WHERE false"
        con.execute(f"CREATE OR REPLACE VIEW {asset}_rejects AS {body}")
        existing = {
            name: comment
            for name, comment in con.execute(
                "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal"
            ).fetchall()
        }
        # An asset whose current rejects file is gone (deleted by hand) would make the view, and
        # so every stage's record, fail: it is left out, with a warning, until that asset is
        # materialized again (its stage then recomputes the shard: see the stage engine's
        # _unchanged).
        recorded = con.execute(
            "SELECT asset, rejects_path FROM current_shards WHERE rejects_path IS NOT NULL"
        ).fetchall()
        sizes = storage.file_sizes(path for _, path in recorded)
        gone = sorted({a for a, path in recorded if sizes[path] is None})
        if gone:
            _log.warning(
                f"rejects of {gone} left out of the rejects view: their current rejects file(s) "
                "are missing; materialize those assets again to rewrite them"
            )
        parts = [a for a in PIPELINE_ASSETS if f"{a}_rejects" in existing and a not in gone]
        # Views are bound when created: creating ``rejects`` again reads every asset's rejects
        # files (their footers), which for a warehouse in object storage is a request or two
        # each. The views it unites keep their names and columns when replaced, so it is
        # created again only when the set changes (its comment names the set).
        if existing.get("rejects") != ",".join(parts):
            union = " UNION ALL ".join(f"SELECT * FROM {a}_rejects" for a in parts)
            con.execute(f"CREATE OR REPLACE VIEW rejects AS {union}")
            con.execute(f"COMMENT ON VIEW rejects IS '{','.join(parts)}'")

    # --- reads ------------------------------------------------------------------------------
    def current_shards(self, asset: str) -> list[ShardRecord]:
        """The shards that make up ``asset`` now, in order (empty if never materialized)."""
        _check_asset(asset)
        return self._shard_records(
            "FROM current_shards c JOIN shards s "
            "ON s.asset = c.asset AND s.fingerprint = c.fingerprint AND s.shard = c.shard "
            "WHERE c.asset = ? ORDER BY c.position",
            [asset],
        )

    def current_fingerprint(self, asset: str, read_only: bool = False) -> str | None:
        """The stage fingerprint ``asset``'s current output was written under (its folder's
        name); None if it was never materialized."""
        _check_asset(asset)
        with self.connect(read_only=read_only) as con:
            rows = con.execute(
                "SELECT DISTINCT fingerprint FROM current_shards WHERE asset = ?", [asset]
            ).fetchall()
        return rows[0][0] if len(rows) == 1 else None

    def materialization_states(
        self, assets: Sequence[str], run_id: str
    ) -> dict[str, tuple[MaterializationState | None, MaterializationState]]:
        """Per asset of ``assets`` materialized at all: (its latest materialization by run
        ``run_id``, or None; its latest materialization by any run). One query."""
        for asset in assets:
            _check_asset(asset)
        if not self.path.exists() or not assets:
            return {}
        with self.connect() as con:
            rows = con.execute(
                "SELECT asset, run_id, fingerprint, config, run_id = $run AS ours, "
                "row_number() OVER (PARTITION BY asset ORDER BY finished_at DESC) AS n, "
                "row_number() OVER (PARTITION BY asset, run_id = $run ORDER BY finished_at DESC) "
                "AS n_here FROM materializations WHERE list_contains($assets, asset) "
                "QUALIFY n = 1 OR (ours AND n_here = 1)",
                {"run": run_id, "assets": list(assets)},
            ).fetchall()
        states: dict[str, dict[str, MaterializationState]] = {}
        for asset, run, fp, config, ours, n, _ in rows:
            state = MaterializationState(str(run), str(fp), str(config))
            if ours:
                states.setdefault(asset, {})["ours"] = state
            if n == 1:
                states.setdefault(asset, {})["latest"] = state
        return {a: (st.get("ours"), st["latest"]) for a, st in states.items() if "latest" in st}

    def stage_shards(self, asset: str, fingerprint: str) -> list[ShardRecord]:
        """Every shard recorded in one stage folder of ``asset`` (one stage config and code
        version), current or not: an intermediate phase's shards, and those of a config used
        before and used again, are never current but are still reused."""
        _check_asset(asset)
        return self._shard_records(
            "FROM shards s WHERE s.asset = ? AND s.fingerprint = ? ORDER BY s.shard",
            [asset, fingerprint],
        )

    def _shard_records(self, from_where: str, params: list[Any]) -> list[ShardRecord]:
        if not self.path.exists():
            return []
        with self.connect() as con:
            rows = con.execute(
                f"SELECT {', '.join('s.' + c for c in _SHARD_COLUMNS)} {from_where}", params
            ).fetchall()
        records = []
        for row in rows:
            values = dict(zip(_SHARD_COLUMNS, row, strict=True))
            values["input_shards"] = tuple(json.loads(values["input_shards"] or "[]"))
            records.append(ShardRecord(**values))
        return records

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a read query (views and tables above) and return all rows."""
        with self.connect() as con:
            return con.execute(sql, params or []).fetchall()

    def query_arrow(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """Run a read query and return an Arrow table: for results of one row per document, which
        as Python tuples would cost ~100 bytes a row (100 MB per million documents)."""
        with self.connect() as con:
            return con.sql(sql, params=params or None).to_arrow_table()

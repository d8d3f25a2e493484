"""Markdown a person reads in the UI: numbers with units, text shown literally, and the tables of
a stage's sample rows, reject reasons, reject samples and mixture."""

from __future__ import annotations

import html
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from llm_assets import storage
from llm_assets.stages.engine import StageReport
from llm_assets.warehouse.catalog import Catalog

_SAMPLE_ROWS = 5
_CELL_CHARS = 80
_LIST_ITEMS = 12


# --- numbers ------------------------------------------------------------------------------------
def count(n: float) -> str:
    """``188838`` as ``188,838``."""
    return f"{n:,.0f}"


def percent(part: float, whole: float) -> str:
    """``part`` as a share of ``whole``: ``39.1 %``; two decimals under 1 % and over 99 %
    (``0.18 %``, ``99.97 %``) so that neither some nor not all reads as none or all."""
    if not whole or not part:
        return "0 %"
    share = 100 * part / whole
    return f"{share:.2f} %" if share < 1 or 99 < share < 100 else f"{share:.1f} %"


def duration(seconds: float) -> str:
    """``0.36 s``, ``12.5 s``, ``3 min 05 s``, ``1 h 02 min``."""
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def rate(n: float, seconds: float, unit: str) -> str:
    """``n`` per second: ``10,175 rows/s``."""
    return f"{count(n / max(seconds, 1e-9))} {unit}/s"


def top_reasons(reasons: dict[str, int], whole: int, n: int = 3) -> str:
    """The ``n`` most frequent reject reasons with their counts and shares of ``whole``:
    ``too_few_tokens 786 (21.6 %), … and 4 more``."""
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    shown = [f"{_escape(r)} {count(c)} ({percent(c, whole)})" for r, c in ranked[:n]]
    more = f" and {len(ranked) - n} more" if len(ranked) > n else ""
    return ", ".join(shown) + more


# --- text shown literally -----------------------------------------------------------------------
_MARKDOWN_SPECIAL = re.compile(r"([\\`*\[\]~|#])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
"""Markdown's special characters; ``_`` only where it could open or close emphasis, so that
names such as ``exact_duplicate`` stay as they are (CommonMark never reads ``a_b`` as emphasis)."""


def _escape(text: str) -> str:
    """``text`` shown literally in a Markdown table cell: HTML (a ``<EMAIL>`` placeholder, a tag
    in raw text) and Markdown emphasis, links and pipes escaped, line breaks as spaces."""
    escaped = html.escape(text.replace("\n", " "), quote=False)
    return _MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(0), escaped)


def _cell(value: Any) -> str:
    """A short rendering of one value, shown literally (:func:`_escape`): at most
    ``_CELL_CHARS`` characters of text, cut before escaping (so no entity is split); a list
    shows its first items and always its whole length, ``[a, b, …] (1024)``."""
    if isinstance(value, list):
        return _list_cell(value, len(value))
    text = "" if value is None else str(value)
    return _escape(text if len(text) <= _CELL_CHARS else text[: _CELL_CHARS - 1] + "…")


def _list_cell(head: list[Any], length: int) -> str:
    """:func:`_cell` of a list of ``length`` items whose first ones are ``head``."""
    suffix = f"{', …' if length > _LIST_ITEMS else ''}] ({length})"
    text = "[" + ", ".join(str(v) for v in head[:_LIST_ITEMS])
    room = _CELL_CHARS - len(suffix)
    if len(text) > room:
        text = text[: room - 1] + "…"
    return _escape(text) + _escape(suffix)


def _column_cells(column: pa.ChunkedArray) -> list[str]:
    """:func:`_cell` of each value, cut in Arrow first: a 60 MB text or a list of millions of
    ids becomes the few characters or items shown, never a Python object of its size."""
    kind = column.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        lengths = pc.list_value_length(column).to_pylist()
        heads = pc.list_slice(column, 0, _LIST_ITEMS).to_pylist()
        return [
            _cell(None) if n is None else _list_cell(h, n)
            for h, n in zip(heads, lengths, strict=True)
        ]
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        column = pc.utf8_slice_codeunits(column, 0, _CELL_CHARS + 1)
    return [_cell(value) for value in column.to_pylist()]


def _fenced(text: str) -> str:
    """``text`` as a Markdown code block, shown as it is (a fence longer than its backticks)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def code_span(text: str) -> str:
    """``text`` as inline code, shown as it is: a fence longer than any run of backticks in it,
    padded with spaces when it starts or ends with one."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# --- tables -------------------------------------------------------------------------------------
def facts_list(rows: list[tuple[str, str]]) -> str:
    """A bullet per fact, ``- **name**: value``: a list wraps its long lines in the UI's
    metadata table, where a table's cells are cut at the column's edge."""
    return "\n".join(f"- **{name}**: {value}" for name, value in rows)


def sample_markdown(report: StageReport, rows: int = _SAMPLE_ROWS) -> str:
    """The first rows of the first non-empty shard as a Markdown table."""
    for shard in report.shards:
        if shard.rows_out:
            table = storage.parquet_file(shard.path).read_row_group(0).slice(0, rows)
            header = "| " + " | ".join(table.column_names) + " |"
            rule = "|" + "---|" * table.num_columns
            cells = zip(*(_column_cells(column) for column in table.columns), strict=True)
            lines = ["| " + " | ".join(row) + " |" for row in cells]
            return "\n".join([header, rule, *lines])
    return "_no rows_"


def mixture_markdown(mixture: dict[str, Any], planned: dict[str, Any]) -> str:
    """The train split's sources as a Markdown table: each one's share by its weight, its share
    of the documents and tokens given to the batches, and its train documents before the
    mixture (``planned``: absent for a folder written before it was recorded)."""
    lines = [
        "| source | share (weight) | tokens | token share | documents | document share | "
        "train documents before |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, held in mixture.items():
        before = (planned.get(name) or {}).get("train_documents")
        lines.append(
            f"| {_escape(str(name))} | {held.get('share', 0):.1%} | {held.get('tokens', 0):,} "
            f"| {held.get('token_share', 0):.1%} | {held.get('documents', 0):,} "
            f"| {held.get('document_share', 0):.1%} "
            f"| {'' if before is None else f'{before:,}'} |"
        )
    return "\n".join(lines)


def reasons_markdown(reasons: dict[str, int], rows_in: int = 0) -> str:
    """Reject counts per reason as a Markdown table, most frequent first, each with its share
    of the rows the stage was given (when ``rows_in`` is known)."""
    if not reasons:
        return "_no rejects_"
    lines = ["| reason | rows | share of rows in |", "|---|--:|--:|"]
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    lines += [
        f"| {_escape(reason)} | {count(n)} | {percent(n, rows_in) if rows_in else ''} |"
        for reason, n in ranked
    ]
    return "\n".join(lines)


_REJECT_SAMPLES_PER_REASON = 3


def reject_samples_markdown(catalog: Catalog, asset: str) -> str:
    """Up to three rejects per reason (first in source order), each with its location, value
    and the start of its text: what a person reads to judge whether a filter is right."""
    rows = catalog.query(
        "SELECT reason, doc_id, source_file, source_line, value, sample FROM ("
        "SELECT *, row_number() OVER (PARTITION BY reason ORDER BY source_file, source_line, "
        f"doc_id) AS n FROM {asset}_rejects) WHERE n <= ? ORDER BY reason, n",
        [_REJECT_SAMPLES_PER_REASON],
    )
    if not rows:
        return "_no rejects_"
    lines = ["| reason | doc_id | source | value | sample |", "|---|---|---|---|---|"]
    for reason, doc_id, source_file, source_line, value, sample in rows:
        cells = [reason, doc_id, f"{source_file}:{source_line}", value, sample]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def query_markdown(catalog_path: str, asset: str) -> str:
    """The SQL a person runs on the catalog to look at the asset and its rejects."""
    return (
        f"```sql\n-- the catalog, in duckdb:\n-- {catalog_path}\nSELECT * FROM {asset} LIMIT 10;\n"
        f"SELECT reason, count(*)\nFROM {asset}_rejects GROUP BY reason;\n"
        "-- why was a document dropped?\n"
        "SELECT stage, reason, value FROM rejects\nWHERE doc_id = '<doc_id>';\n```"
    )

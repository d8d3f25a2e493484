"""Turn a stage report into what the Dagster UI shows: metadata, a sample table, check results."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.parquet as pq

from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import ROWS_REJECTED_CHECK, TRAINING_BATCHES
from llm_assets.kernels.schema import DOC_ID, INPUT_IDS, LEARNED_SPANS, PROMPT_TOKENS
from llm_assets.kernels.tokenize.tokenizer import Tokenizer
from llm_assets.stages.engine import StageReport
from llm_assets.warehouse.catalog import Catalog

_SAMPLE_ROWS = 5
_CELL_CHARS = 80
_LIST_ITEMS = 12


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
        suffix = f"{', …' if len(value) > _LIST_ITEMS else ''}] ({len(value)})"
        head = "[" + ", ".join(str(v) for v in value[:_LIST_ITEMS])
        room = _CELL_CHARS - len(suffix)
        if len(head) > room:
            head = head[: room - 1] + "…"
        return _escape(head) + _escape(suffix)
    text = "" if value is None else str(value)
    return _escape(text if len(text) <= _CELL_CHARS else text[: _CELL_CHARS - 1] + "…")


def _ordered_bins(histogram: dict[str, int]) -> list[list[Any]]:
    """A length histogram (``"0-7"``, ``"8-15"``, ..., ``">1024"`` -> documents) as ``[bin,
    documents]`` pairs in length order, whatever order the dict came in (the catalog's JSON
    sorts keys as text: "1024-1024" before "128-255")."""

    def lower(name: str) -> tuple[int, int]:
        digits = re.match(r">?(\d+)", name)
        return (int(digits.group(1)) if digits else -1, name.startswith(">"))

    return [[name, histogram[name]] for name in sorted(histogram, key=lower)]


def sample_markdown(report: StageReport, rows: int = _SAMPLE_ROWS) -> str:
    """The first rows of the first non-empty shard as a Markdown table."""
    for shard in report.shards:
        if shard.rows_out:
            table = pq.ParquetFile(shard.path).read_row_group(0).slice(0, rows)
            header = "| " + " | ".join(table.column_names) + " |"
            rule = "|" + "---|" * table.num_columns
            lines = [
                "| " + " | ".join(_cell(v) for v in row.values()) + " |"
                for row in table.to_pylist()
            ]
            return "\n".join([header, rule, *lines])
    return "_no rows_"


_EXAMPLE_CHARS = 1500
"""Characters of an SFT example's prompt shown (its end: where the answer joins it), and of its
learned text (its start and end)."""


def sft_example_markdown(report: StageReport, tok: Tokenizer) -> str:
    """An SFT row of the output as a model trains on it: its prompt (masked out of the loss) and
    the tokens it learns, decoded with special tokens written out, so a person sees what the
    template made of a conversation (the turn's end learned, a header not) without reading ids.
    The first row, or the first of the first row group learning more than one answer
    (``chat_answers: all``: masked and learned parts alternate). Empty when the rows have no
    prompt."""
    for shard in report.shards:
        if not shard.rows_out:
            continue
        footer = pq.ParquetFile(shard.path)
        names = footer.schema_arrow.names
        if PROMPT_TOKENS not in names:
            return ""
        columns = [DOC_ID, INPUT_IDS, PROMPT_TOKENS]
        columns += [LEARNED_SPANS] if LEARNED_SPANS in names else []
        rows = footer.read_row_group(0, columns=columns).to_pylist()
        row = next((r for r in rows if len(r.get(LEARNED_SPANS) or ()) > 1), rows[0])
        ids, cut = row[INPUT_IDS], row[PROMPT_TOKENS]
        spans = [(s["start"], s["end"]) for s in row.get(LEARNED_SPANS) or ()]
        spans = spans or ([(cut, len(ids))] if cut < len(ids) else [])
        parts, at = [], 0
        for start, end in [*spans, (len(ids), len(ids))]:
            if start > at:
                text = tok.decode(ids[at:start])
                if len(text) > _EXAMPLE_CHARS:
                    text = "…" + text[-_EXAMPLE_CHARS:]
                parts += ["**Prompt**" if at == 0 else "**Masked**", _fenced(text)]
            if end > start:
                text = tok.decode(ids[start:end])
                if len(text) > _EXAMPLE_CHARS:
                    half = _EXAMPLE_CHARS // 2
                    text = f"{text[:half]}\n…\n{text[-half:]}"
                parts += ["**Learned**", _fenced(text)]
            at = end
        learned = sum(end - start for start, end in spans)
        answers = f" in {len(spans)} parts" if len(spans) > 1 else ""
        return "\n".join(
            [
                f"Row `{row[DOC_ID]}`: {len(ids) - learned} token(s) masked out of the loss and "
                f"{learned} learned token(s){answers} (the batches add EOS after them).",
                "",
                *parts,
            ]
        )
    return ""


def _fenced(text: str) -> str:
    """``text`` as a Markdown code block, shown as it is (a fence longer than its backticks)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


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


def reasons_markdown(reasons: dict[str, int]) -> str:
    """Reject counts per reason as a Markdown table."""
    if not reasons:
        return "_no rejects_"
    lines = ["| reason | rows |", "|---|---|"]
    lines += [f"| {reason} | {count} |" for reason, count in reasons.items()]
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


def reconcile_check(
    report: StageReport, catalog: Catalog, upstream: str | None
) -> dg.AssetCheckResult:
    """Rows in = rows out + rows rejected, counted from the Parquet footers on disk (not from the
    counters the run kept), and rows in = the upstream asset's rows out."""
    files_out = sum(
        pq.read_metadata(s.path).num_rows for s in report.shards if Path(s.path).exists()
    )
    files_rejected = sum(
        pq.read_metadata(s.rejects_path).num_rows
        for s in report.shards
        if s.rejects_path and Path(s.rejects_path).exists()
    )
    rows_in = report.rows_in
    problems = []
    if report.asset == TRAINING_BATCHES:
        # Batches turn documents into sequences: documents in must equal the documents upstream.
        if files_out != report.rows_out:
            problems.append(f"sequence files hold {files_out} rows, catalog says {report.rows_out}")
        if files_rejected != report.rows_rejected:
            problems.append(
                f"rejects files hold {files_rejected} rows, catalog says {report.rows_rejected}"
            )
    elif rows_in != files_out + files_rejected:
        problems.append(f"rows in {rows_in} != out {files_out} + rejected {files_rejected}")
    upstream_out = None
    if upstream is not None:
        upstream_out = sum(s.rows_out for s in catalog.current_shards(upstream))
        if upstream_out != rows_in:
            problems.append(f"rows in {rows_in} != {upstream} rows out {upstream_out}")
    return dg.AssetCheckResult(
        check_name=ROWS_REJECTED_CHECK,
        passed=not problems,
        metadata={
            "rows_in": rows_in,
            "rows_out_in_files": files_out,
            "rows_rejected_in_files": files_rejected,
            "upstream_rows_out": upstream_out if upstream_out is not None else -1,
            "problems": "; ".join(problems) or "none",
        },
    )


def compute_metadata() -> dict[str, Any]:
    """Which backend computed the stage, from the run's ``compute`` resource: its name, or for
    backend ``auto`` the backend(s) it chose and, per backend run, the input rows it estimated
    (otherwise only in the log). Empty outside a Dagster asset or without that resource."""
    try:
        context = dg.AssetExecutionContext.get()
    except dg.DagsterInvariantViolationError:
        return {}
    compute = getattr(context.resources, "compute", None)
    if not isinstance(compute, ComputeResource):
        return {}
    choices = compute.take_backend_choices()
    if choices is None:
        return {"compute_backend": compute.backend}
    chosen = list(dict.fromkeys(backend for _, backend in choices))
    return {
        "compute_backend": ", ".join(chosen) if chosen else "auto (no shard computed)",
        "compute_backend_choices": dg.MetadataValue.json(
            [{"estimated_rows": rows, "backend": backend} for rows, backend in choices]
        ),
    }


def materialize_result(
    report: StageReport, catalog: Catalog, upstream: str | None, **extra: Any
) -> dg.MaterializeResult:
    """Metadata for the UI: counts, throughput, reject reasons, a sample, where to query it."""
    with catalog.session():  # one catalog connection for every query below
        return _materialize_result(report, catalog, upstream, **extra)


def _materialize_result(
    report: StageReport, catalog: Catalog, upstream: str | None, **extra: Any
) -> dg.MaterializeResult:
    seconds = max(report.seconds, 1e-9)
    metadata: dict[str, Any] = {
        "dagster/row_count": report.rows_out,
        "rows_in": report.rows_in,
        "rows_out": report.rows_out,
        "rows_rejected": report.rows_rejected,
        "shards": len(report.shards),
        "shards_computed": report.computed,
        "shards_reused": report.skipped,
        "seconds": round(report.seconds, 3),
        "rows_per_second": round(report.rows_in / seconds, 1),
        "reject_reasons": dg.MetadataValue.md(reasons_markdown(report.reject_reasons)),
        "reject_samples": dg.MetadataValue.md(reject_samples_markdown(catalog, report.asset)),
        "sample": dg.MetadataValue.md(sample_markdown(report)),
        "folder": dg.MetadataValue.path(report.folder),
        "fingerprint": report.fingerprint,
        "query": dg.MetadataValue.md(
            f"```sql\n-- duckdb {catalog.path}\nSELECT * FROM {report.asset} LIMIT 10;\n"
            f"SELECT reason, count(*) FROM {report.asset}_rejects GROUP BY reason;\n"
            "-- why was a document dropped?\n"
            "SELECT stage, reason, value FROM rejects WHERE doc_id = '<doc_id>';\n```"
        ),
        **compute_metadata(),
    }
    everything = {**report.extra, **extra}
    if isinstance(everything.get("mixture"), dict):
        metadata["mixture_table"] = dg.MetadataValue.md(
            mixture_markdown(everything["mixture"], everything.get("mixture_planned") or {})
        )
    for key, value in everything.items():
        if key == "length_histogram" and isinstance(value, dict):
            value = _ordered_bins(value)  # a JSON object's keys would show sorted as text
        if isinstance(value, float):
            value = round(value, 6)
        elif isinstance(value, (dict, list)):
            value = dg.MetadataValue.json(value)
        metadata[key] = value
    return dg.MaterializeResult(
        metadata=metadata, check_results=[reconcile_check(report, catalog, upstream)]
    )

"""An asset's materialization as the UI shows it, in the order a person reads it: the summary,
the charts, decoded rows, the reject and sample tables; then where the output is; then the
counts and timings; then the stage's own numbers. Dagster keeps the metadata's insertion order."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import dagster as dg
import numpy as np

from llm_assets import storage
from llm_assets.assets.reporting import charts
from llm_assets.assets.reporting.examples import batch_rows_markdown, batch_tokenizer
from llm_assets.assets.reporting.markdown import (
    mixture_markdown,
    query_markdown,
    reasons_markdown,
    reject_samples_markdown,
    sample_markdown,
)
from llm_assets.assets.reporting.summary import (
    LengthStats,
    Summary,
    filtered_documents_summary,
    normalized_documents_summary,
    raw_documents_summary,
    tokenized_documents_summary,
    training_batches_summary,
)
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import (
    FILTERED_DOCUMENTS,
    NORMALIZED_DOCUMENTS,
    RAW_DOCUMENTS,
    ROWS_REJECTED_CHECK,
    TOKENIZED_DOCUMENTS,
    TRAINING_BATCHES,
)
from llm_assets.kernels.schema import N_TOKENS
from llm_assets.stages.engine import StageReport
from llm_assets.warehouse.catalog import Catalog


def reconcile_check(
    report: StageReport, catalog: Catalog, upstream: str | None
) -> dg.AssetCheckResult:
    """Rows in = rows out + rows rejected, counted from the Parquet footers on disk (not from the
    counters the run kept), and rows in = the upstream asset's rows out."""
    files_out = sum(
        storage.parquet_metadata(s.path).num_rows for s in report.shards if storage.exists(s.path)
    )
    files_rejected = sum(
        storage.parquet_metadata(s.rejects_path).num_rows
        for s in report.shards
        if s.rejects_path and storage.exists(s.rejects_path)
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


def _ordered_bins(histogram: dict[str, int]) -> list[list[Any]]:
    """A length histogram (``"0-7"``, ``"8-15"``, ..., ``">1024"`` -> documents) as ``[bin,
    documents]`` pairs in length order, whatever order the dict came in (the catalog's JSON
    sorts keys as text: "1024-1024" before "128-255")."""
    return [[name, histogram[name]] for name in sorted(histogram, key=charts.bin_order)]


# --- what the summary and the charts read -------------------------------------------------------
def _column(paths: list[str], column: str) -> Iterator[np.ndarray]:
    """One Parquet column of each file that has it, a file at a time."""
    for path in paths:
        if storage.exists(path) and column in storage.parquet_schema(path).names:
            yield storage.read_parquet(path, columns=[column])[column].to_numpy()


class _Lengths:
    """Tokens per document of a set of files: the summary's stats and the chart's bins, in one
    pass over their ``n_tokens`` column."""

    def __init__(self, paths: list[str]) -> None:
        self.stats = LengthStats()

        def each() -> Iterator[np.ndarray]:
            for lengths in _column(paths, N_TOKENS):
                self.stats.add(lengths)
                yield lengths

        self.bins = charts.power_of_two_bins(each())


def _source_files(catalog: Catalog) -> int:
    (files,) = catalog.query(f"SELECT count(DISTINCT source_file) FROM {RAW_DOCUMENTS}")[0]
    return int(files)


def _summary_and_charts(
    report: StageReport, catalog: Catalog, upstream: str | None, backend: str
) -> tuple[Summary, list[str], dict[str, Any]]:
    """The asset's summary, its charts (Markdown images) and its decoded examples."""
    asset, images, examples = report.asset, [], {}
    if asset == RAW_DOCUMENTS:
        summary = raw_documents_summary(report, _source_files(catalog), backend)
    elif asset == NORMALIZED_DOCUMENTS:
        summary = normalized_documents_summary(report, backend)
    elif asset == TOKENIZED_DOCUMENTS:
        lengths = _Lengths([s.path for s in report.shards])
        summary = tokenized_documents_summary(report, lengths.stats, backend)
        png = charts.length_chart(lengths.bins, "Tokens per document")
        images.append(charts.image_markdown(png, "tokens per document"))
    elif asset == FILTERED_DOCUMENTS:
        kept = _Lengths([s.path for s in report.shards])
        given = _Lengths([s.path for s in catalog.current_shards(upstream)] if upstream else [])
        summary = filtered_documents_summary(report, kept.stats, given.stats, backend)
        png = charts.length_chart(
            kept.bins,
            "Tokens per document: kept, and given to the filters",
            before=given.bins,
            before_label="given to the filters",
            label="kept",
        )
        images.append(charts.image_markdown(png, "tokens per document, kept and given"))
    else:
        summary = training_batches_summary(report, backend)
        images += _batch_charts(report)
        tok = batch_tokenizer(
            str(report.extra.get("tokenizer", "")), str(report.extra.get("tokenizer_fingerprint"))
        )
        examples["decoded_rows"] = dg.MetadataValue.md(batch_rows_markdown(report, tok))
    if report.reject_reasons:
        png = charts.reasons_chart(report.reject_reasons, report.rows_in, f"Rejects of {asset}")
        images.append(charts.image_markdown(png, "rows rejected per reason"))
    return summary, images, examples


def _batch_charts(report: StageReport) -> list[str]:
    """The lengths of the documents given to the batches against ``seq_len``, where the
    sequences' positions go, and (layouts that pad each document) how full each one is."""
    extra, images = report.extra, []
    seq_len = int(extra.get("seq_len") or 0)
    truncated = int(extra.get("truncated_tokens", 0))
    histogram = extra.get("length_histogram")
    if isinstance(histogram, dict) and histogram:
        cut = extra.get("layout") != "packed" or truncated > 0
        png = charts.length_chart(
            [(name, n) for name, n in _ordered_bins(histogram)],
            f"Tokens per document given to the batches (seq_len {seq_len:,})",
            over=seq_len,
            over_label=f"longer than seq_len: {'cut' if cut else 'continued in the next sequence'}",
        )
        images.append(charts.image_markdown(png, "tokens per document given to the batches"))
    png = charts.positions_chart(
        tokens=int(extra.get("tokens", 0)),
        padding=int(extra.get("padding_tokens", 0)),
        truncated=truncated,
        dropped=int(extra.get("dropped_tokens", 0)),
    )
    images.append(charts.image_markdown(png, "padding and truncation"))
    fill = list(_column([s.path for s in report.shards], N_TOKENS))
    if fill and seq_len:
        png = charts.fill_chart(np.concatenate(fill), seq_len)
        images.append(charts.image_markdown(png, "real tokens per sequence"))
    return images


def materialize_result(
    report: StageReport, catalog: Catalog, upstream: str | None, **extra: Any
) -> dg.MaterializeResult:
    """Metadata for the UI: a summary, charts, reject reasons, a sample, where to query it, the
    counts; and the reconcile check's result."""
    with catalog.session():  # one catalog connection for every query below
        return _materialize_result(report, catalog, upstream, **extra)


def _materialize_result(
    report: StageReport, catalog: Catalog, upstream: str | None, **extra: Any
) -> dg.MaterializeResult:
    everything = {**report.extra, **extra}
    report = dataclasses.replace(report, extra=everything)
    compute = compute_metadata()
    summary, images, examples = _summary_and_charts(
        report, catalog, upstream, str(compute.get("compute_backend", ""))
    )
    given = {k: v for k, v in everything.items() if isinstance(v, dg.MarkdownMetadataValue)}
    metadata: dict[str, Any] = {"summary": dg.MetadataValue.md(summary.markdown())}
    if images:
        metadata["charts"] = dg.MetadataValue.md("\n\n".join(images))
    metadata.update({**examples, **given})
    metadata["reject_reasons"] = dg.MetadataValue.md(
        reasons_markdown(report.reject_reasons, report.rows_in)
    )
    metadata["reject_samples"] = dg.MetadataValue.md(reject_samples_markdown(catalog, report.asset))
    metadata["sample"] = dg.MetadataValue.md(sample_markdown(report))
    if isinstance(everything.get("mixture"), dict):
        metadata["mixture_table"] = dg.MetadataValue.md(
            mixture_markdown(everything["mixture"], everything.get("mixture_planned") or {})
        )
    seconds = max(report.seconds, 1e-9)
    metadata.update(
        {
            "folder": dg.MetadataValue.path(report.folder),
            "fingerprint": report.fingerprint,
            "query": dg.MetadataValue.md(query_markdown(str(catalog.path), report.asset)),
            "dagster/row_count": report.rows_out,
            "rows_in": report.rows_in,
            "rows_out": report.rows_out,
            "rows_rejected": report.rows_rejected,
            "shards": len(report.shards),
            "shards_computed": report.computed,
            "shards_reused": report.skipped,
            "seconds": round(report.seconds, 3),
            "rows_per_second": round(report.rows_in / seconds, 1),
            **compute,
        }
    )
    for key, value in everything.items():
        if key in given:
            continue
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

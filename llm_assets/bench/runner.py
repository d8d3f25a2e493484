"""Run the study's workload through our assets' own code, and the study's runners, and measure.

Our pipeline is driven exactly as the assets drive it: :mod:`llm_assets.stages` ``run_*`` with a
:class:`StageContext` on a fresh temporary warehouse and catalog, and a real
backend from :func:`~llm_assets.compute.backends.make_backend`. Every measured repetition starts
from an empty warehouse (no shard is reused) and starts its backend itself: worker spawn or the
local Ray start is inside the wall time, and also reported on its own as ``startup_seconds``.
``seconds`` ends when the last stage is recorded; stopping the workers (``shutdown_seconds``) is
reported apart.

The workload is the study's: normalize preset ``ascii_lower``, GPT-2, drop documents under 10
tokens, then pack training batches (our extra stage: the study stopped at JSONL rows).
"""

from __future__ import annotations

import gc
import gzip
import logging
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from llm_assets import storage
from llm_assets.bench.measure import ResourceSampler
from llm_assets.bench.peers import PEER_RUNNERS, run_peer
from llm_assets.bench.reference import REFERENCE_RUNNERS, STUDY_MIN_TOKENS, run_reference
from llm_assets.compute.backends import (
    BACKENDS,
    check_backend_settings,
    cluster_address,
    make_backend,
)
from llm_assets.compute.base import Logger
from llm_assets.compute.testing import ProbeTask, run_probe
from llm_assets.constants import (
    CATALOG_FILE,
    FILTERED_DOCUMENTS,
    NORMALIZED_DOCUMENTS,
    RAW_DOCUMENTS,
    TOKENIZED_DOCUMENTS,
    TRAINING_BATCHES,
)
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.filters.length import LengthFilterSpec
from llm_assets.kernels.ingest.read import IngestSpec
from llm_assets.kernels.normalize import NormalizeSpec
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.stages.engine import SECONDS_BY_PART, StageContext
from llm_assets.stages.filtered_documents.driver import run_filtered_documents
from llm_assets.stages.normalized_documents import run_normalized_documents
from llm_assets.stages.raw_documents import DEFAULT_ROWS_PER_SHARD, run_raw_documents
from llm_assets.stages.tokenized_documents import run_tokenized_documents
from llm_assets.stages.training_batches.driver import run_training_batches
from llm_assets.warehouse.catalog import Catalog

OURS = "ours"
REFERENCE = "reference"
PEER = "peer"
STARTUP = "startup"
CORPUS_NAME = "corpus"
DEFAULT_SEED = 0
CORPUS_BYTES_PER_ROW = 550
"""Upper estimate of one generated JSONL row (514-532 bytes measured at 1K to 1M rows): the
space a corpus needs is checked with it before it is written."""


class DiskSpaceError(OSError):
    """A generated corpus would not fit in the free space of its folder's file system."""


_log = logging.getLogger("llm_assets.bench")


@dataclass(frozen=True)
class Workload:
    """The study's workload as our stage specs."""

    normalize: NormalizeSpec = field(default_factory=lambda: NormalizeSpec(preset="ascii_lower"))
    tokenizer: TokenizerSpec = field(default_factory=TokenizerSpec)
    filter: LengthFilterSpec = field(
        default_factory=lambda: LengthFilterSpec(min_tokens=STUDY_MIN_TOKENS)
    )
    batches: BatchSpec = field(default_factory=BatchSpec)
    rows_per_shard: int = DEFAULT_ROWS_PER_SHARD


@dataclass
class RunResult:
    """One measured run of one runner on one corpus."""

    runner: str
    """``ours``, ``reference`` or ``peer``."""
    backend: str
    """Our backend (in_process, multiprocess, ray), the study's runner (single, ...) or the peer
    (hf_datasets, datatrove)."""
    size: int
    repetition: int
    """1-based; 0 is the warm-up (not counted), or a :class:`Summary`'s medians (no one run)."""
    workers: int
    rows_in: int
    rows_out: int
    tokens: int
    """GPT-2 tokens of the documents kept (``rows_out``: 10 tokens or more), the figure the
    study's runners count; ``tokens_per_second`` divides it by the whole run's seconds."""
    bytes_in: int
    seconds: float
    startup_seconds: float
    shutdown_seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    stage_parts: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per stage, its shard tasks' seconds per part (read, compute, write, commit), summed over
    shards and processes (:data:`llm_assets.stages.engine.SECONDS_BY_PART`)."""
    cpu_seconds: float = 0.0
    peak_total_pss_mb: float = 0.0
    peak_driver_rss_mb: float = 0.0
    peak_processes: int = 0
    memory_kind: str = "pss"

    @property
    def label(self) -> str:
        """``ours/multiprocess``, ``reference/single``..."""
        return f"{self.runner}/{self.backend}"

    @property
    def rows_per_second(self) -> float:
        return self.rows_in / max(self.seconds, 1e-9)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)

    @property
    def mb_per_second(self) -> float:
        return self.bytes_in / 1e6 / max(self.seconds, 1e-9)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict with the derived rates (for JSON reports)."""
        return {
            **asdict(self),
            "rows_per_second": self.rows_per_second,
            "tokens_per_second": self.tokens_per_second,
            "mb_per_second": self.mb_per_second,
        }


# --- data -----------------------------------------------------------------------------------------
def corpus_path(data_dir: str | Path, size: int, suffix: str = ".jsonl") -> Path:
    """Where the generated corpus of ``size`` rows lives (alone in its folder: the ingest input)."""
    return Path(data_dir) / f"rows-{size}" / f"{CORPUS_NAME}{suffix}"


def corpus_bytes(size: int) -> int:
    """The bytes a generated corpus of ``size`` rows is expected to take, at most (the size of
    its JSONL: compressed formats take less)."""
    return size * CORPUS_BYTES_PER_ROW


def check_corpus_space(data_dir: str | Path, sizes: Sequence[int], suffix: str = ".jsonl") -> None:
    """Raise :class:`DiskSpaceError` when the corpora of ``sizes`` not generated yet under
    ``data_dir`` would not fit in the free space of its file system together, naming what they
    need and what is free: a size such as 10**11 rows (~55 TB) fails here, before anything is
    written, instead of filling the disk."""
    missing = sorted({s for s in sizes if not corpus_path(data_dir, s, suffix).exists()})
    needed = sum(corpus_bytes(s) for s in missing)
    if not needed:
        return
    where = Path(data_dir).resolve()
    while not where.exists():  # the nearest folder that exists: the data folder's file system
        where = where.parent
    free = shutil.disk_usage(where).free
    if needed > free:
        corpora = ", ".join(f"{s:,}" for s in missing)
        raise DiskSpaceError(
            f"the generated corpora of {corpora} rows need about {needed / 1e9:,.1f} GB "
            f"(~{CORPUS_BYTES_PER_ROW} bytes a row) but the file system of {data_dir} has "
            f"{free / 1e9:,.1f} GB free: choose smaller sizes or another data folder"
        )


def ensure_corpus(
    data_dir: str | Path, size: int, seed: int = DEFAULT_SEED, suffix: str = ".jsonl"
) -> Path:
    """Generate (once) a WikiText-2-like corpus of ``size`` rows with :mod:`llm_assets.datagen`.

    Refuses (:class:`DiskSpaceError`) a corpus that would not fit in the free disk space before
    writing any of it. It is written to a hidden temporary file renamed into place once
    complete; a failure or an interruption (Ctrl-C, Dagster's run termination: both raise
    ``KeyboardInterrupt``) removes that file, so no hidden ``.tmp<pid>-corpus.jsonl`` is left
    behind to take the disk."""
    from llm_assets.datagen.corpus import generate_records
    from llm_assets.datagen.writers import write_corpus

    path = corpus_path(data_dir, size, suffix)
    if not path.exists():
        check_corpus_space(data_dir, [size], suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        # write_corpus picks the format from the suffix: keep it; a dot prefix hides the temporary
        # from ingest (hidden files are skipped).
        tmp = path.with_name(f".tmp{os.getpid()}-{path.name}")
        try:
            write_corpus(tmp, generate_records(size, seed), seed=seed)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)  # gone after the rename; else what an error left
    return path


def read_lines(path: str | Path) -> list[bytes]:
    """Every non-blank line of a JSONL (or ``.jsonl.gz``) file, as bytes."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as handle:
        return [line for line in handle if line.strip()]


def read_texts(path: str | Path) -> list[str]:
    """The ``text`` of every JSONL record (for the tokenizer-only ceiling)."""
    import orjson

    values = (orjson.loads(line).get("text") for line in read_lines(path))
    return [value for value in values if isinstance(value, str)]


# --- our pipeline ---------------------------------------------------------------------------------
def _startup(backend: Any) -> None:
    """Start the backend's workers and wait until every one has answered a trivial task."""
    n = max(1, backend.parallelism)
    backend.run(run_probe, [ProbeTask(key=f"warm-{i}", value=i) for i in range(n)])


def run_pipeline(
    input_dir: str | Path,
    backend: str,
    *,
    work_dir: str | Path,
    workers: int = 0,
    size: int = 0,
    repetition: int = 1,
    workload: Workload | None = None,
    log: Logger | None = None,
    keep_warehouse: bool = False,
    warehouse_url: str | None = None,
) -> RunResult:
    """Run all five stages on ``input_dir`` with a fresh warehouse under ``work_dir`` (with
    ``warehouse_url``, its shards under that object-storage prefix instead, the catalog still
    under ``work_dir``)."""
    workload = workload or Workload()
    log = log or _log
    root = Path(work_dir) / f"warehouse-{backend}-{size}-{repetition}-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    location = f"{warehouse_url.rstrip('/')}/{root.name}" if warehouse_url else None
    if storage.is_remote(str(input_dir)):
        bytes_in = sum(size for size, _ in storage.list_tree(input_dir).values())
    else:
        bytes_in = sum(p.stat().st_size for p in Path(input_dir).rglob("*") if p.is_file())
    gc.collect()
    stage_seconds: dict[str, float] = {}
    sampler = ResourceSampler().start()
    started = time.perf_counter()
    startup = 0.0
    compute = make_backend(backend, workers=workers, logger=log)
    try:
        _startup(compute)
        startup = time.perf_counter() - started
        ctx = StageContext(
            warehouse_root=location or root,
            catalog=Catalog(root / CATALOG_FILE, remote_root=location),
            compute=compute,
            log=log,
            backend=backend,
        )
        raw = run_raw_documents(
            ctx, input_dir, IngestSpec(), rows_per_shard=workload.rows_per_shard
        )
        stage_seconds[RAW_DOCUMENTS] = raw.seconds
        normalized = run_normalized_documents(ctx, workload.normalize)
        stage_seconds[NORMALIZED_DOCUMENTS] = normalized.seconds
        tokenized = run_tokenized_documents(ctx, workload.tokenizer)
        stage_seconds[TOKENIZED_DOCUMENTS] = tokenized.seconds
        filtered = run_filtered_documents(ctx, workload.filter)
        stage_seconds[FILTERED_DOCUMENTS] = filtered.seconds
        batches = run_training_batches(ctx, workload.batches)
        stage_seconds[TRAINING_BATCHES] = batches.seconds
        stage_seconds[f"{TRAINING_BATCHES}.scatter"] = float(batches.extra["scatter_seconds"])
        stage_parts = {
            report.asset: dict(report.extra[SECONDS_BY_PART])
            for report in (raw, normalized, tokenized, filtered, batches)
        }
        seconds = time.perf_counter() - started
        # After the clock: the tokens of the kept documents, as the study's runners count them
        # (tokenized.extra["tokens"] also holds those of documents the filter dropped).
        tokens = int(
            ctx.catalog.query(f"SELECT coalesce(sum(n_tokens), 0) FROM {FILTERED_DOCUMENTS}")[0][0]
        )
    finally:
        closing = time.perf_counter()
        compute.close()
        shutdown = time.perf_counter() - closing
        measured = sampler.stop()
        # A backend that starts in the background (local Ray) answers the probe from the driver
        # at once: its start-up is the time until its workers were ready, which can be longer
        # than the whole run when the driver did all the work first.
        startup = max(startup, compute.ready_seconds or 0.0)
        if not keep_warehouse:
            shutil.rmtree(root, ignore_errors=True)
            if location is not None:
                storage.remove_tree(location)
    stage_seconds[STARTUP] = startup
    return RunResult(
        runner=OURS,
        backend=backend,
        size=size or raw.rows_in,
        repetition=repetition,
        workers=compute.parallelism if backend != "ray" else (workers or os.cpu_count() or 1),
        rows_in=raw.rows_in,
        rows_out=filtered.rows_out,
        tokens=tokens,
        bytes_in=bytes_in,
        seconds=seconds,
        startup_seconds=startup,
        shutdown_seconds=shutdown,
        stage_seconds=stage_seconds,
        stage_parts=stage_parts,
        cpu_seconds=measured.cpu_seconds,
        peak_total_pss_mb=measured.peak_total_pss_mb,
        peak_driver_rss_mb=measured.peak_driver_rss_mb,
        peak_processes=measured.peak_processes,
        memory_kind=measured.memory_kind,
    )


# --- the study's runners and the peers ------------------------------------------------------------
def _sampled(
    kind: str,
    runner: str,
    run: Callable[[], Any],
    cleanup: Callable[[], None],
    input_file: str | Path,
    size: int,
    repetition: int,
) -> RunResult:
    """``run()`` (a reference runner or a peer) under the same sampler as ours, then
    ``cleanup()`` (its output removed), as a :class:`RunResult` of ``kind``."""
    gc.collect()
    sampler = ResourceSampler().start()
    try:
        result = run()
    finally:
        measured = sampler.stop()
        cleanup()
    return RunResult(
        runner=kind,
        backend=runner,
        size=size or result.rows_in,
        repetition=repetition,
        workers=result.workers,
        rows_in=result.rows_in,
        rows_out=result.rows_out,
        tokens=result.tokens,
        bytes_in=Path(input_file).stat().st_size,
        seconds=result.seconds,
        startup_seconds=result.startup_seconds,
        cpu_seconds=measured.cpu_seconds,
        peak_total_pss_mb=measured.peak_total_pss_mb,
        peak_driver_rss_mb=measured.peak_driver_rss_mb,
        peak_processes=measured.peak_processes,
        memory_kind=measured.memory_kind,
    )


def run_reference_measured(
    input_file: str | Path,
    runner: str,
    *,
    work_dir: str | Path,
    workers: int = 0,
    size: int = 0,
    repetition: int = 1,
) -> RunResult:
    """Run one of the study's runners on ``input_file`` under the same sampler as ours."""
    out = Path(work_dir) / f"reference-{runner}-{size}-{repetition}-{os.getpid()}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    return _sampled(
        REFERENCE,
        runner,
        lambda: run_reference(runner, input_file, out, workers=workers),
        lambda: out.unlink(missing_ok=True),
        input_file,
        size,
        repetition,
    )


def run_peer_measured(
    input_file: str | Path,
    runner: str,
    *,
    work_dir: str | Path,
    workers: int = 0,
    size: int = 0,
    repetition: int = 1,
) -> RunResult:
    """Run one of :data:`~llm_assets.bench.peers.PEER_RUNNERS` on ``input_file`` under the same
    sampler as ours; its output folder is removed afterwards."""
    out = Path(work_dir) / f"peer-{runner}-{size}-{repetition}-{os.getpid()}"
    return _sampled(
        PEER,
        runner,
        lambda: run_peer(runner, input_file, out, workers=workers),
        lambda: shutil.rmtree(out, ignore_errors=True),
        input_file,
        size,
        repetition,
    )


# --- a whole benchmark ----------------------------------------------------------------------------
@dataclass(frozen=True)
class BenchmarkPlan:
    """What to run: sizes x (our backends + the study's runners + peers) x repetitions.

    Sizes, backends and study runners named twice are measured once (the first mention keeps
    its place), as the benchmark asset and ``compare_study.py`` treat sizes: a repeated backend
    would otherwise run twice, filing two rows as repetition 1. Settings no run can
    use are refused when the plan is made, before any corpus is generated: among them
    ``workers`` beyond the compute backends' limit
    (:func:`~llm_assets.compute.backends.check_backend_settings`), which the study's runners
    start as many processes for as ours do."""

    sizes: tuple[int, ...] = (1_000, 32_000, 200_000)
    backends: tuple[str, ...] = BACKENDS
    reference_runners: tuple[str, ...] = ()
    peer_runners: tuple[str, ...] = ()
    """Peers (:data:`~llm_assets.bench.peers.PEER_RUNNERS`) to run; their packages must be
    installed (:func:`~llm_assets.bench.peers.installed_peers` leaves out the others)."""
    repetitions: int = 3
    workers: int = 0
    warmup: bool = True
    reference_max_rows: dict[str, int] = field(default_factory=lambda: {"ray": 32_000})
    """Skip a study runner above this many rows (one Ray call per row: ~10 min per 200K run)."""
    seed: int = DEFAULT_SEED
    workload: Workload = field(default_factory=Workload)

    def __post_init__(self) -> None:
        for name in ("sizes", "backends", "reference_runners", "peer_runners"):
            object.__setattr__(self, name, tuple(dict.fromkeys(getattr(self, name))))
        if self.repetitions < 1:
            raise ValueError(f"repetitions must be >= 1, got {self.repetitions}")
        # The backends' own check of workers (max_attempts and the timeout are theirs, not the
        # plan's: the benchmark builds backends with valid defaults). Ray on an existing cluster
        # does not use workers, so only a plan of nothing else is free of the limit.
        on_cluster = (
            bool(self.backends)
            and not self.reference_runners
            and not self.peer_runners
            and all(cluster_address(b, None) for b in self.backends)
        )
        check_backend_settings(
            self.workers, max_attempts=1, task_timeout_s=None, on_cluster=on_cluster
        )
        if not self.sizes or any(s < 1 for s in self.sizes):
            raise ValueError(f"sizes must be positive row counts, got {self.sizes}")
        for backend in self.backends:
            if backend not in BACKENDS:
                raise ValueError(f"unknown backend {backend!r}; choose from {BACKENDS}")
        for runner in self.reference_runners:
            if runner not in REFERENCE_RUNNERS:
                raise ValueError(f"unknown study runner {runner!r}; choose {REFERENCE_RUNNERS}")
        for runner in self.peer_runners:
            if runner not in PEER_RUNNERS:
                raise ValueError(f"unknown peer {runner!r}; choose from {PEER_RUNNERS}")
        if not self.runs():
            raise ValueError(
                "nothing to measure: no backends, and no study runner at these sizes "
                f"(backends {list(self.backends)}, study runners {list(self.reference_runners)}, "
                f"sizes {list(self.sizes)})"
            )

    def runs(self) -> list[tuple[int, str, str]]:
        """(size, runner kind, backend) in the order they run."""
        todo = []
        for size in self.sizes:
            todo += [(size, OURS, b) for b in self.backends]
            todo += [
                (size, REFERENCE, r)
                for r in self.reference_runners
                if size <= self.reference_max_rows.get(r, size)
            ]
            todo += [(size, PEER, p) for p in self.peer_runners]
        return todo


def run_benchmark(
    plan: BenchmarkPlan,
    *,
    data_dir: str | Path,
    work_dir: str | Path,
    log: Logger | None = None,
    on_result: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Run the plan; return every measured repetition (warm-ups excluded).

    A warm-up run of each (runner, backend) pair goes first, on the smallest size: it pays the
    one-off costs of a fresh driver (imports, file cache) that no repetition should carry.
    ``on_result`` gets each measured repetition as soon as it is measured: a caller that records
    it there keeps what was measured when a later run fails (the failure still propagates).
    Corpora that would not fit on disk together are refused (:class:`DiskSpaceError`) before
    any is generated.
    """
    log = log or _log
    check_corpus_space(data_dir, plan.sizes)  # every corpus this plan writes, before the first
    workers = plan.workers or (os.cpu_count() or 1)
    results: list[RunResult] = []
    warmed: set[tuple[str, str]] = set()
    smallest = min(plan.sizes)

    def one(size: int, kind: str, backend: str, repetition: int) -> RunResult:
        corpus = ensure_corpus(data_dir, size, plan.seed)
        if kind == OURS:
            return run_isolated(
                run_pipeline, corpus.parent, backend, work_dir=work_dir, workers=workers,
                size=size, repetition=repetition, workload=plan.workload,
            )  # fmt: skip
        measured = run_peer_measured if kind == PEER else run_reference_measured
        return run_isolated(
            measured, corpus, backend, work_dir=work_dir, workers=workers,
            size=size, repetition=repetition,
        )  # fmt: skip

    for size, kind, backend in plan.runs():
        if plan.warmup and (kind, backend) not in warmed:
            log.info(f"benchmark: warm-up {kind}/{backend} on {smallest} rows")
            one(smallest, kind, backend, 0)
            warmed.add((kind, backend))
        for repetition in range(1, plan.repetitions + 1):
            result = one(size, kind, backend, repetition)
            log.info(
                f"benchmark: {result.label} {size} rows, rep {repetition}: "
                f"{result.seconds:.2f} s ({result.startup_seconds:.2f} s start-up), "
                f"{result.rows_per_second:,.0f} rows/s, {result.peak_total_pss_mb:.0f} MB PSS, "
                f"{result.rows_out:,} rows kept"
            )
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def run_isolated(fn: Callable[..., RunResult], *args: Any, **kwargs: Any) -> RunResult:
    """``fn(*args, **kwargs)`` in a fresh Python process, its result handed back.

    Each measured run gets a driver of its own, so its memory is its own: a long-lived benchmark
    process holds the corpus texts of the ceiling, the study's runners' leftovers and every
    earlier run's heap, which the sampler would otherwise count as the run's driver memory. The
    child imports this module (the pipeline's code) before the clock starts, like any driver."""
    with tempfile.TemporaryDirectory(prefix="llm-assets-bench-") as tmp:
        call, answer = Path(tmp) / "call.pkl", Path(tmp) / "result.pkl"
        call.write_bytes(pickle.dumps((fn, args, kwargs)))
        code = f"from {__name__} import _run_child; _run_child({str(call)!r}, {str(answer)!r})"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode != 0 or not answer.exists():
            raise RuntimeError(
                f"benchmark run {getattr(fn, '__name__', fn)} failed in its process "
                f"(exit {done.returncode}):\n{done.stderr[-4000:]}"
            )
        return pickle.loads(answer.read_bytes())


def _run_child(call: str, answer: str) -> None:
    """Child side of :func:`run_isolated`."""
    logging.basicConfig(level=logging.WARNING)
    fn, args, kwargs = pickle.loads(Path(call).read_bytes())
    Path(answer).write_bytes(pickle.dumps(fn(*args, **kwargs)))


# --- summaries ------------------------------------------------------------------------------------
@dataclass
class Summary:
    """The repetitions of one (size, runner, backend): their medians, and every one's seconds."""

    size: int
    runner: str
    backend: str
    repetitions: int
    median: RunResult
    """Per figure, the median over the repetitions (:func:`median_result`)."""
    seconds_all: list[float]

    @property
    def label(self) -> str:
        return self.median.label


def _median_dict(dicts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per key (in first-seen order), the median of the values; nested dicts key by key."""
    keys = list(dict.fromkeys(key for d in dicts for key in d))
    out: dict[str, Any] = {}
    for key in keys:
        values = [d[key] for d in dicts if key in d]
        if isinstance(values[0], dict):
            out[key] = _median_dict(values)
        else:
            out[key] = statistics.median(values)
    return out


def median_result(runs: Sequence[RunResult]) -> RunResult:
    """Per figure, the median over ``runs``: :func:`statistics.median` (the mean of the middle
    two for an even count), the definition DuckDB's ``median()`` shares, so the report's
    recommendation and backend ``auto`` (SQL over ``benchmark_results``) rank backends alike.
    Whole counts (rows, tokens, processes) take the lower middle value; ``memory_kind`` is
    ``rss`` when any repetition's memory was RSS. Derived rates divide by the median seconds."""
    values: dict[str, Any] = {}
    for f in fields(RunResult):
        column = [getattr(r, f.name) for r in runs]
        if f.name == "memory_kind":
            values[f.name] = "rss" if "rss" in column else column[0]
        elif f.type in ("float", float):
            values[f.name] = statistics.median(column)
        elif f.type in ("int", int):
            values[f.name] = statistics.median_low(column)
        elif isinstance(column[0], dict):
            values[f.name] = _median_dict(column)
        else:
            values[f.name] = column[0]
    values["repetition"] = 0
    return RunResult(**values)


def summarize(results: Sequence[RunResult]) -> list[Summary]:
    """Group the measured repetitions (warm-ups left out) into one :class:`Summary` each."""
    groups: dict[tuple[int, str, str], list[RunResult]] = {}
    for result in results:
        if result.repetition > 0:
            groups.setdefault((result.size, result.runner, result.backend), []).append(result)
    return [
        Summary(size, runner, backend, len(runs), median_result(runs), [r.seconds for r in runs])
        for (size, runner, backend), runs in groups.items()
    ]

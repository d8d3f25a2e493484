"""The published study's pipeline, re-implemented from its description, with its three runners.

Per row the study: parsed the JSON line; normalized the text (lowercase, drop everything but
``[a-zA-Z0-9\\s]``, collapse whitespace); called ``tokenizer.tokenize()`` and then
``tokenizer.encode()`` on the normalized text with the GPT-2 fast tokenizer; built a dict (the
first 100 characters of the original, the first 200 of the normalized text, the first 50 tokens
and ids, the token count, the character count) and wrote it as one JSONL line. Rows under
``min_tokens`` tokens (10 in the study's workload) are dropped, not written.

Runners, as published:

``single``
    One process, one loop over the lines.
``multiprocessing``
    ``Pool.imap`` over batches of ``max(100, rows // (workers * 10))`` lines, one tokenizer per
    worker (built by the pool initializer). Workers are spawned, so they import this module from
    the installed package. Its start-up time ends when every worker has its tokenizer, as the
    Ray runner's ends when every actor has answered.
``ray``
    A local Ray started by the run (included in its time), one tokenizer actor per worker and one
    remote call per row: the per-row traffic that made it ten times slower.

This module deliberately keeps the study's per-row Python design: it is the baseline our
pipeline is measured against, not code to reuse.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REFERENCE_RUNNERS: tuple[str, ...] = ("single", "multiprocessing", "ray")
STUDY_MIN_TOKENS = 10
READY_TIMEOUT_S = 600.0
"""How long the multiprocessing runner waits for its workers' tokenizers before giving up."""
ORIGINAL_CHARS = 100
NORMALIZED_CHARS = 200
TOKENS_KEPT = 50


@dataclass(frozen=True)
class StudyRow:
    """One row of the study's published table (8-core laptop, WikiText-2 rows of ~440 chars)."""

    rows: int
    runner: str
    seconds: float
    rows_per_second: float
    peak_driver_mb: float
    detail: str


STUDY_RESULTS: tuple[StudyRow, ...] = (
    StudyRow(32_432, "single", 8.66, 3_747, 310, "single process"),
    StudyRow(32_432, "multiprocessing", 10.10, 3_210, 199, "multiprocessing, 8 workers"),
    StudyRow(32_432, "ray", 87.24, 372, 182, "Ray, 4 actors"),
    StudyRow(1_000, "single", 0.60, 1_658, 308, "single process"),
    StudyRow(1_000, "multiprocessing", 5.19, 193, 203, "multiprocessing"),
    StudyRow(1_000, "ray", 13.93, 72, 111, "Ray"),
)
"""The figures the study published (peak memory of the driver process only)."""


@dataclass
class ReferenceResult:
    """What one reference run did and how long it took."""

    runner: str
    workers: int
    rows_in: int
    rows_out: int
    tokens: int
    seconds: float
    startup_seconds: float
    output_path: str

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for JSON reports)."""
        return asdict(self)


# --- the per-row work -----------------------------------------------------------------------------
def normalize(text: str) -> str:
    """The study's normalization: lowercase, keep ``[a-zA-Z0-9\\s]``, collapse whitespace."""
    text = text.lower()
    text = re.sub(r"[^a-zA-Z0-9\s]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def load_tokenizer() -> Any:
    """The GPT-2 fast tokenizer, built offline (the study loaded ``gpt2`` from the hub)."""
    from llm_assets.kernels.tokenize.gpt2 import gpt2_hf_tokenizer

    return gpt2_hf_tokenizer()


def process_line(line: str, tokenizer: Any, min_tokens: int = STUDY_MIN_TOKENS) -> str | None:
    """One input line to one output JSONL line, or None when the row is dropped."""
    processed = _process(line, tokenizer, min_tokens)
    return None if processed is None else processed[0]


_Processed = tuple[str, int] | None
"""An output line and its token count, or None for a dropped row."""


def _process(line: str, tokenizer: Any, min_tokens: int) -> _Processed:
    record = json.loads(line)
    original = record.get("text", "")
    if not isinstance(original, str):
        return None
    normalized = normalize(original)
    tokens = tokenizer.tokenize(normalized)
    token_ids = tokenizer.encode(normalized)
    if len(token_ids) < min_tokens:
        return None
    row = {
        "original_text": original[:ORIGINAL_CHARS],
        "normalized_text": normalized[:NORMALIZED_CHARS],
        "tokens": tokens[:TOKENS_KEPT],
        "token_ids": token_ids[:TOKENS_KEPT],
        "num_tokens": len(token_ids),
        "num_chars": len(normalized),
    }
    return json.dumps(row), len(token_ids)


def read_lines(path: str | Path) -> list[str]:
    """Every non-blank line of a JSONL file (the study read the file into a list first)."""
    with open(path, encoding="utf-8") as handle:
        return [line for line in handle if line.strip()]


def _write(output_path: str | Path, rows: Iterable[_Processed]) -> tuple[int, int]:
    """Write the kept rows; return (rows written, tokens in them)."""
    written = tokens = 0
    with open(output_path, "w", encoding="utf-8") as out:
        for row in rows:
            if row is None:
                continue
            out.write(row[0] + "\n")
            written += 1
            tokens += row[1]
    return written, tokens


# --- runners --------------------------------------------------------------------------------------
def run_single(
    input_path: str | Path, output_path: str | Path, min_tokens: int = STUDY_MIN_TOKENS
) -> ReferenceResult:
    """The study's single-process runner."""
    started = time.perf_counter()
    tokenizer = load_tokenizer()
    startup = time.perf_counter() - started
    lines = read_lines(input_path)
    written, tokens = _write(output_path, (_process(x, tokenizer, min_tokens) for x in lines))
    return ReferenceResult(
        "single", 1, len(lines), written, tokens, time.perf_counter() - started, startup,
        str(output_path),
    )  # fmt: skip


_WORKER_TOKENIZER: Any = None
_WORKER_MIN_TOKENS = STUDY_MIN_TOKENS


def _init_worker(min_tokens: int, ready: Any = None) -> None:
    """Pool initializer: one tokenizer per worker process; then ``ready`` (a semaphore the
    driver counts workers with) is released once, if given."""
    global _WORKER_TOKENIZER, _WORKER_MIN_TOKENS
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _WORKER_TOKENIZER = load_tokenizer()
    _WORKER_MIN_TOKENS = min_tokens
    if ready is not None:
        ready.release()


def _process_batch(lines: list[str]) -> list[_Processed]:
    """One ``imap`` item: a batch of lines through the worker's tokenizer."""
    return [_process(x, _WORKER_TOKENIZER, _WORKER_MIN_TOKENS) for x in lines]


def study_batch_size(rows: int, workers: int) -> int:
    """The study's ``imap`` batch size."""
    return max(100, rows // (workers * 10))


def _batches(lines: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(lines), size):
        yield lines[start : start + size]


def run_multiprocessing(
    input_path: str | Path,
    output_path: str | Path,
    workers: int = 0,
    min_tokens: int = STUDY_MIN_TOKENS,
) -> ReferenceResult:
    """The study's ``Pool.imap`` runner (spawned workers, one tokenizer each).

    ``startup_seconds`` ends when every worker has built its tokenizer: ``Pool()`` returns as
    soon as the processes are spawned, before their initializers run, so timing it alone gave
    ~0.02 s for a start-up of a second or more. Each initializer releases a semaphore once; the
    driver takes it ``workers`` times. (A no-op ``map`` could be answered by the first ready
    worker alone.) The rest is the study's runner unchanged."""
    import multiprocessing

    workers = workers or (os.cpu_count() or 1)
    started = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Semaphore(0)
    with ctx.Pool(workers, initializer=_init_worker, initargs=(min_tokens, ready)) as pool:
        for _ in range(workers):
            if not ready.acquire(timeout=READY_TIMEOUT_S):
                raise RuntimeError(
                    f"the study's multiprocessing runner: its {workers} workers did not all load "
                    f"their tokenizer within {READY_TIMEOUT_S:.0f} s"
                )
        startup = time.perf_counter() - started
        lines = read_lines(input_path)
        size = study_batch_size(len(lines), workers)
        results = pool.imap(_process_batch, _batches(lines, size))
        written, tokens = _write(output_path, (row for batch in results for row in batch))
        # Let the workers exit on their own: leaving the block terminates them with SIGTERM,
        # which a process started with SIGTERM ignored (inherited) never answers.
        pool.close()
        pool.join()
    return ReferenceResult(
        "multiprocessing", workers, len(lines), written, tokens, time.perf_counter() - started,
        startup, str(output_path),
    )  # fmt: skip


class TokenizerActor:
    """The study's Ray actor: holds one tokenizer, processes one row per call."""

    def __init__(self, min_tokens: int = STUDY_MIN_TOKENS) -> None:
        self.tokenizer = load_tokenizer()
        self.min_tokens = min_tokens

    def ready(self) -> bool:
        """A no-op call: returns once the actor (and its tokenizer) exists."""
        return True

    def process(self, line: str) -> _Processed:
        """One row."""
        return _process(line, self.tokenizer, self.min_tokens)


def run_ray(
    input_path: str | Path,
    output_path: str | Path,
    workers: int = 0,
    min_tokens: int = STUDY_MIN_TOKENS,
) -> ReferenceResult:
    """The study's Ray runner: a local Ray started here, one actor per worker, one call per row."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    workers = workers or (os.cpu_count() or 1)
    started = time.perf_counter()
    if ray.is_initialized():
        raise RuntimeError("run_ray starts its own local Ray; shut down the existing one first")
    ray.init(
        num_cpus=workers,
        include_dashboard=False,
        logging_level="WARNING",
        runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}},
    )
    try:
        actor_class = ray.remote(num_cpus=1)(TokenizerActor)
        actors = [actor_class.remote(min_tokens) for _ in range(workers)]
        ray.get([a.ready.remote() for a in actors])
        startup = time.perf_counter() - started
        lines = read_lines(input_path)
        refs = [actors[i % workers].process.remote(line) for i, line in enumerate(lines)]
        written, tokens = _write(output_path, ray.get(refs))
    finally:
        ray.shutdown()
    return ReferenceResult(
        "ray", workers, len(lines), written, tokens, time.perf_counter() - started, startup,
        str(output_path),
    )  # fmt: skip


def run_reference(
    runner: str,
    input_path: str | Path,
    output_path: str | Path,
    workers: int = 0,
    min_tokens: int = STUDY_MIN_TOKENS,
) -> ReferenceResult:
    """Run one of :data:`REFERENCE_RUNNERS` by name."""
    if runner == "single":
        return run_single(input_path, output_path, min_tokens)
    if runner == "multiprocessing":
        return run_multiprocessing(input_path, output_path, workers, min_tokens)
    if runner == "ray":
        return run_ray(input_path, output_path, workers, min_tokens)
    raise ValueError(f"unknown reference runner {runner!r}; choose one of {REFERENCE_RUNNERS}")

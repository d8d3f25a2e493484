"""The benchmark plan and its corpora: what is refused before any work, and what is run once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llm_assets.bench.runner import (
    OURS,
    REFERENCE,
    BenchmarkPlan,
    corpus_path,
    ensure_corpus,
    run_benchmark,
)
from llm_assets.compute.backends import WORKERS_PER_CORE_LIMIT

TOO_MANY_WORKERS = WORKERS_PER_CORE_LIMIT * (os.cpu_count() or 1) + 1
TOO_LARGE = 10**11
"""Rows whose corpus (~55 TB) no test machine has room for."""


def _files(folder: Path) -> list[Path]:
    """Every file under ``folder``, hidden ones included."""
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_a_backend_or_size_named_twice_runs_once(tmp_path):
    """A backend or a size named twice is measured once: the plan de-duplicates them, not only
    the asset and the CLI."""
    plan = BenchmarkPlan(
        sizes=(200, 200),
        backends=("in_process", "in_process"),
        reference_runners=("single", "single"),
        repetitions=1,
        warmup=False,
    )
    assert (plan.sizes, plan.backends, plan.reference_runners) == (
        (200,),
        ("in_process",),
        ("single",),
    )
    assert plan.runs() == [(200, OURS, "in_process"), (200, REFERENCE, "single")]
    ours_only = BenchmarkPlan(
        sizes=(200,), backends=("in_process", "in_process"), repetitions=1, warmup=False
    )
    results = run_benchmark(ours_only, data_dir=tmp_path / "data", work_dir=tmp_path / "work")
    assert [(r.backend, r.repetition) for r in results] == [("in_process", 1)]


@pytest.mark.parametrize(
    ("backends", "reference_runners"),
    [(("in_process",), ()), ((), ("single", "multiprocessing"))],
    ids=["ours", "study-only"],
)
def test_workers_beyond_the_limit_are_refused_when_the_plan_is_made(backends, reference_runners):
    """The plan refuses more workers than the machine has, for our backends and the study's
    runners alike, before any corpus is generated."""
    with pytest.raises(ValueError, match=f"workers {TOO_MANY_WORKERS} is more than"):
        BenchmarkPlan(
            sizes=(200,),
            backends=backends,
            reference_runners=reference_runners,
            workers=TOO_MANY_WORKERS,
        )
    with pytest.raises(ValueError, match="workers must be >= 0"):
        BenchmarkPlan(backends=backends, reference_runners=reference_runners, workers=-1)
    assert BenchmarkPlan(backends=backends, reference_runners=reference_runners, workers=2)


def test_corpora_too_large_for_the_disk_are_refused_before_any_is_written(tmp_path):
    """A size the disk cannot hold ([10**11]: a ~55 TB corpus) is refused with what it
    needs and what is free, and a plan's run refuses before it generates even its small corpora."""
    from llm_assets.bench.runner import DiskSpaceError

    data = tmp_path / "data"
    with pytest.raises(DiskSpaceError, match=r"100,000,000,000 rows need about 55,000\.0 GB"):
        ensure_corpus(data, TOO_LARGE)
    assert _files(data) == []
    plan = BenchmarkPlan(sizes=(200, TOO_LARGE), backends=("in_process",), warmup=False)
    with pytest.raises(DiskSpaceError, match="GB free"):
        run_benchmark(plan, data_dir=data, work_dir=tmp_path / "work")
    assert _files(data) == []  # not even the 200-row corpus
    assert ensure_corpus(data, 200) == corpus_path(data, 200)  # what fits is written


def test_an_interrupted_corpus_generation_leaves_no_temporary_file(tmp_path):
    """Ctrl-C (or a run's termination) during ensure_corpus removes its hidden
    ``.tmp<pid>-corpus.jsonl``, which would be as large as what was written."""
    size = 3_000_000  # ~1.5 GB if it ran to the end: it is interrupted within a second or two
    code = (
        "from llm_assets.bench.runner import ensure_corpus; "
        f"ensure_corpus({str(tmp_path)!r}, {size})"
    )
    # SIGINT as a terminal gives it: a shell's background job (nohup ... &) starts with it
    # ignored, and Python then never raises KeyboardInterrupt.
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    folder = corpus_path(tmp_path, size).parent
    try:
        deadline = time.monotonic() + 120
        while not any(p.name.startswith(".tmp") for p in _files(folder)):
            assert child.poll() is None, "the generation ended before it was interrupted"
            assert time.monotonic() < deadline, "no temporary file appeared"
            time.sleep(0.05)
        time.sleep(0.5)  # some rows written
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode != 0 and b"KeyboardInterrupt" in stderr
    assert _files(folder) == []

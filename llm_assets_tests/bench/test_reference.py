"""The study's pipeline re-implemented: its output format, the same output from every runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_assets.bench import reference

TEXT = (
    " = Valkyria Chronicles III = \n Senjō no Valkyria 3 : Unrecorded Chronicles ( Japanese : "
    "戦場のヴァルキュリア3 , lit . Valkyria of the Battlefield 3 ) , commonly referred to as "
    "Valkyria Chronicles III outside Japan , is a tactical role @-@ playing video game. "
)


@pytest.fixture
def tiny_input(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    rows = [{"text": TEXT * (1 + i % 3), "id": i} for i in range(40)]
    rows[3] = {"text": "too short"}
    rows[7] = {"text": ""}
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def test_single_writes_the_study_format(tiny_input, tmp_path):
    out = tmp_path / "single.jsonl"
    result = reference.run_single(tiny_input, out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert result.rows_in == 40
    assert result.rows_out == len(rows) == 38  # under 10 tokens: dropped, as in the study
    assert result.tokens == sum(r["num_tokens"] for r in rows)
    first = rows[2]  # the input row with TEXT * 3: more than 50 tokens
    assert set(first) == {
        "original_text",
        "normalized_text",
        "tokens",
        "token_ids",
        "num_tokens",
        "num_chars",
    }
    normalized = reference.normalize(TEXT * 3)
    assert first["original_text"] == (TEXT * 3)[:100]
    assert first["normalized_text"] == normalized[:200]
    assert normalized.startswith("valkyria chronicles iii senj no valkyria 3 unrecorded")
    assert len(first["tokens"]) == len(first["token_ids"]) == 50
    assert first["num_chars"] == len(normalized)
    tok = reference.load_tokenizer()
    assert first["token_ids"] == tok.encode(normalized)[:50]
    assert first["num_tokens"] == len(tok.encode(normalized))


def test_multiprocessing_output_equals_single(tiny_input, tmp_path):
    single = reference.run_single(tiny_input, tmp_path / "single.jsonl")
    multi = reference.run_multiprocessing(tiny_input, tmp_path / "multi.jsonl", workers=2)
    assert multi.workers == 2
    assert (tmp_path / "multi.jsonl").read_bytes() == (tmp_path / "single.jsonl").read_bytes()
    assert (multi.rows_in, multi.rows_out, multi.tokens) == (
        single.rows_in,
        single.rows_out,
        single.tokens,
    )


def test_multiprocessing_start_up_waits_for_every_workers_tokenizer(tiny_input, tmp_path):
    """The start-up time includes the initializers loading the tokenizer, not only ``Pool()``
    returning (~0.02 s for a second or more). It must be at least what
    one spawned process takes to load the tokenizer (half of it here: two workers on busy cores
    only take longer)."""
    import multiprocessing
    import time

    ctx = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    one = ctx.Process(target=reference._init_worker, args=(reference.STUDY_MIN_TOKENS,))
    one.start()
    one.join()
    alone = time.perf_counter() - started
    assert one.exitcode == 0
    result = reference.run_multiprocessing(tiny_input, tmp_path / "multi.jsonl", workers=2)
    assert result.startup_seconds >= 0.5 * alone, (result.startup_seconds, alone)
    assert result.startup_seconds <= result.seconds


def test_study_batch_size():
    assert reference.study_batch_size(1_000, 8) == 100
    assert reference.study_batch_size(32_432, 8) == 405


@pytest.mark.slow
def test_ray_output_equals_single(tiny_input, tmp_path):
    reference.run_single(tiny_input, tmp_path / "single.jsonl")
    result = reference.run_ray(tiny_input, tmp_path / "ray.jsonl", workers=2)
    assert result.startup_seconds > 0
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "single.jsonl").read_bytes()


def test_unknown_runner_is_an_error(tiny_input, tmp_path):
    with pytest.raises(ValueError, match="unknown reference runner"):
        reference.run_reference("dask", tiny_input, tmp_path / "x.jsonl")


def test_process_pools_finish_when_sigterm_is_ignored(tiny_input, tmp_path):
    """A driver started with SIGTERM ignored (its spawned workers inherit that) must not hang
    when the study's pool and the ceiling's pool end: they let their workers exit, they do not
    terminate them."""
    import subprocess
    import sys

    code = f"""
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
from llm_assets.bench import reference
from llm_assets.bench.ceiling import tokenizer_ceiling
if __name__ == "__main__":
    result = reference.run_multiprocessing({str(tiny_input)!r}, {str(tmp_path / "m.jsonl")!r}, 2)
    assert result.rows_in > 0
    assert tokenizer_ceiling(["a few words here"] * 50, workers=2, repetitions=1).rows == 50
"""
    script = tmp_path / "ignored_sigterm.py"
    script.write_text(code)
    subprocess.run([sys.executable, str(script)], check=True, timeout=240)

"""The tokenizer-only ceiling measures every way of encoding and keeps the fastest; the kernels
bound runs the study's whole job in memory."""

from __future__ import annotations

from llm_assets.bench.ceiling import kernels_bound, tokenizer_ceiling
from llm_assets.bench.reference import STUDY_MIN_TOKENS, run_reference
from llm_assets.bench.runner import ensure_corpus, read_lines
from llm_assets.kernels.normalize import NormalizeSpec, normalize_text
from llm_assets.kernels.tokenize.spec import TokenizerSpec


def test_ceiling_times_both_ways_on_real_processes_and_keeps_the_fastest():
    texts = [f"Line {i}: the quick brown fox, {i * 7} times!" for i in range(400)] + ["", "!!"]
    ceiling = tokenizer_ceiling(texts, workers=2, repetitions=1)
    ways = [
        ceiling.single_thread_seconds,
        ceiling.threads_seconds,
        ceiling.processes_seconds,
        ceiling.by_words_seconds,
        ceiling.by_words_processes_seconds,
    ]
    assert all(0 < t < 60 for t in ways)
    assert ceiling.seconds == min(ways)
    assert ceiling.row_by_row_seconds == min(ways[:3])
    assert ceiling.rows == len(texts)
    # Tokens of the normalized texts (empty after normalization: none).
    spec = NormalizeSpec(preset="ascii_lower")
    normalized = [normalize_text(t, spec) for t in texts]
    ids = TokenizerSpec().build().encode_batch([t for t in normalized if t])
    assert ceiling.tokens == sum(map(len, ids))
    assert ceiling.as_dict()["rows_per_second"] == ceiling.rows / ceiling.seconds


def test_kernels_bound_keeps_what_the_study_keeps_on_real_processes(tmp_path):
    """The in-memory bound runs the study's whole job: on the same lines it keeps exactly the
    rows the study's own pipeline keeps (normalize, GPT-2, drop under 10 tokens)."""
    corpus = ensure_corpus(tmp_path, 600)
    lines = read_lines(corpus)
    study = run_reference("single", corpus, tmp_path / "study.jsonl")
    bound = kernels_bound([*lines, b"\n"], workers=2, min_tokens=STUDY_MIN_TOKENS, repetitions=1)
    assert bound.rows == study.rows_in == len(lines) == 600  # the blank line is not a row
    assert bound.rows_kept == study.rows_out
    assert 0 < bound.rows_kept < bound.rows  # the corpus has short paragraphs to drop
    assert 0 < bound.seconds <= bound.single_process_seconds < 60
    assert bound.as_dict()["rows_per_second"] == bound.rows / bound.seconds

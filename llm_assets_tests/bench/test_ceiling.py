"""The tokenizer-only ceiling measures every way of encoding and keeps the fastest."""

from __future__ import annotations

from llm_assets.bench.ceiling import tokenizer_ceiling
from llm_assets.lib.normalize import NormalizeSpec, normalize_text
from llm_assets.lib.tokenization import TokenizerSpec


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

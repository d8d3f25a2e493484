"""Hostile input: what one document without spaces costs against ordinary text of the same size.

BPE's cost grows faster than a piece's length, and a document of letters without a space is one
piece to GPT-2's pre-tokenizer; the tokenizer cuts runs of one character class at 4,096
characters (llm_assets/kernels/tokenize/pieces.py). This script times the tokenize kernel on one
document of ``--mb`` MB of ordinary words, of letters without a space, and of random
characters, on both engines (tiktoken and transformers), in turn, and prints the medians and
the ratios to ordinary text (issue 37's target: spaceless at most 1.5x ordinary).

    .venv/bin/python benchmarks/hostile_input.py --mb 32 --runs 3
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import sys
import time

import pyarrow as pa

from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.kernels.tokenize.table import tokenize_table

WORDS = ("the", "of", "and", "to", "in", "is", "was", "for", "that", "with", "as", "on", "by")


def documents(size: int, seed: int = 0) -> dict[str, str]:
    """One document of ``size`` characters of each kind."""
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
        for _ in range(2000)
    ] + list(WORDS) * 50
    words = rng.choices(vocabulary, k=size // 4)
    ordinary = " ".join(words)[:size]
    spaceless = "".join(words)[:size]
    pool = string.ascii_letters + string.digits + string.punctuation + "éß漢字мир "
    random_chars = "".join(rng.choices(pool, k=size))
    return {"ordinary": ordinary, "spaceless": spaceless, "random": random_chars}


def _table(text: str) -> pa.Table:
    return pa.table(
        {
            "doc_id": ["d0"],
            "source_file": ["f.jsonl"],
            "source_line": pa.array([1], pa.int64()),
            "text": [text],
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="tiktoken,hf")
    args = parser.parse_args(argv)
    docs = {name: _table(text) for name, text in documents(int(args.mb * 1_000_000)).items()}
    for engine in args.engines.split(","):
        spec = TokenizerSpec(engine=engine)
        spec.build()
        seconds: dict[str, list[float]] = {name: [] for name in docs}
        for _ in range(args.runs):
            for name, table in docs.items():
                start = time.perf_counter()
                tokenize_table(table, spec)
                seconds[name].append(time.perf_counter() - start)
        ordinary = statistics.median(seconds["ordinary"])
        for name, values in seconds.items():
            median = statistics.median(values)
            print(
                f"{engine:8} {name:9} {args.mb:g} MB: median {median:6.2f} s "
                f"({median / ordinary:.2f}x ordinary, {args.runs} runs)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

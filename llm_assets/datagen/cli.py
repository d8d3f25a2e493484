"""``python -m llm_assets.datagen``: write generated rows, or regenerate the sample."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_assets.datagen.grammar import STYLES, WIKITEXT
from llm_assets.datagen.sample import DATA_DIR, make_sample
from llm_assets.datagen.vocabulary import DEFAULT_LANGUAGES
from llm_assets.datagen.writers import FORMATS, GENERATORS, write_corpus


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llm_assets.datagen``: write generated rows, or regenerate the sample."""
    parser = argparse.ArgumentParser(
        prog="python -m llm_assets.datagen",
        description="Write deterministic generated text data (no network).",
    )
    parser.add_argument("--rows", type=int, default=200_000, help="rows to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        help="output file; the suffix picks the format: " + ", ".join(FORMATS),
    )
    parser.add_argument("--kind", choices=sorted(GENERATORS), default="corpus")
    parser.add_argument("--duplicate-fraction", type=float, default=0.02, help="corpus only")
    parser.add_argument("--foreign-fraction", type=float, default=0.05, help="corpus only")
    parser.add_argument(
        "--languages", default=",".join(DEFAULT_LANGUAGES), help="corpus only, comma-separated"
    )
    parser.add_argument("--style", choices=STYLES, default=WIKITEXT, help="corpus only")
    parser.add_argument(
        "--sample",
        action="store_true",
        help="regenerate the shipped sample instead (under --out, default: the repo's data/)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.sample:
        counts = make_sample(args.out or DATA_DIR, args.seed)
        for name, rows in counts.items():
            print(f"{name}: {rows} rows", file=sys.stderr)
        return 0
    if args.out is None:
        parser.error("--out is required (or --sample)")
    options: dict[str, Any] = {}
    if args.kind == "corpus":
        options = {
            "duplicate_fraction": args.duplicate_fraction,
            "foreign_fraction": args.foreign_fraction,
            "languages": tuple(code.strip() for code in args.languages.split(",") if code),
            "style": args.style,
        }
    last_report = [started]

    def progress(written: int) -> None:
        now = time.perf_counter()
        if now - last_report[0] >= 1.0 or written == args.rows:
            last_report[0] = now
            rate = written / max(now - started, 1e-9)
            print(f"{written:,}/{args.rows:,} rows ({rate:,.0f} rows/s)", file=sys.stderr)

    try:
        path = write_corpus(
            args.out, args.rows, args.seed, kind=args.kind, progress=progress, **options
        )
    except ValueError as exc:  # the generators check their options before writing anything
        parser.error(str(exc))
    elapsed = time.perf_counter() - started
    print(f"wrote {args.rows:,} rows to {path} in {elapsed:.1f} s", file=sys.stderr)
    return 0

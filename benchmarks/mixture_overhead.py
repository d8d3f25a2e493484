"""What a source mixture costs: the study's workload on two sources, with and without a mixture.

Generates two sources of realistic rows (``llm_assets.datagen``, two seeds) in one input folder,
``web/`` (``--web-rows``) and ``books/`` (``--books-rows``), and runs our pipeline per backend,
medians of the repetitions:

* ``plain``: the study's workload (``ascii_lower``, GPT-2, drop < 10 tokens, packed batches);
* ``undersample``: the same with ``mixture`` weighing the two sources half and half by tokens,
  the larger one cut down (its left-out documents are rejects);
* ``oversample``: half and half by tokens, the smaller one repeated.

The mixture changes only ``training_batches`` (its scatter also holds each document's source,
its gather chooses the copies): the report gives that stage's median seconds beside the whole
run's. Writes JSON to ``benchmarks/results/``.

    python benchmarks/mixture_overhead.py --backends in_process multiprocess
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from llm_assets.bench.runner import Workload
from llm_assets.constants import TRAINING_BATCHES
from llm_assets.datagen.corpus import generate_records
from llm_assets.datagen.writers import write_corpus
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.mixing.mixture import MixtureSource, MixtureSpec
from llm_assets.machine import machine_info

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality_overhead import measure

RESULTS = Path(__file__).resolve().parent / "results"


def mixture(mode: str) -> MixtureSpec:
    """``web/`` and ``books/`` half and half by tokens."""
    return MixtureSpec(
        sources=(MixtureSource("web", ("web/",), 1.0), MixtureSource("books", ("books/",), 1.0)),
        by="tokens",
        mode=mode,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--web-rows", type=int, default=160_000)
    parser.add_argument("--books-rows", type=int, default=40_000)
    parser.add_argument("--backends", nargs="+", default=["in_process", "multiprocess"])
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)

    rows = args.web_rows + args.books_rows
    report: dict = {
        "machine": machine_info(),
        "rows": {"web": args.web_rows, "books": args.books_rows},
        "pipelines": {},
    }
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        corpus = work_dir / "input"
        for name, size, seed in (("web", args.web_rows, 1), ("books", args.books_rows, 2)):
            (corpus / name).mkdir(parents=True)
            write_corpus(corpus / name / "part.jsonl", generate_records(size, seed), seed=seed)
        base = Workload()
        workloads = {
            "plain": base,
            "undersample": replace(base, batches=BatchSpec(mixture=mixture("undersample"))),
            "oversample": replace(base, batches=BatchSpec(mixture=mixture("oversample"))),
        }
        for backend in args.backends:
            for name, workload in workloads.items():
                report["pipelines"][f"{backend}/{name}"] = measure(
                    corpus,
                    backend,
                    name,
                    workload,
                    rows=rows,
                    repetitions=args.repetitions,
                    work_dir=work_dir,
                )
            plain = report["pipelines"][f"{backend}/plain"]
            for name in ("undersample", "oversample"):
                mixed = report["pipelines"][f"{backend}/{name}"]
                print(
                    f"{backend}: {name}/plain wall time = "
                    f"{mixed['median_seconds'] / plain['median_seconds']:.3f}, "
                    f"{TRAINING_BATCHES} "
                    f"{plain['median_stage_seconds'][TRAINING_BATCHES]:.2f} -> "
                    f"{mixed['median_stage_seconds'][TRAINING_BATCHES]:.2f} s"
                )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "mixture_overhead.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

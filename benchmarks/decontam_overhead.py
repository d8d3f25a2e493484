"""What decontamination costs: the quality workload with and without an MMLU-sized eval set.

Runs our pipeline per backend on the same generated rows (``llm_assets.datagen``), medians of
the repetitions:

* ``quality``: the workload of ``quality_overhead.py`` (PII, the ``default`` preset, every
  filter and both dedups);
* ``decontam``: the same plus ``decontaminate`` against a generated multiple-choice eval set the
  size of MMLU's test split (``--eval-records`` records of a 25-60-word question and four 3-15-word
  choices, from paragraphs of another seed), ``--planted`` of whose questions quote 20 words of
  a corpus paragraph.

Then, in this process: the seconds to read the eval set and build its n-gram index, and the
kernel alone on the normalized text of the corpus (docs/s on one core). Writes JSON to
``benchmarks/results/``.

    python benchmarks/decontam_overhead.py --rows 200000 --backends in_process multiprocess
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from llm_assets.bench.runner import ensure_corpus, read_texts
from llm_assets.datagen.corpus import generate_records
from llm_assets.kernels import decontam
from llm_assets.kernels.decontam import DecontamSpec, decontam_filter, eval_index
from llm_assets.kernels.filters.chain import FilterSpec
from llm_assets.kernels.normalize import NormalizeSpec, normalize_array
from llm_assets.machine import machine_info

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality_overhead import measure, quality_workload

RESULTS = Path(__file__).resolve().parent / "results"


def write_eval_set(path: Path, records: int, planted: int, corpus_texts: list[str]) -> int:
    """A multiple-choice eval set of ``records`` records; the first ``planted`` questions quote
    20 words of distinct corpus paragraphs (of 40 words or more). Returns how many were
    planted."""
    rnd = random.Random(7)
    # The generator's sentences come from templates, which share runs of 13 words across
    # paragraphs: the eval texts take a paragraph's words in shuffled order, so that only the
    # planted quotes overlap the corpus.
    paragraphs = (
        rnd.sample(words, len(words))
        for words in (r["text"].split() for r in generate_records(records * 8, seed=12345))
        if len(words) >= 60
    )
    long_docs = [t.split() for t in corpus_texts if len(t.split()) >= 40]
    quoted = rnd.sample(long_docs, min(planted, len(long_docs)))
    with path.open("w") as handle:
        for i in range(records):
            words = next(paragraphs)
            question = words[: rnd.randint(25, 60)]
            if i < len(quoted):
                start = rnd.randint(0, len(quoted[i]) - 20)
                question = question[:10] + quoted[i][start : start + 20]
            choices = []
            for _ in range(4):
                start = rnd.randint(0, len(words) - 16)
                choices.append(" ".join(words[start : start + rnd.randint(3, 15)]))
            record = {"question": " ".join(question), "choices": choices, "answer": 0}
            handle.write(json.dumps(record) + "\n")
    return len(quoted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--backends", nargs="+", default=["in_process", "multiprocess"])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--eval-records", type=int, default=14_042)
    parser.add_argument("--planted", type=int, default=200)
    parser.add_argument("--data-dir", default=str(RESULTS / "data"))
    args = parser.parse_args(argv)

    corpus = ensure_corpus(args.data_dir, args.rows)
    texts = read_texts(corpus)
    report: dict = {"machine": machine_info(), "rows": args.rows, "pipelines": {}}
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        eval_path = work_dir / "mmlu_like.jsonl"
        planted = write_eval_set(eval_path, args.eval_records, args.planted, texts)
        spec = DecontamSpec(
            files=((str(eval_path), eval_path.name),), fields=("question", "choices")
        )
        report["eval_set"] = {"records": args.eval_records, "planted": planted}
        base = quality_workload()
        workloads = {
            "quality": base,
            "decontam": replace(base, filter=FilterSpec.standard().replace(decontam=spec)),
        }
        for backend in args.backends:
            for name, workload in workloads.items():
                report["pipelines"][f"{backend}/{name}"] = measure(
                    corpus.parent,
                    backend,
                    name,
                    workload,
                    rows=args.rows,
                    repetitions=args.repetitions,
                    work_dir=work_dir,
                )
            with_it = report["pipelines"][f"{backend}/decontam"]["median_seconds"]
            without = report["pipelines"][f"{backend}/quality"]["median_seconds"]
            print(f"{backend}: decontam/quality wall time = {with_it / without:.3f}")

        decontam._eval_index.cache_clear()  # built by the in-process runs: time it afresh
        decontam._read_eval_texts.cache_clear()
        started = time.perf_counter()
        index = eval_index(spec)
        build = time.perf_counter() - started
        normalized = normalize_array(pa.array(texts, pa.string()), NormalizeSpec())
        n = len(texts)
        table = pa.table(
            {
                "doc_id": [f"{i:012d}" for i in range(n)],
                "source_file": ["corpus.jsonl"] * n,
                "source_line": list(range(1, n + 1)),
                "text": normalized,
            }
        )
        started, cpu_started = time.perf_counter(), time.process_time()
        contaminated = 0
        for start in range(0, n, 8192):
            contaminated += decontam_filter(table.slice(start, 8192), spec).rejects.num_rows
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        report["kernel"] = {
            "index_seconds": round(build, 3),
            "eval_texts": index.texts,
            "eval_texts_checked": index.checked,
            "ngrams": len(index.hashes),
            "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu, 3),
            "docs_per_second": round(n / seconds, 1),
            "contaminated": contaminated,
        }
        print(
            f"index: {index.texts} eval texts ({index.checked} checked), {len(index.hashes)} "
            f"n-grams in {build:.2f} s; kernel alone: {n / seconds:,.0f} docs/s (CPU "
            f"{cpu:.2f} s), {contaminated} contaminated of {n}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"decontam_overhead-{args.rows}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

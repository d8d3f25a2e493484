"""Reading pretokenized batches with ``llm_assets.reader`` vs tokenizing the same text on the fly.

The published pretokenized reader was slower than on-the-fly tokenization (ZSTD level 22 and
I/O). This measures tokens/s of both on the same generated documents, on this machine:

    .venv/bin/python benchmarks/reader_vs_tokenize.py --docs 50000

On-the-fly is measured with both GPT-2 engines (transformers' GPT2TokenizerFast, as a training
script would call it, and our tiktoken fast path); the reader iterates every sequence of a
ZSTD-compressed packed Parquet file (level 3, the default; pass --zstd-level 22 for the study's).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.datagen.corpus import generate_records
from llm_assets.kernels.batching.metadata import batch_schema_metadata
from llm_assets.kernels.batching.packed import pack_sequences
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.reader import IterableTokenBatches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--zstd-level", type=int, default=3)
    args = parser.parse_args()

    texts = [r["text"] for r in generate_records(args.docs, seed=0)]
    results = {}
    for engine in ("hf", "tiktoken"):
        tok = TokenizerSpec(engine=engine).build()
        started = time.perf_counter()
        ids = []
        for start in range(0, len(texts), 1000):  # a DataLoader-sized batch at a time
            ids += tok.encode_batch(texts[start : start + 1000])
        seconds = time.perf_counter() - started
        tokens = sum(map(len, ids))
        results[f"on the fly ({engine})"] = tokens / seconds

    docs = [np.array(x, dtype=np.uint16) for x in ids]
    table, _ = pack_sequences(docs, args.seq_len, 50256, 50256, False, pa.uint16())
    meta = batch_schema_metadata(
        spec=BatchSpec(seq_len=args.seq_len),
        tokenizer_name="gpt2",
        tokenizer_fingerprint=tok.fingerprint,
        vocab_size=tok.vocab_size,
        split="train",
        input_fingerprint="bench",
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "part-train-00000.parquet"
        pq.write_table(
            table.replace_schema_metadata(meta),
            path,
            compression="zstd",
            compression_level=args.zstd_level,
            row_group_size=1024,
        )
        # Real (non-padding) tokens, counted outside the timed loop; the loop hands every
        # sequence to the "trainer" (touches its input_ids) as a DataLoader would.
        tokens = int(sum(sum(m) for m in table["attention_mask"].to_pylist()))
        for label, columns in (("all columns", None), ("input_ids only", ["input_ids"])):
            started = time.perf_counter()
            sequences = 0
            for item in IterableTokenBatches(
                path, "train", expected_seq_len=args.seq_len, columns=columns
            ):
                sequences += item["input_ids"].shape[0] > 0
            seconds = time.perf_counter() - started
            assert sequences == table.num_rows
            results[f"pretokenized reader ({label})"] = tokens / seconds

    reader = results["pretokenized reader (all columns)"]
    print(f"{args.docs} documents, {tokens} tokens, seq_len {args.seq_len}, zstd {args.zstd_level}")
    print("| method | tokens/s | reader (all columns) speed-up |")
    print("|---|---|---|")
    for name, rate in results.items():
        print(f"| {name} | {rate:,.0f} | {reader / rate:,.1f}x |")


if __name__ == "__main__":
    main()

"""A batch file's schema metadata and the length histogram."""

from __future__ import annotations

import numpy as np

from llm_assets.kernels.batching.metadata import batch_schema_metadata, length_histogram
from llm_assets.kernels.batching.spec import BatchSpec


def test_schema_metadata_is_bytes_and_deterministic():
    kwargs = {
        "spec": BatchSpec(seq_len=256, seed=42),
        "tokenizer_name": "gpt2",
        "tokenizer_fingerprint": "abc123",
        "vocab_size": 50257,
        "split": "validation",
        "input_fingerprint": "f00d",
    }
    meta = batch_schema_metadata(**kwargs)
    assert meta == batch_schema_metadata(**kwargs)
    assert all(isinstance(k, bytes) and isinstance(v, bytes) for k, v in meta.items())
    assert all(k.startswith(b"llm_assets.") for k in meta)
    assert meta[b"llm_assets.format_version"] == b"1"
    assert meta[b"llm_assets.layout"] == b"packed"
    assert meta[b"llm_assets.seq_len"] == b"256"
    assert meta[b"llm_assets.seed"] == b"42"
    assert meta[b"llm_assets.split"] == b"validation"
    assert meta[b"llm_assets.tokenizer.name"] == b"gpt2"
    assert meta[b"llm_assets.tokenizer.fingerprint"] == b"abc123"
    assert meta[b"llm_assets.tokenizer.vocab_size"] == b"50257"
    assert meta[b"llm_assets.source_fingerprint"] == b"f00d"
    assert batch_schema_metadata(**{**kwargs, "split": "train"}) != meta


def test_length_histogram_counts_every_document():
    hist = length_histogram(np.array([0, 5, 8, 100, 1024, 5000]), 1024)
    assert sum(hist.values()) == 6
    assert hist[">1024"] == 1
    # Counts per distinct length (as summed from the scatter manifests) give the same histogram.
    lengths, documents = np.unique([0, 5, 5, 8, 100, 100, 100, 5000], return_counts=True)
    assert length_histogram(lengths, 1024, weights=documents) == (
        length_histogram(np.array([0, 5, 5, 8, 100, 100, 100, 5000]), 1024)
    )

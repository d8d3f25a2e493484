"""Megatron-LM MMIDIDX: the bytes follow the format, and documents round-trip exactly."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_assets.kernels.megatron import MAGIC, MegatronWriter, dtype_for_vocab, read_megatron


def test_header_bytes_follow_the_format(tmp_path):
    writer = MegatronWriter(tmp_path / "ds", vocab_size=50257)
    writer.add_documents([np.array([1, 2, 3]), np.array([], dtype=np.int64), np.array([7])])
    bin_path, idx_path = writer.finalize()
    raw = idx_path.read_bytes()
    assert raw[:9] == MAGIC == b"MMIDIDX\x00\x00"
    assert struct.unpack_from("<QBQQ", raw, 9) == (1, 8, 3, 4)  # version, uint16, S, D + 1
    lengths = np.frombuffer(raw, np.int32, 3, 34)
    pointers = np.frombuffer(raw, np.int64, 3, 34 + 12)
    documents = np.frombuffer(raw, np.int64, 4, 34 + 12 + 24)
    assert lengths.tolist() == [3, 0, 1]
    assert pointers.tolist() == [0, 6, 6]
    assert documents.tolist() == [0, 1, 2, 3]
    assert np.frombuffer(bin_path.read_bytes(), np.uint16).tolist() == [1, 2, 3, 7]


def test_dtype_follows_the_vocabulary_size():
    assert dtype_for_vocab(50257) == np.uint16
    assert dtype_for_vocab(128_256) == np.int32


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.lists(st.integers(0, 50_256), max_size=300), max_size=40),
    st.sampled_from([50257, 128_256]),
)
def test_round_trip_is_exact(tmp_path, docs, vocab):
    writer = MegatronWriter(tmp_path / f"rt{vocab}", vocab_size=vocab)
    writer.add_documents(np.array(d, dtype=np.int64) for d in docs)
    writer.finalize()
    dataset = read_megatron(tmp_path / f"rt{vocab}")
    assert dataset.dtype == dtype_for_vocab(vocab)
    assert len(dataset) == len(docs)
    assert [dataset[i].tolist() for i in range(len(docs))] == docs


def test_nothing_is_visible_before_finalize_and_abort_cleans_up(tmp_path):
    writer = MegatronWriter(tmp_path / "ds", vocab_size=50257)
    writer.add_document([1, 2])
    assert not list(tmp_path.glob("ds.bin")) and not list(tmp_path.glob("ds.idx"))
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_bad_ids_and_bad_files_are_clear_errors(tmp_path):
    writer = MegatronWriter(tmp_path / "ds", vocab_size=100)
    with pytest.raises(ValueError, match="token ids"):
        writer.add_document([5, 100])
    writer.abort()
    (tmp_path / "x.idx").write_bytes(b"NOTMEGATRON" + bytes(40))
    (tmp_path / "x.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="MMIDIDX"):
        read_megatron(tmp_path / "x")

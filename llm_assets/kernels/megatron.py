"""Megatron-LM indexed datasets (``.bin`` + ``.idx``, the ``MMIDIDX`` format), written and read.

Megatron-LM and NeMo train on this format directly (``megatron/core/datasets/indexed_dataset.py``).
Layout of the ``.idx`` file, all little endian:

==========================  =============================================================
``b"MMIDIDX\\x00\\x00"``      magic (9 bytes)
``<Q`` version               1
``<B`` dtype code            1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
                             7 float32, 8 uint16
``<Q`` sequence count        S
``<Q`` document count        D + 1 (document indices, starting with 0)
int32[S]                     sequence lengths (tokens)
int64[S]                     sequence pointers (byte offsets into ``.bin``)
int64[D + 1]                 document indices: sequence index where each document ends
==========================  =============================================================

The ``.bin`` file is the tokens of every sequence back to back. We write one sequence per
document (Megatron's own ``preprocess_data.py`` does the same), each ending with EOS.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES: dict[type, int] = {
    np.uint8: 1,
    np.int8: 2,
    np.int16: 3,
    np.int32: 4,
    np.int64: 5,
    np.float64: 6,
    np.float32: 7,
    np.uint16: 8,
}
CODE_DTYPES = {code: np.dtype(t) for t, code in DTYPE_CODES.items()}


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """Megatron's rule: uint16 when the vocabulary has fewer than 65,500 entries, else int32."""
    return np.dtype(np.uint16 if vocab_size < 65500 else np.int32)


class MegatronWriter:
    """Stream documents into ``<prefix>.bin`` / ``<prefix>.idx``.

    Tokens go to disk as they arrive (only one int32 length per document stays in memory). Both
    files are written under temporary names and renamed by :meth:`finalize`, the ``.idx`` last,
    so a reader never sees a half-written dataset.
    """

    def __init__(self, prefix: str | Path, vocab_size: int) -> None:
        self.prefix = Path(prefix)
        self.dtype = dtype_for_vocab(vocab_size)
        self.vocab_size = vocab_size
        tag = uuid.uuid4().hex[:8]
        self._bin_tmp = self.prefix.with_name(f"{self.prefix.name}.bin.tmp-{tag}")
        self._idx_tmp = self.prefix.with_name(f"{self.prefix.name}.idx.tmp-{tag}")
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self._bin = open(self._bin_tmp, "wb")  # noqa: SIM115 - closed in finalize/abort
        self._lengths: list[int] = []

    def add_document(self, ids: np.ndarray | list[int]) -> None:
        """Append one document (one sequence) of token ids."""
        array = np.asarray(ids)
        if array.size and (array.min() < 0 or array.max() >= max(self.vocab_size, 1)):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}) for this vocabulary")
        self._bin.write(array.astype(self.dtype, copy=False).tobytes(order="C"))
        self._lengths.append(int(array.size))

    def add_documents(self, documents: Iterable[np.ndarray]) -> None:
        """Append several documents in order."""
        for document in documents:
            self.add_document(document)

    def finalize(self) -> tuple[Path, Path]:
        """Write the index and move both files into place; returns (bin path, idx path)."""
        self._bin.close()
        lengths = np.array(self._lengths, dtype=np.int32)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=pointers[1:])
        documents = np.arange(len(lengths) + 1, dtype=np.int64)
        with open(self._idx_tmp, "wb") as idx:
            idx.write(MAGIC)
            idx.write(struct.pack("<Q", VERSION))
            idx.write(struct.pack("<B", DTYPE_CODES[self.dtype.type]))
            idx.write(struct.pack("<Q", len(lengths)))
            idx.write(struct.pack("<Q", len(documents)))
            idx.write(lengths.tobytes(order="C"))
            idx.write(pointers.tobytes(order="C"))
            idx.write(documents.tobytes(order="C"))
        bin_path = Path(f"{self.prefix}.bin")
        idx_path = Path(f"{self.prefix}.idx")
        os.replace(self._bin_tmp, bin_path)
        os.replace(self._idx_tmp, idx_path)
        return bin_path, idx_path

    def abort(self) -> None:
        """Drop the temporary files (after an error)."""
        self._bin.close()
        for path in (self._bin_tmp, self._idx_tmp):
            path.unlink(missing_ok=True)


@dataclass
class MegatronIndex:
    """A Megatron dataset opened read-only: the index in memory, the tokens memory-mapped."""

    dtype: np.dtype
    sequence_lengths: np.ndarray
    sequence_pointers: np.ndarray
    document_indices: np.ndarray
    tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.sequence_lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.sequence_pointers[i]) // self.dtype.itemsize
        return self.tokens[start : start + int(self.sequence_lengths[i])]


def read_megatron(prefix: str | Path) -> MegatronIndex:
    """Open ``<prefix>.idx``/``.bin`` as Megatron-LM's ``IndexedDataset`` reads them (written
    from the format description, independent of the writer's code)."""
    idx_path, bin_path = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    raw = idx_path.read_bytes()
    if raw[:9] != MAGIC:
        raise ValueError(f"{idx_path} is not a Megatron MMIDIDX index (bad magic)")
    (version,) = struct.unpack_from("<Q", raw, 9)
    if version != VERSION:
        raise ValueError(f"{idx_path}: unsupported index version {version}")
    (code,) = struct.unpack_from("<B", raw, 17)
    seq_count, doc_count = struct.unpack_from("<QQ", raw, 18)
    offset = 34
    lengths = np.frombuffer(raw, np.int32, seq_count, offset)
    offset += lengths.nbytes
    pointers = np.frombuffer(raw, np.int64, seq_count, offset)
    offset += pointers.nbytes
    documents = np.frombuffer(raw, np.int64, doc_count, offset)
    dtype = CODE_DTYPES[code]
    size = bin_path.stat().st_size
    tokens = np.memmap(bin_path, dtype=dtype, mode="r") if size else np.zeros(0, dtype=dtype)
    return MegatronIndex(dtype, lengths, pointers, documents, tokens)

"""The words, lines and paragraphs of a batch of texts, flattened with the row each came from.

A word is a whitespace-separated token (``str.split()``; Arrow's ``utf8_split_whitespace`` splits
on the same characters); its length is in characters. Words are dictionary-encoded
(:class:`Words`), so per-word properties are computed once per distinct word and summed per
text with ``np.add.reduceat``. Splitting and encoding them is the costly part of every kernel
that reads words (the Gopher rules, MinHash, decontamination), which is why the filter chain
splits them once per batch and hands each step the words of its rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def text_array(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous string array; a null text counts as empty."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks else pa.array([], texts.type)
    return pc.fill_null(texts, "") if texts.null_count else texts


def numpy_of(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False)


def row_sums(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row, the sum of ``values`` (row ``i``'s at ``offsets[i]:offsets[i + 1]``) as int64
    (float64 if floats)."""
    dtype = np.float64 if values.dtype.kind == "f" else np.int64
    starts = offsets[:-1]
    if len(values) == 0:
        return np.zeros(len(starts), dtype)
    # reduceat sums values[starts[i]:starts[i + 1]], the last to the end; an empty row would
    # get the next row's first value (or index past the end), hence the 0 appended and where.
    padded = np.concatenate([values, np.zeros(1, values.dtype)])
    sums = np.add.reduceat(padded, starts, dtype=dtype)
    return np.where(starts < offsets[1:], sums, 0)


class Pieces:
    """The non-empty items of a list-of-strings array, flattened, with the row each came from
    (nondecreasing) and row ``i``'s items at ``offsets[i]:offsets[i + 1]``."""

    def __init__(self, lists: pa.Array, rows: int) -> None:
        flat = lists.flatten()
        parents = numpy_of(pc.list_parent_indices(lists)).astype(np.int64, copy=False)
        lengths = numpy_of(pc.binary_length(flat))
        if len(lengths) and not lengths.all():
            keep = lengths > 0
            flat, parents, lengths = flat.filter(pa.array(keep)), parents[keep], lengths[keep]
        self.flat = flat
        self.parents = parents
        self.nbytes = lengths
        self.offsets = np.zeros(rows + 1, np.int64)
        np.cumsum(np.bincount(parents, minlength=rows), out=self.offsets[1:])
        self._encoded: tuple[np.ndarray, pa.Array] | None = None

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per row, the sum of ``values`` (one number per item) as int64 (float64 if floats)."""
        return row_sums(self.offsets, values)

    def encoded(self) -> tuple[np.ndarray, pa.Array]:
        """Integer id of every item (equal items, equal ids) and the distinct items."""
        if self._encoded is None:
            if len(self.flat) == 0:
                self._encoded = np.zeros(0, np.int64), pa.array([], pa.string())
            else:
                encoded = self.flat.dictionary_encode()
                ids = numpy_of(encoded.indices).astype(np.int64, copy=False)
                self._encoded = ids, encoded.dictionary
        return self._encoded


_OTHER_WHITESPACE = (
    r"[\x{1c}-\x{1f}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}"
    r"\x{3000}]"
)
"""What ``str.split()`` and ``utf8_split_whitespace`` split on besides ASCII ``\\t\\n\\v\\f\\r``
and space."""


class Words:
    """The whitespace-separated words of a batch of texts (as ``str.split()``), dictionary-encoded:
    for every word in text order, the row it belongs to (``parents``, nondecreasing) and its id
    (``ids``, numbered in order of first appearance), the distinct words (``vocab[id]``), and row
    ``i``'s words at ``offsets[i]:offsets[i + 1]``.

    Splitting and encoding the words is the costly part of every kernel that reads words (the
    Gopher quality and repetition rules, MinHash): ``filter_table`` builds it once per batch
    with :meth:`of` and hands each kernel the words of the rows it sees with :meth:`take`. A
    kernel given no words splits the text itself; either way it sees the same words with the
    same ids, so its results are the same."""

    def __init__(
        self, parents: np.ndarray, ids: np.ndarray, vocab: pa.Array, offsets: np.ndarray
    ) -> None:
        self.parents = parents
        self.ids = ids
        self.vocab = vocab
        self.offsets = offsets

    @classmethod
    def of(cls, texts: pa.Array | pa.ChunkedArray) -> Words:
        """The words of every text (a null text has none).

        Split on ASCII whitespace first (several times faster than on Unicode whitespace); only
        when a word then contains other whitespace is the batch split again on Unicode
        whitespace. Trailing whitespace is trimmed first: pyarrow 26's ``utf8_split_whitespace``
        sometimes keeps the last whitespace character of a non-ASCII string (``"é The\\n"`` may
        give ``"The\\n"``, depending on the memory past the string)."""
        texts = pc.utf8_rtrim_whitespace(text_array(texts))
        rows = len(texts)
        pieces = Pieces(pc.ascii_split_whitespace(texts), rows)
        ids, vocab = pieces.encoded()
        if len(vocab) and pc.any(pc.match_substring_regex(vocab, _OTHER_WHITESPACE)).as_py():
            pieces = Pieces(pc.utf8_split_whitespace(texts), rows)
            ids, vocab = pieces.encoded()
        return cls(pieces.parents, ids, vocab, pieces.offsets)

    @property
    def rows(self) -> int:
        """How many texts the words come from."""
        return len(self.offsets) - 1

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per row, the sum of ``values`` (one number per word) as int64 (float64 if floats)."""
        return row_sums(self.offsets, values)

    def take(self, rows: np.ndarray) -> Words:
        """The words of the texts at ``rows`` (ascending positions), exactly as :meth:`of` gives
        them for those texts: ids renumbered in order of first appearance, the vocabulary cut to
        the words still present. The n-gram hashes of the repetition rules are drawn by id, so
        the same ids keep them, and every result, the same."""
        rows = np.asarray(rows, np.int64)
        if len(rows) == self.rows:
            return self
        counts = np.diff(self.offsets)[rows]
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        # Position of each kept word: its rank among the kept words, shifted by how far its
        # row moved.
        shift = np.repeat(self.offsets[:-1][rows] - offsets[:-1], counts)
        ids = self.ids[np.arange(offsets[-1], dtype=np.int64) + shift]
        parents = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
        if len(ids) == 0:
            return Words(parents, np.zeros(0, np.int64), pa.array([], pa.string()), offsets)
        codes = factorize(ids)
        vocab = self.vocab.take(pa.array(ids[first_occurrences(codes)]))
        return Words(parents, codes, vocab, offsets)


def words_of(texts: pa.Array | pa.ChunkedArray, words: Words | None) -> Words:
    """``words`` if given (checked to be of as many texts), else the words of ``texts``."""
    if words is None:
        return Words.of(texts)
    if words.rows != len(texts):
        raise ValueError(f"words of {words.rows} texts given for {len(texts)} texts")
    return words


def split_words(texts: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """The words of a string array as ``str.split()`` sees them: for every word in text order,
    the row it belongs to and its id, and the distinct words (``vocab[id]``) (:class:`Words`)."""
    words = Words.of(texts)
    return words.parents, words.ids, words.vocab


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Elementwise ratio as float64, 0 where the denominator is 0."""
    out = np.zeros(len(numerator), np.float64)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def factorize(keys: np.ndarray) -> np.ndarray:
    """Number integer keys in order of first appearance (the first distinct key is 0, the next
    new one 1, ...): Arrow's hash-based dictionary encoding, as fast as ``pandas.factorize``
    without importing pandas into every worker."""
    return numpy_of(pa.array(keys).dictionary_encode().indices).astype(np.int64, copy=False)


def first_occurrences(codes: np.ndarray) -> np.ndarray:
    """For codes numbered in order of first appearance (:func:`factorize`): True where a code
    appears for the first time (it is then above every code before it)."""
    first = np.ones(len(codes), bool)
    if len(codes) > 1:
        running = np.maximum.accumulate(codes)
        first[1:] = running[1:] > running[:-1]
    return first

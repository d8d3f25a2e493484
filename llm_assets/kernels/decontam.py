"""Decontamination: drop training documents that share a word n-gram with an evaluation set.

A model fine-tuned on the text of the benchmark it is then scored on reports a score it did not
earn. GPT-3 (Brown et al., 2020, appendix C) and NeMo Curator's task decontamination remove such
overlap by word n-grams: a training document that contains any 13 consecutive words of an
evaluation example is contaminated. This module does the same per shard:

* The eval sets are files read like ``raw_documents``' input (JSON Lines, compressed or not,
  Parquet, CSV, TXT paragraphs). Each record gives one or more eval *texts*: the first of
  ``fields`` (which every record must have), then each string of the other fields the record
  has (a list of answer choices gives one text per choice). N-grams never cross from one text
  to another.
* Both sides are compared as *canonical words*: the eval texts first get the normalization the
  documents got (``normalized_documents``' preset, so that ``ascii_lower``'s dropped accents and
  apostrophes match), then on both sides the text is split on whitespace, each word lowercased
  and stripped of every character that is not a letter, mark or digit (``"France?"`` is
  ``france``, ``don't`` is ``dont``), and words left empty (a lone ``-``) are dropped.
* Every ``ngram`` words of an eval text are an n-gram. A text shorter than that but of at least
  ``min_ngram`` words is one n-gram of all its words (NeMo Curator's rule: a 9-word question is
  matched whole); shorter texts (an answer ``B``, ``Paris``) are not checked, since their words
  occur in ordinary text by chance; the driver's log counts them.
* N-grams are 64-bit hashes (xxh64 per word, mixed in order, the length mixed in), so one
  sorted array of an eval set's n-grams is searched by every shard; a false match needs a
  64-bit collision.

A contaminated document is rejected as ``contaminated``, with the eval text it shares words with
(``file:line field``), the first shared n-gram in canonical words and how many it shares. SFT rows
are checked on their rendered prompt and their text, so an instruction that copies a benchmark
question is caught too.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from llm_assets.kernels.dedup import rolling_ngram_hashes
from llm_assets.kernels.ingest.read import IngestSpec, read_documents
from llm_assets.kernels.normalize import NormalizeSpec, normalize_array
from llm_assets.kernels.schema import (
    METADATA,
    PROMPT,
    REASON,
    SOURCE_LINE,
    TEXT,
    VALUE,
    StageResult,
    drop_rows,
    string_array,
)
from llm_assets.kernels.words import Words

DECONTAM_STAGE = "filter"
CONTAMINATED = "contaminated"
MAX_NGRAM = 64
"""The longest n-gram offered (each word of a text is mixed this many times at most)."""

_NOT_WORD = r"[^\p{L}\p{M}\p{N}]+"
"""What canonical words lose: every character that is not a letter, a mark or a digit."""
_WORD_SEED = 0x6465636F6E74616D  # "decontam"
_LENGTH_MIX = np.uint64(0xBF58476D1CE4E5B9)
_QUOTE_WORDS = 20
"""At most this many words of the shared n-gram are quoted in a reject's value."""
_CHUNK_WORDS = 1 << 20
"""Words of a batch searched at once: ~50 MB of n-gram arrays."""
_MARKUP = r"<[^<>\s]{1,64}>|\[/?[A-Z][A-Z_]{1,15}\]"
"""Chat and prompt markup in a rendered prompt (``<|im_end|>``, ``</s>``, ``<start_of_turn>``,
``[INST]``): a word break, so that a question's last word is not glued to the marker after it."""


class EvalSetError(ValueError):
    """An eval set cannot be read as configured: the message names the file, the line and what
    to change."""


@dataclass(frozen=True)
class DecontamSpec:
    """Decontamination against eval sets. ``files``: (path, name) of each eval file, the name
    as reported in rejects and logs; ``fields``: the field of every record's eval text, then
    optional fields checked too; ``normalize``: how the documents were normalized, applied to
    the eval texts (the stage fills it in from ``normalized_documents``' config)."""

    files: tuple[tuple[str, str], ...] = field(
        metadata={
            "doc": "Eval sets whose text must not be trained on: files or folders (every input "
            "file under them), read like raw_documents' input, wherever they are. Empty: "
            "no decontamination"
        }
    )
    fields: tuple[str, ...] = field(
        default=("text",),
        metadata={
            "doc": "The field (column) of each eval record's text, which every record must "
            "have, then fields checked too when a record has them (strings, or lists of "
            "strings such as answer choices)"
        },
    )
    ngram: int = field(
        default=13, metadata={"doc": "A document sharing this many consecutive words is dropped"}
    )
    min_ngram: int = field(
        default=8,
        metadata={
            "doc": "Eval texts shorter than ngram words but of at least this many are matched "
            "whole; shorter ones are not checked"
        },
    )
    normalize: NormalizeSpec = field(default_factory=NormalizeSpec)

    def __post_init__(self) -> None:
        if not self.files:
            raise ValueError("decontaminate needs at least one eval file")
        if not self.fields or any(not f for f in self.fields):
            raise ValueError(f"decontaminate fields must be non-empty names, got {self.fields}")
        if len(set(self.fields)) != len(self.fields):
            raise ValueError(f"decontaminate fields are named twice: {self.fields}")
        if not 1 <= self.ngram <= MAX_NGRAM:
            raise ValueError(f"decontaminate ngram must be in [1, {MAX_NGRAM}], got {self.ngram}")
        if not 1 <= self.min_ngram <= self.ngram:
            raise ValueError(
                f"decontaminate min_ngram must be in [1, ngram={self.ngram}], got {self.min_ngram}"
            )


@dataclass(frozen=True)
class EvalTexts:
    """The eval texts of a spec's files, in file and record order, and where each comes from
    (``name:line field``; TXT paragraphs: ``name:line``)."""

    texts: tuple[str, ...]
    where: tuple[str, ...]
    records: int


@dataclass(frozen=True)
class EvalIndex:
    """Every n-gram of the eval texts: ``hashes`` sorted and distinct, ``owners[i]`` the first
    eval text (in file order) holding ``hashes[i]``; ``lengths`` the n-gram lengths present."""

    hashes: np.ndarray
    owners: np.ndarray
    lengths: tuple[int, ...]
    where: tuple[str, ...]
    texts: int
    records: int
    checked: int
    """Eval texts of at least ``min_ngram`` words (the others cannot match)."""
    short: int
    """Eval texts with words, but fewer than ``min_ngram``: not checked."""
    filter_bits: np.ndarray
    """A one-hash Bloom filter of ``hashes``, by their top bits (``filter_shift``): most
    n-grams of a document are in no eval set, and one bit test per n-gram, in a bit array that
    stays in cache, spares them the binary search (on 20,000 generated paragraphs against an
    MMLU-sized eval set: 0.14 s instead of 1.27 s)."""
    filter_shift: int

    @classmethod
    def of(cls, hashes: np.ndarray, **fields: Any) -> EvalIndex:
        """The index of ``hashes`` (sorted, distinct) with its filter: about 32 bits per
        n-gram (a 3 % false-positive rate), 2^16 to 2^27 bits."""
        bits = int(min(27, max(16, np.ceil(np.log2(max(len(hashes), 1) * 32)))))
        flags = np.zeros(1 << bits, bool)
        flags[hashes >> np.uint64(64 - bits)] = True
        packed = np.packbits(flags, bitorder="little")
        return cls(hashes=hashes, filter_bits=packed, filter_shift=64 - bits, **fields)

    def find(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The positions in ``queries`` of the hashes in the index, and where each is."""
        slot = queries >> np.uint64(self.filter_shift)
        maybe = (
            self.filter_bits[slot >> np.uint64(3)] >> (slot & np.uint64(7)).astype(np.uint8)
        ) & 1
        candidates = np.flatnonzero(maybe)
        at = np.searchsorted(self.hashes, queries[candidates])
        at[at == len(self.hashes)] = 0
        found = self.hashes[at] == queries[candidates]
        return candidates[found], at[found]


def _stamps(files: tuple[tuple[str, str], ...]) -> tuple[tuple[int, int], ...]:
    """Each file's (modification time, size): a changed file is read again."""
    stamps = []
    for path, name in files:
        try:
            stat = os.stat(path)
        except OSError as exc:
            raise EvalSetError(f"eval set {name}: {exc.strerror or exc}") from exc
        stamps.append((stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)


def _strings(value: Any) -> Iterator[str]:
    """The strings of a field's value: itself, or those inside its lists and objects (answer
    choices, ``{"text": [...], "label": [...]}``), in order; numbers and booleans have none."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _nothing_to_match(spec: DecontamSpec, normalized: bool = False) -> EvalSetError:
    names = ", ".join(name for _, name in spec.files)
    if normalized:
        return EvalSetError(
            f"the eval sets ({names}) hold texts of {spec.min_ngram} words or more "
            f"(decontaminate min_ngram), but none once normalized like the documents "
            f"(normalized_documents' preset {spec.normalize.preset!r}; ascii_lower removes every "
            "letter outside a-z): nothing could be matched"
        )
    return EvalSetError(
        f"the eval sets ({names}) hold no text of {spec.min_ngram} words or more "
        f"(decontaminate min_ngram) in the fields {list(spec.fields)}: nothing could be "
        "matched; name the fields that hold the questions and answers"
    )


def check_eval_sets(spec: DecontamSpec) -> EvalTexts:
    """Read the eval sets (:func:`read_eval_texts`) and refuse those where no text has
    ``min_ngram`` words even before normalization: a cheap check for a run's first step; the
    index (:func:`eval_index`), built with the documents' normalization, checks again."""
    read = read_eval_texts(spec)
    if not any(len(text.split()) >= spec.min_ngram for text in read.texts):
        raise _nothing_to_match(spec)
    return read


def read_eval_texts(spec: DecontamSpec) -> EvalTexts:
    """The eval texts of ``spec``'s files (cached while the files are unchanged). Raises
    :class:`EvalSetError` naming the file and line of anything that cannot be read: the files
    are read by ``raw_documents``' readers, and any record they would reject (invalid JSON, a
    record without the first field or with a non-string in it, a damaged file, an empty one)
    stops the run, since decontamination that skipped part of an eval set would pass its
    overlap silently."""
    return _read_eval_texts(spec.files, spec.fields, _stamps(spec.files))


@functools.lru_cache(maxsize=8)
def _read_eval_texts(
    files: tuple[tuple[str, str], ...],
    fields: tuple[str, ...],
    stamps: tuple[tuple[int, int], ...],
) -> EvalTexts:
    first, others = fields[0], fields[1:]
    ingest = IngestSpec(text_field=first)
    texts: list[str] = []
    where: list[str] = []
    records = 0
    seen: set[str] = set()
    for path, name in files:
        txt = name.lower().endswith(".txt")
        try:
            for result in read_documents(path, name, ingest):
                rejects = result.rejects
                if rejects.num_rows:
                    row = rejects.slice(0, 1).to_pylist()[0]
                    hint = (
                        f"; every record needs the field {first!r} (the first of decontaminate "
                        "fields) holding a string"
                        if row[REASON] in ("missing_text", "non_string_text")
                        else ""
                    )
                    line = row[SOURCE_LINE]  # 0: the file as a whole (empty, damaged)
                    raise EvalSetError(
                        f"eval set {name}{f':{line}' if line else ''}: {row[REASON]} "
                        f"({row[VALUE]}){hint}"
                    )
                kept = result.kept
                lines = kept[SOURCE_LINE].to_pylist()
                metadata = (
                    kept[METADATA].to_pylist()
                    if others and METADATA in kept.column_names
                    else [None] * len(lines)
                )
                for line, text, meta in zip(lines, kept[TEXT].to_pylist(), metadata, strict=True):
                    records += 1
                    texts.append(text)
                    where.append(f"{name}:{line}" if txt else f"{name}:{line} {first}")
                    record = json.loads(meta) if meta else {}
                    seen.update(other for other in others if other in record)
                    for other in others:
                        for value in _strings(record.get(other)):
                            texts.append(value)
                            where.append(f"{name}:{line} {other}")
        except OSError as exc:
            raise EvalSetError(f"eval set {name}: {exc.strerror or exc}") from exc
    absent = [other for other in others if other not in seen]
    if absent:
        raise EvalSetError(
            f"no record of the eval sets ({', '.join(name for _, name in files)}) has the "
            f"field(s) {absent} of decontaminate fields: a misspelled field would check "
            "nothing; name fields the records hold"
        )
    return EvalTexts(tuple(texts), tuple(where), records)


def canonical_words(words: Words) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """The canonical words of texts split into ``words``: for each word left, in text order, its
    row and its id in the returned vocabulary. Each distinct word is lowercased and loses every
    character that is not a letter, mark or digit once; words left empty are dropped."""
    canonical = pc.replace_substring_regex(pc.utf8_lower(words.vocab), _NOT_WORD, "")
    encoded = canonical.dictionary_encode()
    renumber = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    empty = pc.equal(pc.binary_length(canonical), 0).to_numpy(zero_copy_only=False)
    keep = ~empty[words.ids]
    return words.parents[keep], renumber[words.ids[keep]], encoded.dictionary


def _word_hashes(vocab: pa.Array) -> np.ndarray:
    return np.array(
        [xxhash.xxh64_intdigest(w.encode(), _WORD_SEED) for w in vocab.to_pylist()],
        dtype=np.uint64,
    )


def _ngrams(
    parents: np.ndarray, hashes: np.ndarray, lengths: tuple[int, ...]
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """For each n of ``lengths``, ascending: the hashes of the n-grams of the words (``hashes``,
    one per word, rows ``parents`` one after another) that do not cross the end of their row,
    and the position where each starts."""
    if len(hashes) == 0:
        return
    ends = np.flatnonzero(np.diff(parents, append=parents[-1] + 1)) + 1
    end_of = np.repeat(ends, np.diff(ends, prepend=0))
    positions = np.arange(len(hashes))
    for n, mixed in rolling_ngram_hashes(hashes, lengths):
        full = positions + n <= end_of
        with np.errstate(over="ignore"):
            yield n, mixed[full] ^ (np.uint64(n) * _LENGTH_MIX), positions[full]


def eval_index(spec: DecontamSpec) -> EvalIndex:
    """The n-gram index of ``spec``'s eval sets, built once per process while the files are
    unchanged (every shard of a run searches the same one). Raises :class:`EvalSetError` when no
    eval text has ``min_ngram`` words: nothing could ever match."""
    return _eval_index(spec, _stamps(spec.files))


@functools.lru_cache(maxsize=4)
def _eval_index(spec: DecontamSpec, stamps: tuple[tuple[int, int], ...]) -> EvalIndex:
    read = _read_eval_texts(spec.files, spec.fields, stamps)
    normalized = normalize_array(pa.array(read.texts, pa.string()), spec.normalize)
    parents, ids, vocab = canonical_words(Words.of(normalized))
    rows = len(read.texts)
    counts = np.bincount(parents, minlength=rows)
    checked = counts >= spec.min_ngram
    if not checked.any():
        raw = any(len(text.split()) >= spec.min_ngram for text in read.texts)
        raise _nothing_to_match(spec, normalized=raw)
    # Texts of at least ngram words give every n-gram; shorter checked ones one n-gram of all
    # their words.
    lengths = sorted({int(n) for n in counts[checked & (counts < spec.ngram)]})
    if (counts >= spec.ngram).any():
        lengths.append(spec.ngram)
    hashes, owners = [], []
    for n, found, starts in _ngrams(parents, _word_hashes(vocab)[ids], tuple(lengths)):
        owner = parents[starts]
        take = counts[owner] >= n if n == spec.ngram else counts[owner] == n
        hashes.append(found[take])
        owners.append(owner[take])
    all_hashes, all_owners = np.concatenate(hashes), np.concatenate(owners)
    order = np.lexsort((all_owners, all_hashes))  # by hash, then the first eval text
    sorted_hashes = all_hashes[order]
    first = np.ones(len(order), bool)
    first[1:] = sorted_hashes[1:] != sorted_hashes[:-1]
    return EvalIndex.of(
        sorted_hashes[first],
        owners=all_owners[order][first],
        lengths=tuple(lengths),
        where=read.where,
        texts=rows,
        records=read.records,
        checked=int(checked.sum()),
        short=int(((counts > 0) & ~checked).sum()),
    )


def _checked_texts(table: pa.Table, normalize: NormalizeSpec) -> pa.Array | pa.ChunkedArray:
    """What is checked of each row: the text, after the rendered prompt for SFT rows. The text
    was normalized by ``normalized_documents``; the prompt, rendered from the record's fields
    at tokenization, was not: it gets the same normalization here (the eval texts' too), after
    its chat markup becomes word breaks."""
    if PROMPT not in table.column_names:
        return table[TEXT]
    prompt = pc.replace_substring_regex(string_array(table[PROMPT]), _MARKUP, " ")
    prompt = normalize_array(prompt, normalize)
    return pc.binary_join_element_wise(prompt, table[TEXT], "\n", null_handling="skip")


def decontam_filter(table: pa.Table, spec: DecontamSpec, words: Words | None = None) -> StageResult:
    """Kernel: reject the rows that share an n-gram with the eval sets (``contaminated``; the
    value names the eval text of the longest shared n-gram, quotes that n-gram and counts the
    shared ones). ``words``: the words of ``table[TEXT]``, if already split (unused for SFT rows,
    whose prompt is checked too). Rows are searched ``_CHUNK_WORDS`` words at a time, which
    bounds the n-gram arrays whatever the batch holds."""
    index = eval_index(spec)
    rows = table.num_rows
    if PROMPT in table.column_names or words is None:
        words = Words.of(_checked_texts(table, spec.normalize))
    parents, ids, vocab = canonical_words(words)
    word_hashes = _word_hashes(vocab)[ids]
    shared = np.zeros(rows, np.int64)
    best_start = np.zeros(rows, np.int64)
    best_length = np.zeros(rows, np.int64)
    best_owner = np.zeros(rows, np.int64)
    row_starts = np.searchsorted(parents, np.arange(rows + 1))
    lo = 0
    while lo < len(parents):
        # Whole rows, about _CHUNK_WORDS words (a longer row is a chunk of its own).
        row = parents[lo]
        last = int(np.searchsorted(row_starts, lo + _CHUNK_WORDS, side="right")) - 1
        hi = int(row_starts[max(last, row + 1)])
        for n, hashes, starts in _ngrams(parents[lo:hi], word_hashes[lo:hi], index.lengths):
            hit, at = index.find(hashes)
            if not len(hit):
                continue
            hit_starts = starts[hit] + lo
            hit_rows = parents[hit_starts]
            shared += np.bincount(hit_rows, minlength=rows)
            # Each row's first hit at this length (hits are in text order), kept when no
            # longer n-gram was shared (lengths come in ascending order: a longer one wins).
            unique_rows, first = np.unique(hit_rows, return_index=True)
            best_start[unique_rows] = hit_starts[first]
            best_length[unique_rows] = n
            best_owner[unique_rows] = index.owners[at[first]]
        lo = hi
    dropped = shared > 0
    values = []
    for row in np.flatnonzero(dropped).tolist():
        start, n = int(best_start[row]), int(best_length[row])
        quoted = vocab.take(pa.array(ids[start : start + min(n, _QUOTE_WORDS)])).to_pylist()
        more = " …" if n > _QUOTE_WORDS else ""
        count = int(shared[row])
        values.append(
            f'{index.where[best_owner[row]]}: "{" ".join(quoted)}{more}" ({n} words; '
            f"{count} shared n-gram{'s' if count != 1 else ''})"
        )
    return drop_rows(
        table,
        pa.array(dropped),
        stage=DECONTAM_STAGE,
        reasons=[CONTAMINATED] * len(values),
        values=values,
    )

"""Text augmentation of training documents: seeded word-level edits (EDA).

Easy Data Augmentation (Wei and Zou, 2019, "EDA: Easy Data Augmentation Techniques for Boosting
Performance on Text Classification Tasks") makes a new example from a document by one of a few
word edits. The batches use it for the copies of a document they make (``training_batches``'
``balance: oversample`` and ``augment_copies``): each copy is a variant of its document rather
than the same tokens again, so a model sees a class's few documents worded a little differently
each time instead of fitting them by heart.

Each variant applies one edit, chosen at random, to about ``rate`` of the document's words
(at least one):

``deletion``
    each word is left out with probability ``rate`` (at least one word, never all);
``swap``
    two words trade places, ``max(1, round(rate * words))`` times;
``insertion``
    a word of the document is inserted at a random place, as many times (places among the
    document's own words: several may land at one).

EDA's fourth edit, synonym replacement, needs a thesaurus (WordNet); none ships offline, so it
is not offered, and insertion takes its words from the document itself rather than from synonyms
of them. Words are runs of non-space characters, and the whitespace between them stays where it
was: a swap moves words, never line breaks; a deletion keeps the line or paragraph break of a
deleted word (between the kept words on either side, the widest break of the gaps between them),
so only a line whose every word is deleted goes, with its words. Text without spaces between
words (Chinese, Japanese) is one word: deletion and swap leave it as it is, and an insertion
repeats it whole.

Pure and deterministic: a variant depends only on the text, the rate, the seed, the document's
id and the copy's number (keyed BLAKE2b draws, the same on every machine, backend and Python),
like every decision of the shuffle (:mod:`llm_assets.kernels.batching`).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass

AUGMENTS = ("none", "eda")
EDA_EDITS = ("deletion", "swap", "insertion")
MAX_AUGMENT_RATE = 0.5
"""Above half the words edited, a variant is more noise than document."""
_AUGMENT_PERSON = b"llm-assets/augm"
_WORDS = re.compile(r"(\S+)")
"""Split on it: the gaps (whitespace, maybe empty) at even places, the words at odd ones."""
_BLOCK = struct.Struct("<8Q")
_UNIT = float(2**64)


def check_augment_rate(rate: float) -> None:
    """Refuse a rate outside ``(0, MAX_AUGMENT_RATE]`` (or not a number)."""
    if (
        isinstance(rate, bool)
        or not isinstance(rate, (int, float))
        or not 0 < rate <= MAX_AUGMENT_RATE
    ):
        raise ValueError(
            f"augment_rate must be a number in (0, {MAX_AUGMENT_RATE}] (the share of a copy's "
            f"words one edit changes; EDA uses 0.1), got {rate!r}"
        )


class _Draws:
    """Uniform draws from a keyed BLAKE2b stream: block ``i`` is the digest of ``i``, 8 uint64
    each (little endian), so the draws are the same wherever they are made."""

    def __init__(self, key: bytes) -> None:
        self._hash = hashlib.blake2b(digest_size=64, key=key, person=_AUGMENT_PERSON)
        self._block = 0
        self._left: list[int] = []

    def _next(self) -> int:
        if not self._left:
            h = self._hash.copy()
            h.update(self._block.to_bytes(8, "little"))
            self._block += 1
            self._left = list(_BLOCK.unpack(h.digest()))[::-1]
        return self._left.pop()

    def below(self, n: int) -> int:
        """An int in ``[0, n)`` (``n`` far below 2**64: the bias is negligible)."""
        return self._next() % n

    def unit(self) -> float:
        """A float in ``[0, 1)``."""
        return self._next() / _UNIT


@dataclass(frozen=True)
class Variant:
    """One augmented copy: its text and the edit that made it (``None``: the text is the
    document's, because it has too few words for the edit, or the edit changed nothing, as a
    swap of two equal words does)."""

    text: str
    edit: str | None


def eda_variant(text: str, rate: float, key: bytes) -> Variant:
    """A variant of ``text``: one of :data:`EDA_EDITS`, chosen by the draws of ``key``, applied
    to about ``rate`` of its words. Deletion and swap need two words, insertion one: a text
    with fewer comes back as it is (``edit`` None)."""
    check_augment_rate(rate)
    draws = _Draws(key)
    edit = EDA_EDITS[draws.below(len(EDA_EDITS))]
    parts = _WORDS.split(text)
    # gaps[i] precedes words[i]; the last gap follows the last word.
    words, gaps = parts[1::2], parts[0::2]
    n = len(words)
    if n == 0 or (n < 2 and edit != "insertion"):
        return Variant(text, None)
    times = max(1, round(rate * n))
    if edit == "deletion":
        kept = [i for i in range(n) if draws.unit() >= rate]
        if not kept:
            kept = [draws.below(n)]
        if len(kept) == n:  # nothing drawn: delete one word, so every variant differs
            del kept[draws.below(n)]
        out = _joined(words, gaps, kept)
    elif edit == "swap":
        for _ in range(times):
            i = draws.below(n)
            j = (i + 1 + draws.below(n - 1)) % n
            words[i], words[j] = words[j], words[i]
        out = _rebuilt(words, gaps)
    else:
        out = _inserted(words, gaps, [(draws.below(n), draws.below(n + 1)) for _ in range(times)])
    return Variant(out, edit) if out != text else Variant(text, None)


def _rebuilt(words: Sequence[str], gaps: Sequence[str]) -> str:
    """``gaps[0] words[0] gaps[1] ... words[-1] gaps[-1]`` (one more gap than words)."""
    out = [""] * (2 * len(words) + 1)
    out[0::2] = gaps
    out[1::2] = words
    return "".join(out)


def _joined(words: Sequence[str], gaps: Sequence[str], kept: Sequence[int]) -> str:
    """The ``kept`` words (indices, ascending) with the text's leading and trailing whitespace,
    and between two kept words the gap among those between them with the most line breaks (the
    first if none has any): a deleted word's line or paragraph break stays."""
    inner = [
        max(gaps[a + 1 : b + 1], key=lambda gap: gap.count("\n"))
        for a, b in itertools.pairwise(kept)
    ]
    return _rebuilt([words[i] for i in kept], [gaps[0], *inner, gaps[-1]])


def _inserted(words: Sequence[str], gaps: Sequence[str], draws: Sequence[tuple[int, int]]) -> str:
    """The text with ``words[w]`` inserted before word ``place`` (``len(words)``: after the last)
    for each ``(w, place)``, in draw order where several share a place, each followed by a single
    space (one before those after the last word). Linear in the text: a long document's
    insertions cost no more than its other edits."""
    at: dict[int, list[str]] = {}
    for w, place in draws:
        at.setdefault(place, []).append(words[w])
    out = [gaps[0]]
    for i, word in enumerate(words):
        out.extend(f"{new} " for new in at.get(i, ()))
        out.append(word)
        if i == len(words) - 1 and len(words) in at:
            out.append(" " + " ".join(at[len(words)]))
        out.append(gaps[i + 1])
    return "".join(out)


def augment_key(seed: int, doc_id: str, copy: int) -> bytes:
    """The draws' key of copy ``copy`` (1, 2, ...) of a document: its seed, doc_id and copy
    number, so each copy of each document is its own variant, the same in every run with this
    seed (hashed down to BLAKE2b's 64-byte key limit when longer)."""
    raw = (
        int(seed).to_bytes(8, "little") + doc_id.encode() + b"\0" + int(copy).to_bytes(8, "little")
    )
    return raw if len(raw) <= 64 else hashlib.blake2b(raw, digest_size=64).digest()


def eda_variants(
    texts: Sequence[str], doc_ids: Sequence[str], copies: Sequence[int], seed: int, rate: float
) -> list[Variant]:
    """The variant of every (text, doc_id, copy number) triple (:func:`eda_variant`)."""
    check_augment_rate(rate)
    return [
        eda_variant(text, rate, augment_key(seed, doc_id, copy))
        for text, doc_id, copy in zip(texts, doc_ids, copies, strict=True)
    ]

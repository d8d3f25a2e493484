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
    a word of the document is inserted at a random place, as many times.

EDA's fourth edit, synonym replacement, needs a thesaurus (WordNet); none ships offline, so it
is not offered, and insertion takes its words from the document itself rather than from synonyms
of them. Words are runs of non-space characters; the whitespace between them (newlines
included) stays where it was, so a variant keeps its document's lines and paragraphs. Text
without spaces between words (Chinese, Japanese) is one word: its variants are the document.

Pure and deterministic: a variant depends only on the text, the rate, the seed, the document's
id and the copy's number (keyed BLAKE2b draws, the same on every machine, backend and Python),
like every decision of the shuffle (:mod:`llm_assets.lib.batching`).
"""

from __future__ import annotations

import hashlib
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
    """One augmented copy: its text and the edit that made it (``None``: none applied, the
    document has too few words for it, so the text is the document's)."""

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
        return Variant(_joined([words[i] for i in kept], gaps, kept, n), edit)
    if edit == "swap":
        for _ in range(times):
            i = draws.below(n)
            j = (i + 1 + draws.below(n - 1)) % n
            words[i], words[j] = words[j], words[i]
        return Variant(_rebuilt(words, gaps), edit)
    for _ in range(times):
        word = words[draws.below(len(words))]
        place = draws.below(len(words) + 1)
        words.insert(place, word)
        # The new word takes the gap before its place; a single space goes between it and the
        # word it now precedes (or the text's end, whose own gap stays last).
        if place < len(words) - 1:
            gaps.insert(place + 1, " ")
        else:
            gaps.insert(place, " ")
    return Variant(_rebuilt(words, gaps), edit)


def _rebuilt(words: Sequence[str], gaps: Sequence[str]) -> str:
    """``gaps[0] words[0] gaps[1] ... words[-1] gaps[-1]`` (one more gap than words)."""
    out = [""] * (2 * len(words) + 1)
    out[0::2] = gaps
    out[1::2] = words
    return "".join(out)


def _joined(words: Sequence[str], gaps: Sequence[str], kept: Sequence[int], n: int) -> str:
    """The kept words, each followed by the gap that followed it, except the last kept word,
    followed by the text's final gap: the leading and trailing whitespace stay."""
    inner = [gaps[i + 1] for i in kept[:-1]]
    return _rebuilt(words, [gaps[0], *inner, gaps[n]])


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

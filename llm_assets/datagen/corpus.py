"""WikiText-2-like encyclopedia rows (:func:`generate_records`), with duplicates and foreign
paragraphs.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from llm_assets.datagen.grammar import STYLES, WIKITEXT, _grammar, _identity, to_wikitext
from llm_assets.datagen.templates import _DOMAINS, _EDIT_WORDS, _SUBSECTIONS, _article_title
from llm_assets.datagen.vocabulary import DEFAULT_LANGUAGES, LANGUAGES

KIND_HEADING = "heading"
KIND_PARAGRAPH = "paragraph"
KIND_DUPLICATE = "duplicate"
KIND_NEAR_DUPLICATE = "near_duplicate"
RECORD_KINDS: tuple[str, ...] = (KIND_HEADING, KIND_PARAGRAPH, KIND_DUPLICATE, KIND_NEAR_DUPLICATE)
"""Values of the ``kind`` field that ``generate_records(..., with_meta=True)`` adds."""

_CHUNK = 2048
"""Records generated per step. Fixed (independent of ``n``) so that the first ``n`` records of a
seed never depend on how many were asked for: a smaller corpus is a prefix of a larger one."""
_RING = 2048
"""Earlier paragraphs a duplicate may copy from."""
_SENTENCES_MU = 1.63
_SENTENCES_SIGMA = 0.62
_MAX_SENTENCES = 32
"""Paragraph length in sentences: log-normal (median ~3.7), capped: WikiText-2's long tail."""


@dataclass
class _Article:
    title: str
    name: str
    domain: int
    plan: deque[tuple[int, str]]
    """What comes next: (heading level, heading) or (0, "intro") / (0, "") for a paragraph."""


def _new_article(rnd: random.Random) -> _Article:
    domain_index = rnd.randrange(len(_DOMAINS))
    domain = _DOMAINS[domain_index]
    title, name = _article_title(domain.name, rnd)
    plan: deque[tuple[int, str]] = deque([(1, title), (0, "intro")])
    plan.extend((0, "") for _ in range(rnd.randint(0, 2)))
    n_sections = rnd.randint(2, min(6, len(domain.sections)))
    for index in sorted(rnd.sample(range(len(domain.sections)), n_sections)):
        plan.append((2, domain.sections[index]))
        if rnd.random() < 0.15:
            for sub in rnd.sample(_SUBSECTIONS, rnd.randint(1, 2)):
                plan.append((3, sub))
                plan.extend((0, "") for _ in range(rnd.randint(1, 4)))
        else:
            plan.extend((0, "") for _ in range(rnd.randint(1, 8)))
    return _Article(title, name, domain_index, plan)


def generate_records(
    n: int,
    seed: int = 0,
    *,
    languages: Sequence[str] = DEFAULT_LANGUAGES,
    foreign_fraction: float = 0.05,
    duplicate_fraction: float = 0.02,
    near_duplicate_share: float = 0.5,
    style: str = WIKITEXT,
    with_meta: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield ``n`` WikiText-2-like records ``{"text", "title", "id"}``, deterministically.

    Records are the lines of generated encyclopedia articles: a title heading, an introduction,
    sections with headings (``kind`` ``heading``, under 10 GPT-2 tokens) and paragraphs of one to
    ~30 sentences (mean ~440 characters over all records, a long tail to a few thousand).

    Args:
        n: number of records.
        seed: the same seed gives the same records; the first ``k`` records of ``n > k`` are the
            records of ``n = k``.
        languages: languages to write (:data:`LANGUAGES`). With ``"en"`` and others, a share
            ``foreign_fraction`` of the paragraphs is in one of the others; without ``"en"``
            every paragraph is in one of the given languages. Headings are always English.
        foreign_fraction: share of paragraphs in a language other than English.
        duplicate_fraction: share of records that copy an earlier paragraph (from the last
            2048): ``near_duplicate_share`` of them with a few words replaced, the rest exact.
            Below 1: a copy needs an original before it.
        near_duplicate_share: share of the duplicates that are near (edited) copies.
        style: :data:`WIKITEXT` (the raw WikiText-2 formatting) or :data:`PLAIN`.
        with_meta: also yield ``lang`` and ``kind`` (one of :data:`RECORD_KINDS`).
    """
    _check_fraction("foreign_fraction", foreign_fraction)
    _check_fraction("duplicate_fraction", duplicate_fraction)
    if duplicate_fraction == 1.0:
        raise ValueError(
            "duplicate_fraction must be below 1: every record would copy an earlier paragraph, "
            "and the first has none to copy"
        )
    _check_fraction("near_duplicate_share", near_duplicate_share)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    unknown = [code for code in languages if code not in LANGUAGES]
    if unknown or not languages:
        raise ValueError(f"languages must be a non-empty subset of {LANGUAGES}, got {languages}")
    foreign = tuple(code for code in dict.fromkeys(languages) if code != "en")
    if "en" not in languages:
        foreign_fraction = 1.0
    elif not foreign:
        foreign_fraction = 0.0
    return _records(
        n,
        seed,
        foreign,
        foreign_fraction,
        duplicate_fraction,
        near_duplicate_share,
        style,
        with_meta,
    )


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, got {value}")


def _records(
    n: int,
    seed: int,
    foreign: tuple[str, ...],
    foreign_fraction: float,
    duplicate_fraction: float,
    near_duplicate_share: float,
    style: str,
    with_meta: bool,
) -> Iterator[dict[str, Any]]:
    grammar = _grammar(style)
    wiki = style == WIKITEXT
    # headings and article names recur: format each once
    fmt = lru_cache(maxsize=4096)(to_wikitext) if wiki else _identity
    languages = ("en", *foreign)
    starts = np.array([grammar.language_templates[code][0] for code in languages])
    counts = np.array([grammar.language_templates[code][1] for code in languages])
    ring: deque[tuple[str, str, str]] = deque(maxlen=_RING)  # (text, title, lang)
    article: _Article | None = None
    done = 0
    chunk_index = 0
    while done < n:
        rng = np.random.default_rng([seed, chunk_index])
        rnd = _python_random(rng)
        draws = rng.random((_CHUNK, 4)).tolist()
        n_sentences = np.clip(
            np.rint(rng.lognormal(_SENTENCES_MU, _SENTENCES_SIGMA, _CHUNK)), 1, _MAX_SENTENCES
        ).astype(np.int64)

        # Pass 1: what each record is: (kind, heading level or language index, article, heading,
        # whether the paragraph opens its article).
        plan: list[tuple[str, int, _Article | None, str, bool]] = []
        for dup_draw, near_draw, foreign_draw, language_draw in draws:
            if dup_draw < duplicate_fraction:
                near = near_draw < near_duplicate_share
                plan.append((KIND_NEAR_DUPLICATE if near else KIND_DUPLICATE, 0, None, "", False))
                continue
            if article is None or not article.plan:
                article = _new_article(rnd)
            level, what = article.plan.popleft()
            if level:
                plan.append((KIND_HEADING, level, article, what, False))
                continue
            language = 0
            if foreign and foreign_draw < foreign_fraction:
                language = 1 + int(language_draw * len(foreign))
            plan.append((KIND_PARAGRAPH, language, article, "", what == "intro"))

        # Pass 2: every paragraph's sentences, template by template.
        paragraphs = [item for item in plan if item[0] == KIND_PARAGRAPH]
        lengths = n_sentences[[i for i, item in enumerate(plan) if item[0] == KIND_PARAGRAPH]]
        para_language = np.array([item[1] for item in paragraphs], dtype=np.int64)
        para_domain = np.array([item[2].domain for item in paragraphs], dtype=np.int64)
        para_name = np.array([fmt(item[2].name) for item in paragraphs], dtype=object)
        para_intro = np.array([item[4] for item in paragraphs], dtype=bool) & (para_language == 0)
        owner = np.repeat(np.arange(len(paragraphs)), lengths)
        sentence_language = para_language[owner]
        template_ids = starts[sentence_language] + (
            rng.random(len(owner)) * counts[sentence_language]
        ).astype(np.int64)
        offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
        template_ids[offsets[:-1][para_intro]] = grammar.intro_templates[para_domain[para_intro]]
        sentences = grammar.sentences(template_ids, para_domain[owner], para_name[owner], rng)
        bounds = offsets.tolist()

        # Pass 3: assemble in order; duplicates copy from the paragraphs that came before.
        paragraph_number = 0
        for (kind, detail, source, heading, _intro), draw in zip(plan, draws, strict=True):
            if done == n:
                break
            if kind == KIND_HEADING:
                text = _heading(fmt(heading), detail) if wiki else heading
                title, lang = source.title, "en"
            elif kind == KIND_PARAGRAPH:
                start, end = bounds[paragraph_number], bounds[paragraph_number + 1]
                body = " ".join(sentences[start:end])
                paragraph_number += 1
                text = f" {body} \n" if wiki else body
                title, lang = source.title, languages[detail]
                ring.append((text, title, lang))
            elif ring:
                text, title, lang = ring[int(draw[2] * len(ring))]
                if kind == KIND_NEAR_DUPLICATE:
                    text = _edit_words(text, rnd)
            else:
                continue  # nothing to copy yet: no record
            record: dict[str, Any] = {"text": text, "title": title, "id": f"wiki-{seed}-{done:08d}"}
            if with_meta:
                record["lang"] = lang
                record["kind"] = kind
            yield record
            done += 1
        chunk_index += 1


def _heading(text: str, level: int) -> str:
    """A WikiText heading line: level 1 `` = Title = \\n``, level 2 `` = = Section = = \\n``."""
    marks = " ".join("=" * level)
    return f" {marks} {text} {marks} \n"


def _python_random(rng: np.random.Generator) -> random.Random:
    """A stdlib generator seeded from ``rng``, for the per-article and per-edit choices."""
    return random.Random(int(rng.integers(0, 2**63)))


def _edit_words(text: str, rnd: random.Random) -> str:
    """A near duplicate of ``text``: about one word in fifty (at least one) replaced."""
    words = text.split(" ")
    candidates = [i for i, word in enumerate(words) if len(word) > 3 and word.isalpha()]
    if not candidates:
        words.insert(min(1, len(words)), rnd.choice(_EDIT_WORDS))
        return " ".join(words)
    for index in rnd.sample(candidates, max(1, len(candidates) // 50)):
        replacement = rnd.choice(_EDIT_WORDS)
        while replacement == words[index]:
            replacement = rnd.choice(_EDIT_WORDS)
        words[index] = replacement
    return " ".join(words)

"""Text styles and the template engine: fill sentence templates, format text as WikiText."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from llm_assets.datagen.templates import (
    _DOMAIN_INTROS,
    _DOMAINS,
    _ENGLISH_SLOTS,
    _ENGLISH_TEMPLATES,
    _FOREIGN_SLOTS,
    _FOREIGN_TEMPLATES,
    _INTRO_SLOTS,
)

WIKITEXT = "wikitext"
"""Text style of the raw WikiText-2 files: `` = Title = `` headings, spaced punctuation, ``@-@``."""
PLAIN = "plain"
"""Ordinary prose: headings are the bare heading text, punctuation as written."""
STYLES: tuple[str, ...] = (WIKITEXT, PLAIN)

# --- WikiText formatting -------------------------------------------------------------------------
_WIKI_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<=\w)-(?=\w)"), " \x01 "),  # hyphen inside a word
    (re.compile(r"(?<=\d),(?=\d)"), " \x02 "),  # thousands separator
    (re.compile(r"(?<=\d)\.(?=\d)"), " \x03 "),  # decimal point
    (re.compile(r'([,;:()"$£])'), r" \1 "),
    (re.compile(r"(?<!\b[A-Z])\.(?=\s|$)"), " ."),  # full stop, not an initial like "U.S."
    (re.compile(r"'s\b"), " 's"),
)
_WIKI_MARKERS = str.maketrans({"\x01": "@-@", "\x02": "@,@", "\x03": "@.@"})


def to_wikitext(text: str) -> str:
    """Format ``text`` the way the raw WikiText files are tokenized: punctuation set off by
    spaces, ``@-@``/``@,@``/``@.@`` inside words and numbers, single spaces. Template
    placeholders (``{SLOT}``) pass through unchanged."""
    for pattern, replacement in _WIKI_RULES:
        text = pattern.sub(replacement, text)
    return " ".join(text.split()).translate(_WIKI_MARKERS)


# --- the template engine --------------------------------------------------------------------------
_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
_DOMAIN_SLOTS = ("SUBJ", "SUBJ_L", "DNOUN")
_ZIPF_SLOTS = frozenset({"NOUN", "NOUNS", "A_NOUN", "ADJ", "A_ADJ", "VPAST", "VPP"})
"""Slots whose words are drawn with Zipf-like frequencies (list order = rank) as in real text."""


@dataclass(frozen=True)
class _Template:
    fmt: str
    """The sentence with ``%s`` where the slots go."""
    slots: tuple[str, ...]


@dataclass(frozen=True)
class _Slot:
    values: np.ndarray
    cumulative: np.ndarray | None
    """Cumulative probabilities ending at 1.0; None for a uniform draw."""


class _Grammar:
    """Every template and word list of one text style, compiled once per process."""

    def __init__(self, style: str) -> None:
        self.style = style
        fmt = to_wikitext if style == WIKITEXT else _identity
        self.slots: dict[str, _Slot] = {}
        for name, values in (*_ENGLISH_SLOTS.items(), *_INTRO_SLOTS.items()):
            self.slots[name] = _slot([fmt(v) for v in values], zipf=name in _ZIPF_SLOTS)
        for code, slots in _FOREIGN_SLOTS.items():
            for name, values in slots.items():
                self.slots[f"{code}.{name}"] = _slot([fmt(v) for v in values], zipf=False)
        # Domain-specific slots: one row per domain, padded; only the first counts[d] are drawn.
        tables = {
            "SUBJ": [d.subjects for d in _DOMAINS],
            "SUBJ_L": [tuple(_lower_first(s) for s in d.subjects) for d in _DOMAINS],
            "DNOUN": [d.nouns for d in _DOMAINS],
        }
        self.domain_slots: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name, rows in tables.items():
            width = max(len(row) for row in rows)
            table = np.full((len(rows), width), "", dtype=object)
            for d, row in enumerate(rows):
                table[d, : len(row)] = [fmt(v) for v in row]
            self.domain_slots[name] = (table, np.array([len(row) for row in rows]))
        self.templates: list[_Template] = []
        self.language_templates: dict[str, tuple[int, int]] = {}
        for code, templates in (("en", _ENGLISH_TEMPLATES), *_FOREIGN_TEMPLATES.items()):
            self.language_templates[code] = self._add(templates)
        self.intro_templates = np.array(
            [self._add((_DOMAIN_INTROS[d.name],))[0] for d in _DOMAINS], dtype=np.int64
        )

    def _add(self, templates: Sequence[str]) -> tuple[int, int]:
        start = len(self.templates)
        for template in templates:
            text = to_wikitext(template) if self.style == WIKITEXT else template
            parts = _SLOT.split(text)
            fmt = "%s".join(part.replace("%", "%%") for part in parts[0::2])
            self.templates.append(_Template(fmt, tuple(parts[1::2])))
        return start, len(templates)

    def draw(self, name: str, rng: np.random.Generator, domains: np.ndarray) -> np.ndarray:
        """Words for slot ``name`` of ``len(domains)`` sentences (``domains``: each one's)."""
        m = len(domains)
        slot = self.slots.get(name)
        if slot is not None:
            if slot.cumulative is None:
                return slot.values[rng.integers(0, len(slot.values), m)]
            return slot.values[np.searchsorted(slot.cumulative, rng.random(m), side="right")]
        table, counts = self.domain_slots[name]
        return table[domains, (rng.random(m) * counts[domains]).astype(np.int64)]

    def sentences(
        self,
        template_ids: np.ndarray,
        domains: np.ndarray,
        names: np.ndarray,
        rng: np.random.Generator,
    ) -> list[str]:
        """Fill one template per sentence, all sentences of a template at once."""
        out: list[str] = [""] * len(template_ids)
        order = np.argsort(template_ids, kind="stable")
        ordered = template_ids[order]
        cuts = np.flatnonzero(np.diff(ordered)) + 1
        for start, end in zip(
            np.r_[0, cuts].tolist(), np.r_[cuts, len(ordered)].tolist(), strict=True
        ):
            positions = order[start:end]
            template = self.templates[int(ordered[start])]
            group_domains = domains[positions]
            columns = [
                (names[positions] if slot == "NAME" else self.draw(slot, rng, group_domains))
                for slot in template.slots
            ]
            fmt = template.fmt
            if columns:
                filled = [fmt % row for row in zip(*(c.tolist() for c in columns), strict=True)]
            else:
                filled = [fmt] * (end - start)
            for position, sentence in zip(positions.tolist(), filled, strict=True):
                out[position] = sentence
        return out


def _identity(text: str) -> str:
    return text


def _lower_first(text: str) -> str:
    return text[0].lower() + text[1:]


def _slot(values: list[str], zipf: bool) -> _Slot:
    array = np.array(values, dtype=object)
    if not zipf:
        return _Slot(array, None)
    weights = 1.0 / np.arange(1, len(values) + 1) ** 0.8
    cumulative = np.cumsum(weights) / weights.sum()
    cumulative[-1] = 1.0
    return _Slot(array, cumulative)


@cache
def _grammar(style: str) -> _Grammar:
    return _Grammar(style)

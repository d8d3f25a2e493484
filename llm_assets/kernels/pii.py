"""PII redaction and rejection, run in the normalize stage on text before tokenization.

Kinds (:data:`PII_KINDS`) and their typed placeholders:

``email``        ``<EMAIL>``        ``name.surname+tag@mail.example.co.uk``, internationalized
                                    (RFC 6531) too: ``jörg.schmidt@müller.de``, ``用户@例子.广告``
                                    (letters, marks and digits of any script in the local part
                                    and the domain; the domain needs a dot and a top-level
                                    domain of 2+ letters or ``xn--`` punycode, so ``user@host``,
                                    ``@mention`` and ``a@b`` stay). In text without spaces
                                    (Chinese, Japanese) the letters glued before the address are
                                    taken with it: over-redaction rather than a leak
``iban``         ``<IBAN>``         ``DE89 3704 0044 0532 0130 00`` (ISO 13616 mod-97 checked)
``credit_card``  ``<CREDIT_CARD>``  13-19 digits starting 2-6 (the issuers' ranges, so ISBN-13s
                                    starting 978/979 are never candidates), contiguous or in groups
                                    of four (or Amex's 4-6-5) split by single spaces, no-break
                                    spaces (``&nbsp;``) or dashes; Luhn-valid only
``us_ssn``       ``<US_SSN>``       ``123-45-6789`` minus the ranges never issued (000, 666, 9xx,
                                    group 00, serial 0000)
``ip_address``   ``<IP_ADDRESS>``   IPv4 with octets 0-255 (not inside a longer dotted number such
                                    as a version ``1.2.3.4.5``), IPv6 full or ``::``-compressed
                                    (checked with :mod:`ipaddress`, and must contain a digit, so
                                    ``Bad::Add`` in C++ stays)
``phone``        ``<PHONE>``        international ``+CC ...`` and North-American ``(555) 123-4567``,
                                    ``555-123-4567``, ``555.123.4567``, ``1-800-555-0199``, groups
                                    split by spaces, no-break spaces (U+00A0, U+2007, U+202F: the
                                    usual typography of ``+33 1 23 45 67 89``), dots or dashes;
                                    the ``+`` must not follow a letter or digit (``GMT+1 2023``);
                                    never a plain year, price, date or unseparated number

Kinds are applied in that order, each on the previous one's output, so a card number inside an
IBAN or a phone-like run inside a card is taken by the more specific kind, and placeholders
(``<``, ``>``, capitals, ``_``: no digit or ``@``) are never matched again. A replacement can
create a new match (an e-mail glued to a card number: the card gains a word boundary), so rows
with any redaction are redacted again until nothing changes; every match removes a digit or an
``@`` and placeholders add none, so this ends.

Speed: one RE2 pass over every row finds the rows that hold any candidate at all (few, in normal
text); only those rows are rewritten, with Arrow's RE2 kernels for the regex-only kinds and
Python only for the candidates of the checksum-validated kinds (card, IBAN, IPv6).

Modes (:class:`PiiSpec`): ``redact`` keeps every row and adds an int32 ``pii_redactions`` column;
``reject`` also redacts, and drops rows whose matches per whitespace word of the text exceed
``max_density`` (reason ``pii_density``; the reject's sample is the redacted text, so rejects do
not leak PII either); ``off`` passes the table through.

The ``metadata`` column (the record's other fields as a JSON object) is redacted too: SFT renders
its training prompts from those fields. Every string value, at any depth, is redacted like a text
(key names, numbers, booleans and nulls are left alone) and its redactions are added to
``pii_redactions``. Density (``reject``) is the text's alone: it measures whether the document's
prose is a contact list or a dump, and metadata words are no prose. One RE2 pass over the JSON
finds the few rows with a candidate; only those are parsed, so null or ``{}`` metadata costs
nothing.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.kernels.schema import (
    METADATA,
    TEXT,
    StageResult,
    drop_rows,
    empty_rejects,
    string_array,
)

PII_STAGE = "normalize"
"""PII handling runs inside the normalize stage; its rejects carry that stage name."""
PII_DENSITY = "pii_density"
PII_REDACTIONS = "pii_redactions"
PII_MODES = ("redact", "reject", "off")

PII_KINDS = ("email", "phone", "ip_address", "credit_card", "iban", "us_ssn")
"""Every kind :func:`redact_pii` knows, in the order reject values list them."""
PLACEHOLDERS = {kind: f"<{kind.upper()}>" for kind in PII_KINDS}
_ORDER = ("email", "iban", "credit_card", "us_ssn", "ip_address", "phone")
"""Application order: the most specific pattern first."""
_MAX_PASSES = 10

# --- patterns ---------------------------------------------------------------------------------
# Written in the syntax RE2 (Arrow) and Python's ``re`` (with re.ASCII) share: ``\b`` is an ASCII
# word boundary in both, no lookaround. The exception is EMAIL_PATTERN, which needs Unicode
# classes (``\p{L}``: RE2 and the ``regex`` package, not ``re``); it is only ever run by RE2.
_EMAIL_CHAR = r"\p{L}\p{M}\p{N}"
"""Letters, combining marks (an NFD accent, Indic vowel signs) and digits of any script."""
EMAIL_PATTERN = (
    rf"[{_EMAIL_CHAR}._%+-]+@(?:[{_EMAIL_CHAR}-]+\.)+"
    rf"(?:xn--[0-9A-Za-z-]+|\p{{L}}[\p{{L}}\p{{M}}]+)"
)
"""RFC 5321 atoms widened as RFC 6531 and IDNA allow (Unicode letters and digits in the local part
and the domain labels); the top-level domain is 2+ letters of any script or ``xn--`` punycode."""
_NBSP = "\u00a0\u2007\u202f"
"""The no-break spaces (literal characters, so RE2 and ``re`` read them alike): typographers and
``&nbsp;`` put them inside phone and card numbers to keep them on one line."""
_SSN_AREA = r"(?:00[1-9]|0[1-9][0-9]|[1-578][0-9]{2}|6[0-57-9][0-9]|66[0-57-9])"
_SSN_SERIAL = r"(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
US_SSN_PATTERN = rf"\b{_SSN_AREA}-(?:0[1-9]|[1-9][0-9])-{_SSN_SERIAL}\b"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
IPV4_PATTERN = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
# RE2 has no lookaround: the characters around an IPv4 are matched (and written back) so that a
# dotted number of five or more parts, or one glued to letters, is not an address.
_IPV4_GUARDED = rf"(^|[^0-9A-Za-z_.])({IPV4_PATTERN})($|[^0-9A-Za-z_.]|\.$|\.[^0-9A-Za-z_])"
_HEX = r"[0-9A-Fa-f]{1,4}"
IPV6_PATTERN = rf"\b(?:{_HEX}:){{7}}{_HEX}\b|\b(?:{_HEX}:){{1,6}}:(?:{_HEX}(?::{_HEX}){{0,5}})?"
_PHONE_SEP = f"[ .{_NBSP}-]"
# ``\B\+``: the ``+`` does not follow a letter, digit or ``_`` (``GMT+1 2023 2024`` is no phone).
_PHONE_INTL = (
    rf"\B\+[1-9][0-9]{{0,2}}(?:{_PHONE_SEP}?\(?[0-9]{{1,4}}\)?)?"
    rf"(?:{_PHONE_SEP}?[0-9]{{2,8}}){{2,4}}\b"
)
_PHONE_NA = (
    rf"(?:\b1{_PHONE_SEP}?)?(?:\([0-9]{{3}}\){_PHONE_SEP}?|\b[0-9]{{3}}{_PHONE_SEP})"
    rf"[0-9]{{3}}{_PHONE_SEP}[0-9]{{4}}\b"
)
PHONE_PATTERN = f"{_PHONE_INTL}|{_PHONE_NA}"
IBAN_PATTERN = r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"
_CARD_SEP = f"[ {_NBSP}-]"
CARD_CANDIDATE_PATTERN = rf"[2-6](?:{_CARD_SEP}?[0-9]){{12,18}}"
"""Any 13-19 digits starting 2-6 with single separators: a superset of what the card check
accepts, used to find the few rows worth checking in Python."""
_DIGIT_RUN = re.compile(rf"\b[0-9]+(?:{_CARD_SEP}[0-9]+)*\b", re.ASCII)

_REGEX_KINDS: dict[str, tuple[str, str]] = {
    "email": (EMAIL_PATTERN, PLACEHOLDERS["email"]),
    "us_ssn": (US_SSN_PATTERN, PLACEHOLDERS["us_ssn"]),
    "phone": (PHONE_PATTERN, PLACEHOLDERS["phone"]),
}
"""Kinds a regex alone decides: rewritten with Arrow's RE2 kernel."""


@dataclass(frozen=True)
class PiiSpec:
    """What the normalize stage does with personal data.

    ``reject`` drops documents with more than ``max_density`` matches per whitespace-separated
    word (a contact list or a dump is not prose worth training on) and redacts the rest, so no
    kept document leaks PII; ``redact`` keeps every document; ``off`` does nothing.
    """

    mode: Literal["redact", "reject", "off"] = field(
        default="redact",
        metadata={
            "doc": "redact: replace emails, phones, IPs, cards, IBANs, SSNs with <EMAIL>-style "
            "placeholders (counts in pii_redactions); reject: drop documents denser than "
            "pii_max_density (the rest are redacted); off"
        },
    )
    kinds: tuple[str, ...] = field(
        default=PII_KINDS, metadata={"doc": "Which kinds of PII to look for"}
    )
    max_density: float = field(default=0.05, metadata={"doc": "reject mode: PII matches per word"})

    def __post_init__(self) -> None:
        # Messages name the settings as normalized_documents' config spells them (pii,
        # pii_kinds, pii_max_density): that is where a user sets them.
        if self.mode not in PII_MODES:
            raise ValueError(f"pii (the mode) must be one of {PII_MODES}, got {self.mode!r}")
        kinds = (self.kinds,) if isinstance(self.kinds, str) else tuple(self.kinds)
        unknown = [k for k in kinds if k not in PII_KINDS]
        if unknown:
            raise ValueError(f"pii_kinds has unknown kinds {unknown}; known kinds are {PII_KINDS}")
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"pii_kinds lists a kind twice: {kinds}")
        if not kinds and self.mode != "off":
            raise ValueError("pii_kinds must name at least one kind (or turn pii off)")
        if not self.max_density >= 0:
            raise ValueError(f"pii_max_density must be >= 0, got {self.max_density}")
        object.__setattr__(self, "kinds", kinds)


# --- validated kinds (Python on candidate rows only) ------------------------------------------
def luhn_valid(digits: str) -> bool:
    """Whether a digit string passes the Luhn checksum every payment card number carries."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        d = ord(char) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_shape(sizes: list[int]) -> bool:
    """Groupings cards are printed in: one run, fours (the last 1-4), Amex 4-6-5, Diners 4-6-4."""
    if len(sizes) == 1:
        return True
    if sizes[0] == 4 and sizes[1] == 6 and len(sizes) == 3:
        return sizes[2] in (4, 5)
    return all(s == 4 for s in sizes[:-1]) and 1 <= sizes[-1] <= 4


_MAX_CARD_GROUPS = 5
"""The most groups a card number is printed in (:func:`_card_shape`: fours with a last group of
1-4, at most 19 digits, so 4-4-4-4-3)."""


def _redact_cards(text: str) -> str:
    """Replace every Luhn-valid card number inside each run of separated digits.

    Works on whole runs rather than the regex's match, so a card followed by more numbers
    (``4111 1111 1111 1111 2024``) is still found: scanning left to right, a valid 4-4-4-4 span
    wins, else the longest valid span."""
    pieces: list[str] = []
    last = 0
    for run in _DIGIT_RUN.finditer(text):
        groups = [(m.start(), m.end()) for m in re.finditer(r"[0-9]+", run.group())]
        i = 0
        while i < len(groups):
            # The common 4-4-4-4 first (a card followed by more numbers), then longest first. No
            # card shape spans more than _MAX_CARD_GROUPS groups, so the spans tried from one
            # group are few: linear in the run (a table of 800 numbers took 9 s, cubic).
            longest = min(len(groups), i + _MAX_CARD_GROUPS)
            ends = [i + 4, *range(longest, i, -1)] if i + 4 <= len(groups) else None
            for j in ends or range(longest, i, -1):
                span = groups[i:j]
                sizes = [b - a for a, b in span]
                digits = "".join(run.group()[a:b] for a, b in span)
                if (
                    13 <= len(digits) <= 19
                    and digits[0] in "23456"
                    and _card_shape(sizes)
                    and luhn_valid(digits)
                ):
                    pieces.append(text[last : run.start() + span[0][0]])
                    pieces.append(PLACEHOLDERS["credit_card"])
                    last = run.start() + span[-1][1]
                    i = j
                    break
            else:
                i += 1
    pieces.append(text[last:])
    return "".join(pieces)


def iban_valid(candidate: str) -> bool:
    """ISO 13616: 15-34 characters, letters as 10-35, moved check digits, remainder 1 mod 97."""
    compact = candidate.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


_IBAN_RE = re.compile(IBAN_PATTERN, re.ASCII)


def _iban_sub(match: re.Match[str]) -> str:
    text = match.group()
    # The regex may take a following capitalized group of 1-4 characters; try shorter prefixes.
    for end in range(len(text), 14, -1):
        if text[end - 1] != " " and iban_valid(text[:end]):
            return PLACEHOLDERS["iban"] + text[end:]
    return text


def _redact_ibans(text: str) -> str:
    return _IBAN_RE.sub(_iban_sub, text)


_IPV6_RE = re.compile(IPV6_PATTERN, re.ASCII)


def _ipv6_sub(match: re.Match[str]) -> str:
    text = match.group()
    if not any(c.isdigit() for c in text):
        return text
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return text
    return PLACEHOLDERS["ip_address"]


def _redact_ipv6(text: str) -> str:
    return _IPV6_RE.sub(_ipv6_sub, text)


# --- passes -----------------------------------------------------------------------------------
def _python_rows(texts: pa.Array, prefilter: str, rewrite: Callable[[str], str]) -> pa.Array:
    """Rewrite with ``rewrite`` only the rows where RE2 finds ``prefilter``."""
    hit = pc.fill_null(pc.match_substring_regex(texts, prefilter), False)
    rows = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
    if rows.size == 0:
        return texts
    new = [rewrite(t) for t in texts.take(pa.array(rows)).to_pylist()]
    return pc.replace_with_mask(texts, hit, pa.array(new, texts.type))


def _apply_kind(texts: pa.Array, kind: str) -> pa.Array:
    if kind in _REGEX_KINDS:
        pattern, placeholder = _REGEX_KINDS[kind]
        return pc.replace_substring_regex(texts, pattern, placeholder)
    if kind == "credit_card":
        return _python_rows(texts, CARD_CANDIDATE_PATTERN, _redact_cards)
    if kind == "iban":
        return _python_rows(texts, IBAN_PATTERN, _redact_ibans)
    # ip_address: IPv6 first (checked in Python), then IPv4 with its written-back guards.
    texts = _python_rows(texts, IPV6_PATTERN, _redact_ipv6)
    return pc.replace_substring_regex(texts, _IPV4_GUARDED, rf"\1{PLACEHOLDERS['ip_address']}\3")


def _placeholder_counts(texts: pa.Array, kind: str) -> np.ndarray:
    counts = pc.fill_null(pc.count_substring(texts, PLACEHOLDERS[kind]), 0)
    return counts.to_numpy(zero_copy_only=False).astype(np.int32)


def _redact_pass(texts: pa.Array, kinds: Sequence[str]) -> tuple[pa.Array, dict[str, np.ndarray]]:
    """One pass of every kind in :data:`_ORDER`; counts are placeholders added per row."""
    counts: dict[str, np.ndarray] = {}
    for kind in _ORDER:
        if kind not in kinds:
            continue
        before = _placeholder_counts(texts, kind)
        texts = _apply_kind(texts, kind)
        counts[kind] = _placeholder_counts(texts, kind) - before
    return texts, counts


_EMAIL_CANDIDATE = r"(?:[A-Za-z0-9._%+-]|[^\x00-\x7f])@(?:[A-Za-z0-9-]|[^\x00-\x7f])"
"""An ``@`` between a character an email's local part may end with and one its domain may start
with: a superset of EMAIL_PATTERN's matches, for finding candidate rows. RE2 runs EMAIL_PATTERN's
Unicode classes several times slower per row than this (and a bare ``@`` would make every row of
WikiText, with its `` @-@ ``, a candidate)."""


def _any_pattern(kinds: Sequence[str]) -> str:
    """One RE2 alternation that matches in every row any kind could change (a superset: emails
    by :data:`_EMAIL_CANDIDATE`)."""
    parts = {
        "email": _EMAIL_CANDIDATE,
        "iban": IBAN_PATTERN,
        "credit_card": CARD_CANDIDATE_PATTERN,
        "us_ssn": US_SSN_PATTERN,
        "ip_address": f"{IPV4_PATTERN}|{IPV6_PATTERN}",
        "phone": PHONE_PATTERN,
    }
    return "|".join(f"(?:{parts[k]})" for k in _ORDER if k in kinds)


def _candidates(texts: pa.Array, kinds: Sequence[str]) -> np.ndarray:
    """Per row (bool): may any kind change it? (Null rows: no.)"""
    hit = pc.match_substring_regex(texts, _any_pattern(kinds))
    return pc.fill_null(hit, False).to_numpy(zero_copy_only=False)


_DIGIT_OR_AT = bytes(1 if chr(b) in "0123456789@" else 0 for b in range(256))
"""Byte table: 1 for an ASCII digit or ``@``, else 0."""


def _rows_with_digit_or_at(texts: pa.Array) -> np.ndarray:
    """Per row (bool): does it hold an ASCII digit or an ``@``? Every PII match holds one (as does
    any JSON escape of one, ``\\u0040``), so other rows need no regex. One ``bytes.translate`` and
    one ``np.maximum.reduceat`` over the UTF-8 bytes; null and empty rows are false."""
    wide = pa.types.is_large_string(texts.type)
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64 if wide else np.int32)
    offsets = offsets[texts.offset : texts.offset + len(texts) + 1].astype(np.int64)
    out = np.zeros(len(texts), bool)
    start, stop = int(offsets[0]), int(offsets[-1])
    if stop == start:
        return out
    flagged = np.frombuffer(
        texts.buffers()[2][start:stop].to_pybytes().translate(_DIGIT_OR_AT), np.uint8
    )
    offsets -= start
    nonempty = np.flatnonzero(offsets[1:] > offsets[:-1])
    out[nonempty] = np.maximum.reduceat(flagged, offsets[nonempty]) > 0
    return out


def _redact(
    texts: pa.Array | pa.ChunkedArray | Sequence[str], kinds: Sequence[str] = PII_KINDS
) -> tuple[pa.Array, dict[str, np.ndarray]]:
    """Redacted texts and the redactions per kind per row (int32), to a fixed point."""
    for kind in kinds:
        if kind not in PII_KINDS:
            raise ValueError(f"unknown pii kind {kind!r}; known kinds are {PII_KINDS}")
    array = string_array(texts)
    n = len(array)
    counts = {k: np.zeros(n, np.int32) for k in PII_KINDS if k in kinds}
    if n == 0 or not kinds:
        return array, counts
    any_pattern = _any_pattern(kinds)
    candidate = _candidates(array, kinds)
    rows = np.flatnonzero(candidate)
    hit = pa.array(candidate)
    if rows.size == 0:
        return array, counts
    work = array.take(pa.array(rows))
    active = np.arange(rows.size)  # positions in ``work`` still changing
    for _ in range(_MAX_PASSES):
        sub = work if active.size == rows.size else work.take(pa.array(active))
        sub, sub_counts = _redact_pass(sub, kinds)
        changed = np.zeros(active.size, bool)
        for kind, c in sub_counts.items():
            counts[kind][rows[active]] += c
            changed |= c > 0
        if active.size == rows.size:
            work = sub
        else:
            mask = np.zeros(rows.size, bool)
            mask[active] = True
            work = pc.replace_with_mask(work, pa.array(mask), sub)
        # Only a row that changed and still holds a candidate can change again.
        if changed.any():
            still = pc.match_substring_regex(sub.filter(pa.array(changed)), any_pattern)
            active = active[changed][pc.fill_null(still, False).to_numpy(zero_copy_only=False)]
        else:
            active = active[changed]
        if active.size == 0:
            break
    return pc.replace_with_mask(array, hit, work), counts


# --- metadata ---------------------------------------------------------------------------------
_JSON_ESCAPE = r"\\(?:u[0-9A-Fa-f]{4}|.)"
"""One JSON string escape (``\\n``, ``\\"``, ``\\u00e9``...)."""


def _metadata_candidates(metadata: pa.Array, kinds: Sequence[str]) -> np.ndarray:
    """Rows of a metadata (JSON text) array whose string values may hold a match.

    Only rows with a digit or an ``@`` can (:func:`_rows_with_digit_or_at`; a JSON escape of
    either holds digits too): null and ``{}`` metadata cost one numpy pass. Those rows are
    searched (:func:`_candidates`) in the JSON text itself: the quotes, colons and commas around a
    value stand where the value's start and end would, and no pattern takes them in, so a match in
    a value is a match in the JSON. Escapes are the exception (``call\\n555-123-4567`` hides the
    phone's word boundary behind the ``n``): rows with a backslash are searched again with every
    escape replaced by a space (no pattern takes in a space it would not take in for the escaped
    character), and rows with a ``\\u`` escape are always candidates (``jos\\u00e9@...``: the
    escaped letter belongs to the address)."""
    rows = np.flatnonzero(_rows_with_digit_or_at(metadata))
    if rows.size == 0:
        return rows
    some = metadata.take(pa.array(rows))
    hit = _candidates(some, kinds)
    escaped = pc.fill_null(pc.match_substring(some, "\\"), False)
    escaped_at = np.flatnonzero(escaped.to_numpy(zero_copy_only=False) & ~hit)
    if escaped_at.size:
        more = some.take(pa.array(escaped_at))
        blanked = pc.replace_substring_regex(more, _JSON_ESCAPE, " ")
        found = _candidates(blanked, kinds) | pc.fill_null(
            pc.match_substring(more, "\\u"), False
        ).to_numpy(zero_copy_only=False)
        hit[escaped_at[found]] = True
    return rows[hit]


_TEXT_NUMBERS_UNDER = "arguments"
"""The object key under which numbers are redacted as texts are: a tool call's arguments,
which templates write into the prompt and the learned tokens as text (a card number given as a
JSON number). Other numbers of the metadata (ids, counts) are data, left alone."""


def _json_strings(value: object, out: list[str], numbers: bool = False) -> None:
    """Append every string value inside a parsed JSON value (object values, list items, at any
    depth; not object keys) to ``out``, in document order; with ``numbers`` (under
    :data:`_TEXT_NUMBERS_UNDER`), every integer's text too."""
    if isinstance(value, str):
        out.append(value)
    elif numbers and isinstance(value, int) and not isinstance(value, bool):
        out.append(str(value))
    elif isinstance(value, dict):
        for key, item in value.items():
            _json_strings(item, out, numbers or key == _TEXT_NUMBERS_UNDER)
    elif isinstance(value, list):
        for item in value:
            _json_strings(item, out, numbers)


def _json_replace_strings(value: object, new: Iterator[str], numbers: bool = False) -> object:
    """``value`` with its string values replaced, in :func:`_json_strings` order, from ``new``
    (an integer by its redacted text when redacting changed it)."""
    if isinstance(value, str):
        return next(new)
    if numbers and isinstance(value, int) and not isinstance(value, bool):
        text = next(new)
        return value if text == str(value) else text
    if isinstance(value, dict):
        return {
            key: _json_replace_strings(item, new, numbers or key == _TEXT_NUMBERS_UNDER)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_json_replace_strings(item, new, numbers) for item in value]
    return value


def redact_metadata(
    metadata: pa.Array | pa.ChunkedArray | Sequence[str | None], kinds: Sequence[str] = PII_KINDS
) -> tuple[pa.Array, np.ndarray]:
    """Redact PII in the string values of JSON metadata (one JSON text, or null, per row).

    Every string value at any depth is redacted like a text (:func:`redact_pii`), and so are the
    integers of a tool call's arguments (:data:`_TEXT_NUMBERS_UNDER`); object keys, other
    numbers, booleans and nulls are left alone. A row with a redaction is written back as compact
    JSON (non-ASCII unescaped, as ingest writes it); every other row keeps its exact text, and so
    does a row that is not valid JSON (nothing can render a prompt from it either). Returns the
    metadata and the redactions per row (int32). Only the rows :func:`_metadata_candidates`
    picks are parsed: null, ``{}`` or PII-free metadata costs one RE2 pass."""
    array = string_array(metadata)
    total = np.zeros(len(array), np.int32)
    if len(array) == 0 or array.null_count == len(array):
        return array, total
    rows = _metadata_candidates(array, kinds)
    if rows.size == 0:
        return array, total
    parsed: list[tuple[int, object]] = []
    strings: list[str] = []
    owner: list[int] = []
    for row, raw in zip(rows.tolist(), array.take(pa.array(rows)).to_pylist(), strict=True):
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        before = len(strings)
        _json_strings(value, strings)
        owner.extend([row] * (len(strings) - before))
        parsed.append((row, value))
    if not strings:
        return array, total
    redacted, counts = redact_pii(strings, kinds)
    np.add.at(total, np.array(owner, np.int64), counts)
    new_strings = iter(redacted.to_pylist())
    changed = np.zeros(len(array), bool)
    rewritten: list[str] = []
    for row, value in parsed:
        value = _json_replace_strings(value, new_strings)
        if total[row]:
            changed[row] = True
            rewritten.append(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    if not rewritten:
        return array, total
    return pc.replace_with_mask(array, pa.array(changed), pa.array(rewritten, array.type)), total


# --- public API -------------------------------------------------------------------------------
def find_pii(
    texts: pa.Array | pa.ChunkedArray | Sequence[str], kinds: Sequence[str] = PII_KINDS
) -> dict[str, np.ndarray]:
    """Count the PII matches of each kind in each text (int32 arrays, one per kind in ``kinds``).

    The counts are those :func:`redact_pii` would replace (kinds applied in priority order, so a
    card inside an IBAN counts once, as an IBAN); ``find_pii`` of redacted text is all zeros."""
    return _redact(texts, kinds)[1]


def redact_pii(
    texts: pa.Array | pa.ChunkedArray | Sequence[str], kinds: Sequence[str] = PII_KINDS
) -> tuple[pa.Array, np.ndarray]:
    """Replace every PII match of ``kinds`` with its typed placeholder (``<EMAIL>``, ...).

    Returns the redacted texts and the number of redactions per text (int32)."""
    out, counts = _redact(texts, kinds)
    total = np.zeros(len(out), np.int32)
    for c in counts.values():
        total += c
    return out, total


def pii_kernel(table: pa.Table, spec: PiiSpec) -> StageResult:
    """Redact (and in ``reject`` mode, filter) the ``text`` column of one batch, and the string
    values of its ``metadata`` JSON when it has that column (:func:`redact_metadata`).

    Adds the int32 column ``pii_redactions`` to kept rows (not in ``off`` mode): the text's
    redactions plus the metadata's. Rejected rows get reason ``pii_density`` and a value like
    ``0.083 (email=2, phone=1)``: the text's matches per word of the text, with the counts behind
    it (metadata is not counted: it is no prose)."""
    if spec.mode == "off":
        return StageResult(table, empty_rejects())
    redacted, counts = _redact(table.column(TEXT), spec.kinds)
    total = np.zeros(table.num_rows, np.int32)
    for c in counts.values():
        total += c
    index = table.schema.get_field_index(TEXT)
    out = table.set_column(index, table.schema.field(TEXT), redacted)
    in_metadata = np.zeros(table.num_rows, np.int32)
    if METADATA in table.column_names:
        metadata, in_metadata = redact_metadata(table.column(METADATA), spec.kinds)
        if in_metadata.any():
            index = table.schema.get_field_index(METADATA)
            out = out.set_column(index, table.schema.field(METADATA), metadata)
    out = out.append_column(
        pa.field(PII_REDACTIONS, pa.int32()), pa.array(total + in_metadata, pa.int32())
    )
    if spec.mode == "redact":
        return StageResult(out, empty_rejects())
    density = np.zeros(table.num_rows, np.float64)
    rows = np.flatnonzero(total)
    if rows.size:
        # Words of the original text (a placeholder may stand for several).
        originals = string_array(table.column(TEXT)).take(pa.array(rows))
        # Trimmed first: pyarrow 26's split sometimes keeps trailing non-ASCII whitespace.
        tokens = pc.utf8_split_whitespace(pc.utf8_rtrim_whitespace(originals))
        # Arrow yields an empty token for leading or trailing whitespace: not a word.
        real = pc.greater(pc.binary_length(pc.list_flatten(tokens)), 0)
        parents = pc.list_parent_indices(tokens).to_numpy()
        words = np.bincount(
            parents, weights=real.to_numpy(zero_copy_only=False), minlength=rows.size
        )
        with np.errstate(divide="ignore"):
            density[rows] = total[rows] / words
    dropped = density > spec.max_density
    values = []
    for row in np.flatnonzero(dropped):
        parts = ", ".join(
            f"{k}={counts[k][row]}" for k in PII_KINDS if k in counts and counts[k][row]
        )
        values.append(f"{density[row]:.3f} ({parts})")
    return drop_rows(
        out,
        pa.array(dropped, pa.bool_()),
        stage=PII_STAGE,
        reasons=[PII_DENSITY] * len(values),
        values=values,
    )

"""PII redaction and rejection, run in the normalize stage on text before tokenization.

Kinds (:data:`PII_KINDS`) and their typed placeholders:

``email``        ``<EMAIL>``        ``name.surname+tag@mail.example.co.uk``
``iban``         ``<IBAN>``         ``DE89 3704 0044 0532 0130 00`` (ISO 13616 mod-97 checked)
``credit_card``  ``<CREDIT_CARD>``  13-19 digits starting 2-6 (the issuers' ranges, so ISBN-13s
                                    starting 978/979 are never candidates), contiguous or in groups
                                    of four (or Amex's 4-6-5) split by single spaces or dashes;
                                    Luhn-valid only
``us_ssn``       ``<US_SSN>``       ``123-45-6789`` minus the ranges never issued (000, 666, 9xx,
                                    group 00, serial 0000)
``ip_address``   ``<IP_ADDRESS>``   IPv4 with octets 0-255 (not inside a longer dotted number such
                                    as a version ``1.2.3.4.5``), IPv6 full or ``::``-compressed
                                    (checked with :mod:`ipaddress`, and must contain a digit, so
                                    ``Bad::Add`` in C++ stays)
``phone``        ``<PHONE>``        international ``+CC ...`` and North-American ``(555) 123-4567``,
                                    ``555-123-4567``, ``555.123.4567``, ``1-800-555-0199``; never a
                                    plain year, price, date or unseparated number

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
``reject`` also redacts, and drops rows whose matches per whitespace word exceed ``max_density``
(reason ``pii_density``; the reject's sample is the redacted text, so rejects do not leak PII
either); ``off`` passes the table through.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.lib.schema import TEXT, StageResult, drop_rows, empty_rejects, string_array

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
# word boundary in both, no lookaround.
EMAIL_PATTERN = r"[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}"
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
_PHONE_INTL = r"\+[1-9][0-9]{0,2}(?:[ .-]?\(?[0-9]{1,4}\)?)?(?:[ .-]?[0-9]{2,8}){2,4}\b"
_PHONE_NA = r"(?:\b1[ .-]?)?(?:\([0-9]{3}\)[ .-]?|\b[0-9]{3}[ .-])[0-9]{3}[ .-][0-9]{4}\b"
PHONE_PATTERN = f"{_PHONE_INTL}|{_PHONE_NA}"
IBAN_PATTERN = r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"
CARD_CANDIDATE_PATTERN = r"[2-6](?:[ -]?[0-9]){12,18}"
"""Any 13-19 digits starting 2-6 with single separators: a superset of what the card check
accepts, used to find the few rows worth checking in Python."""
_DIGIT_RUN = re.compile(r"\b[0-9]+(?:[ -][0-9]+)*\b", re.ASCII)

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

    mode: Literal["redact", "reject", "off"] = "redact"
    kinds: tuple[str, ...] = PII_KINDS
    max_density: float = 0.05

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
            # The common 4-4-4-4 first (a card followed by more numbers), then longest first.
            ends = [i + 4, *range(len(groups), i, -1)] if i + 4 <= len(groups) else None
            for j in ends or range(len(groups), i, -1):
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


def _any_pattern(kinds: Sequence[str]) -> str:
    """One RE2 alternation that matches in every row any kind could change."""
    parts = {
        "email": EMAIL_PATTERN,
        "iban": IBAN_PATTERN,
        "credit_card": CARD_CANDIDATE_PATTERN,
        "us_ssn": US_SSN_PATTERN,
        "ip_address": f"{IPV4_PATTERN}|{IPV6_PATTERN}",
        "phone": PHONE_PATTERN,
    }
    return "|".join(f"(?:{parts[k]})" for k in _ORDER if k in kinds)


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
    hit = pc.fill_null(pc.match_substring_regex(array, any_pattern), False)
    rows = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
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
    """Redact (and in ``reject`` mode, filter) the ``text`` column of one batch.

    Adds the int32 column ``pii_redactions`` to kept rows (not in ``off`` mode). Rejected rows
    get reason ``pii_density`` and a value like ``0.083 (email=2, phone=1)``: matches per word
    with the counts behind it."""
    if spec.mode == "off":
        return StageResult(table, empty_rejects())
    redacted, counts = _redact(table.column(TEXT), spec.kinds)
    total = np.zeros(table.num_rows, np.int32)
    for c in counts.values():
        total += c
    index = table.schema.get_field_index(TEXT)
    out = table.set_column(index, table.schema.field(TEXT), redacted)
    out = out.append_column(pa.field(PII_REDACTIONS, pa.int32()), pa.array(total, pa.int32()))
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

"""Text normalization with named presets, vectorized with Arrow compute.

Presets:

``default``
    Preserves meaning: Unicode normalization (NFC by default, NFKC on request), control
    characters removed (tab and newline are kept as whitespace), runs of spaces and tabs collapsed
    to one space, spaces around line breaks trimmed, more than one blank line collapsed to one
    (paragraph structure survives for the line-based quality filters), outer whitespace stripped.
``ascii_lower``
    The published study's rule: lowercase, keep only ``[a-z0-9]`` and whitespace, collapse
    whitespace to one space, strip. Equal to the study's
    ``re.sub(r"\\s+", " ", re.sub(r"[^a-zA-Z0-9\\s]", "", text.lower())).strip()``.
``none``
    Text passes through untouched.

PII (``spec.pii``, :mod:`llm_assets.lib.pii`) is redacted or rejected first, on the text as it
came in: presets such as ``ascii_lower`` would strip the ``@`` and dots that make an email an email.

A document whose text is empty after normalization is a reject (``empty_after_normalize``):
there is nothing left to train on, and dropping it silently would break rows in = out + rejected.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.lib.pii import PiiSpec, pii_kernel
from llm_assets.lib.schema import TEXT, StageResult, drop_rows, empty_rejects, string_array

NORMALIZE_STAGE = "normalize"
EMPTY_AFTER_NORMALIZE = "empty_after_normalize"

PRESETS = ("default", "ascii_lower", "none")
UNICODE_FORMS = ("NFC", "NFKC")

# Python's ``str.isspace`` set, spelled for RE2 (whose ``\s`` is ASCII only), so the vectorized
# ``ascii_lower`` equals the study's Python regexes on every input.
_PY_WHITESPACE = (
    r"\t\n\x{0b}\f\r\x{1c}-\x{1f} \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}"
    r"\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
)
_HORIZONTAL_SPACE = "[" + _PY_WHITESPACE.replace(r"\n", "") + "]+"
"""Python whitespace except the newline (``default`` keeps line structure)."""
# Control characters (Unicode category Cc) other than tab and newline; CR becomes a newline.
_CONTROL = r"[\x{00}-\x{08}\x{0b}\x{0c}\x{0e}-\x{1f}\x{7f}-\x{9f}]"
_HTML_TAG = r"<[^<>]{0,1000}>"


@dataclass(frozen=True)
class NormalizeSpec:
    """How ``normalized_documents`` rewrites text."""

    preset: Literal["default", "ascii_lower", "none"] = "default"
    unicode_form: Literal["NFC", "NFKC"] = "NFC"
    strip_html: bool = False
    """Remove HTML tags and unescape entities before the preset (``default`` and ``none``)."""
    pii: PiiSpec = field(default_factory=lambda: PiiSpec(mode="off"))
    """PII handling before the preset; off unless asked for (the asset's config turns it on)."""

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"normalize preset must be one of {PRESETS}, got {self.preset!r}")
        if self.unicode_form not in UNICODE_FORMS:
            raise ValueError(
                f"unicode_form must be one of {UNICODE_FORMS}, got {self.unicode_form!r}"
            )


def normalize_text(text: str, spec: NormalizeSpec) -> str:
    """The reference (pure Python) definition of each preset; :func:`normalize_array` must equal
    it on every input. Used by tests and by callers holding a single string."""
    if spec.strip_html and spec.preset != "ascii_lower":
        text = html.unescape(re.sub(r"<[^<>]{0,1000}>", " ", text))
    if spec.preset == "none":
        return text
    if spec.preset == "ascii_lower":
        return re.sub(r"\s+", " ", re.sub(r"[^a-zA-Z0-9\s]", "", text.lower())).strip()
    text = unicodedata.normalize(spec.unicode_form, text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", "", text)  # Cc except tab and newline
    text = re.sub(r"[^\S\n]+", " ", text)
    text = re.sub(r" ?\n ?", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def normalize_array(texts: pa.Array | pa.ChunkedArray, spec: NormalizeSpec) -> pa.Array:
    """Normalize a string array with Arrow compute kernels (no Python loop per row)."""
    if spec.strip_html and spec.preset != "ascii_lower":
        # html.unescape has no Arrow equivalent; only pay for Python when the option is on.
        stripped = pc.replace_substring_regex(texts, _HTML_TAG, " ")
        texts = pa.array([html.unescape(t) for t in stripped.to_pylist()], pa.string())
    if spec.preset == "none":
        return string_array(texts)
    if spec.preset == "ascii_lower":
        # Unicode lowercase first (as str.lower does), then map Python whitespace to a space,
        # drop everything else outside [a-z0-9 ], collapse and strip.
        out = pc.utf8_lower(texts)
        out = pc.replace_substring_regex(out, f"[{_PY_WHITESPACE}]+", " ")
        out = pc.replace_substring_regex(out, "[^a-z0-9 ]+", "")
        out = pc.replace_substring_regex(out, " {2,}", " ")
        return string_array(pc.utf8_trim(out, " "))
    out = pc.utf8_normalize(texts, form=spec.unicode_form)
    out = pc.replace_substring_regex(out, r"\r\n?", "\n")
    out = pc.replace_substring_regex(out, _CONTROL, "")
    out = pc.replace_substring_regex(out, _HORIZONTAL_SPACE, " ")
    out = pc.replace_substring_regex(out, r" ?\n ?", "\n")
    out = pc.replace_substring_regex(out, r"\n{3,}", "\n\n")
    return string_array(pc.utf8_trim(out, " \n"))


def normalize_table(table: pa.Table, spec: NormalizeSpec) -> StageResult:
    """Kernel of ``normalized_documents``: redact (or reject) PII, rewrite ``text``, reject rows
    left empty."""
    pii_rejects = empty_rejects()
    if spec.pii.mode != "off":
        redacted = pii_kernel(table, spec.pii)
        table, pii_rejects = redacted.kept, redacted.rejects
    if table.num_rows == 0:
        return StageResult(table, pii_rejects)
    normalized = normalize_array(table.column(TEXT), spec)
    empty = pc.equal(pc.utf8_length(normalized), 0)
    n_empty = pc.sum(empty).as_py() or 0
    # Rejects keep the original text as their sample: the reader wants to see what was emptied.
    result = drop_rows(
        table,
        empty,
        stage=NORMALIZE_STAGE,
        reasons=[EMPTY_AFTER_NORMALIZE] * n_empty,
        values=[spec.preset] * n_empty,
    )
    index = table.schema.get_field_index(TEXT)
    table = table.set_column(index, table.schema.field(TEXT), normalized)
    rejects = result.rejects
    if pii_rejects.num_rows:
        rejects = pa.concat_tables([pii_rejects, rejects])
    return StageResult(table.filter(pc.invert(empty)), rejects)

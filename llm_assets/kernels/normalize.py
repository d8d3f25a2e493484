"""Text normalization with named presets, vectorized with Arrow compute and numpy.

Presets:

``default``
    Preserves meaning: Unicode normalization (NFC by default, NFKC on request); the mandatory line
    breaks of Unicode (UAX #14: CR, CR LF, vertical tab, form feed, NEL U+0085, line and paragraph
    separators U+2028/U+2029) become a newline, so a page break or a Word line break still
    separates lines for the line-based quality filters; every other whitespace character
    (``str.isspace``: U+001C-U+001F, no-break and other Unicode spaces) is a space, and a tab
    stays a tab; the other control characters (Unicode category Cc) are removed. The indentation
    of a line (its leading spaces and tabs, after a line break) is kept as it is, so code and
    indented lists keep their structure; inside a line, a run of spaces and tabs after other text
    collapses to one space; spaces and tabs before a line break are removed (a line holding only
    them becomes blank); more than one blank line collapses to one (paragraph structure
    survives); outer whitespace is stripped (the first line's indentation too: leading blank
    lines and spaces are page layout, not content).
``ascii_lower``
    The published study's rule: lowercase, keep only ``[a-z0-9]`` and whitespace, collapse
    whitespace to one space, strip. Equal to the study's
    ``re.sub(r"\\s+", " ", re.sub(r"[^a-zA-Z0-9\\s]", "", text.lower())).strip()``.
``none``
    Text passes through untouched.

HTML (``strip_html``, ``default`` and ``none`` only): a run of tags, with the spaces and tabs
around it, becomes a line break if it holds a block or table-cell tag, else one space; then
entities are decoded (``&#64;`` is ``@``, ``&nbsp;`` a no-break space).

Order in :func:`normalize_table`: HTML first, then PII (``spec.pii``, :mod:`llm_assets.kernels.pii`,
redacted or rejected), then the rest of the preset. PII goes before the preset, which would strip
the ``@`` and dots that make an email an email (``ascii_lower``); HTML goes before PII, so that
entity-encoded PII (``john&#64;example.com``, ``555&#45;123&#45;4567``) is decoded and redacted,
and so that the placeholders (``<EMAIL>``...), which look like tags, survive. ``default`` and
``none`` keep placeholders as they are; ``ascii_lower`` drops their ``<``, ``>`` and ``_`` and
lowercases them (``email``, ``credit card`` is ``creditcard``) like all text: the study's rule.

A document whose text is empty after normalization is a reject (``empty_after_normalize``):
there is nothing left to train on, and dropping it silently would break rows in = out + rejected.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.kernels.pii import PiiSpec, pii_kernel
from llm_assets.kernels.schema import (
    TEXT,
    StageResult,
    drop_rows,
    empty_rejects,
    single_spaced,
    string_array,
)

NORMALIZE_STAGE = "normalize"
EMPTY_AFTER_NORMALIZE = "empty_after_normalize"

PRESETS = ("default", "ascii_lower", "none")
UNICODE_FORMS = ("NFC", "NFKC")

# Python's ``str.isspace`` set, spelled for RE2 (whose ``\s`` is ASCII only), so the vectorized
# ``default`` preset treats whitespace as the Python reference does: the line breaks
# (``_LINE_BREAK``, with ``\n``), space, tab, and the others (``_OTHER_SPACE``).
_OTHER_SPACE = r"[\x{1c}-\x{1f}\x{a0}\x{1680}\x{2000}-\x{200a}\x{202f}\x{205f}\x{3000}]"
"""Python whitespace that is neither a line break (:data:`_LINE_BREAK`, replaced before) nor a
space, tab or newline: each character becomes one space (so an indentation keeps its width)."""
_OTHER_SPACE_PY = "[\x1c-\x1f\xa0\u1680\u2000-\u200a\u202f\u205f\u3000]"
_TRAILING_SPACE = r"[ \t]+\n"
"""Spaces and tabs that end a line: removed (the line break stays)."""
_INNER_SPACE = r"([^ \t\n])(?:[ \t][ \t]+|\t)"
"""A run of spaces and tabs after a character of the line that is not one (so not the
indentation), when it is not a single space already: it becomes one space (the character is kept
through the group). Runs that are a single space, most of them, do not match."""
_INNER_SPACE_PY = r"([^ \t\n])[ \t]+"
_LINE_BREAK = r"\r\n?|[\x{0b}\x{0c}\x{85}\x{2028}\x{2029}]"
"""Unicode's mandatory line breaks (UAX #14 classes BK, CR, LF, NL): each becomes a newline."""
_LINE_BREAK_PY = "\r\n?|[\x0b\x0c\x85\u2028\u2029]"
_CONTROL = r"[\x{00}-\x{08}\x{0e}-\x{1b}\x{7f}-\x{84}\x{86}-\x{9f}]"
"""Control characters (Unicode category Cc) that are not whitespace: removed. (The whitespace
ones become a newline or a space.)"""
_CONTROL_PY = "[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]"
_BLOCK_MARK = "\x01"
"""Follows the line break a block run becomes, until the inline pass is done: a tag may not hold
it, so a stray ``<`` before a block and a ``>`` after it are never read as one tag (which deleted
"5 <br> then y is big and z" from "x < 5 <br> then y is big and z > 3")."""
_HTML_TAGS = rf"[ \t]*(?:<[^<>{_BLOCK_MARK}]{{0,1000}}>[ \t]*)+"
"""A run of HTML tags with the spaces and tabs around it (shared by RE2 and ``re``)."""
_HTML_BLOCK = (
    r"(?i)[ \t]*(?:<[^<>]{0,1000}>[ \t]*)*"
    r"</?(?:address|article|aside|blockquote|br|caption|dd|div|dl|dt|figcaption|figure|footer"
    r"|form|h[1-6]|header|hr|li|main|nav|ol|p|pre|section|table|tbody|td|tfoot|th|thead|tr|ul)"
    r"(?:[ \t\n/][^<>]{0,1000})?>[ \t]*(?:<[^<>]{0,1000}>[ \t]*)*"
)
"""A run of tags holding a block or table-cell tag (``<p>``, ``<br>``, ``<td>``...): a line break,
so that the cells of a table row never read as one number (``<td>5109</td><td>3719</td>...``
made a card number PII redaction then took)."""
_HTML_BLOCK_RE = re.compile(_HTML_BLOCK, re.ASCII)
"""ASCII case folding, as RE2's: Python's would also match ``İ`` (U+0130) for ``i``."""


# --- ascii_lower: one pass over the UTF-8 bytes ------------------------------------------------
# The study's rule keeps, per character of ``text.lower()``, an ASCII letter or digit, turns Python
# whitespace into a space and drops the rest. ``str.lower`` maps each character on its own (final
# sigma is the one context rule, and it only chooses between two non-ASCII letters), so the rule is
# a function of each code point: ASCII bytes go through a 256-entry table, and a non-ASCII
# character contributes nothing except for the few below. Every other byte of a multi-byte
# character is a continuation byte (0x80-0xBF) or a lead byte (0xC2-0xF4), and both are dropped.

_ASCII_LOWER_SPECIAL: dict[str, str] = {
    **{c: " " for c in "\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"},
    **{chr(cp): " " for cp in range(0x2000, 0x200B)},
    "\u0130": "i",  # LATIN CAPITAL LETTER I WITH DOT ABOVE: lower() is "i" + U+0307 (dropped)
    "\u212a": "k",  # KELVIN SIGN: lower() is "k"
}
"""The non-ASCII characters that ``ascii_lower`` does not simply drop, with what each becomes: the
non-ASCII whitespace (a space) and the two characters whose lowercase holds an ASCII letter.
Found by enumerating every code point with Python's Unicode database (14.0 in Python 3.11); the
tests check the table against that enumeration, so a Python with other Unicode data fails loudly."""

_SPECIAL_LEAD = 1
"""Table value of a byte that starts the UTF-8 sequence of a character in ``_ASCII_LOWER_SPECIAL``
(such bytes are decoded and looked up). Values below the space mean dropped; the others are the
output byte."""


def _ascii_lower_byte_table() -> bytes:
    """The 256-entry byte table of ``ascii_lower``: ASCII letters and digits to their lowercase,
    ASCII whitespace (``str.isspace``: tab to CR, 0x1C-0x1F, space) to a space, the lead bytes of
    the special characters to ``_SPECIAL_LEAD``, everything else to 0 (dropped)."""
    table = bytearray(256)
    for byte in range(128):
        char = chr(byte)
        if char.isalnum():
            table[byte] = ord(char.lower())
        elif char.isspace():
            table[byte] = ord(" ")
    for char in _ASCII_LOWER_SPECIAL:
        table[char.encode()[0]] = _SPECIAL_LEAD
    return bytes(table)


_ASCII_LOWER_TABLE = _ascii_lower_byte_table()
_SPECIAL_CODE_POINTS = np.array(sorted(map(ord, _ASCII_LOWER_SPECIAL)), dtype=np.int32)
_SPECIAL_BYTES = np.array(
    [ord(_ASCII_LOWER_SPECIAL[chr(cp)]) for cp in _SPECIAL_CODE_POINTS], dtype=np.uint8
)
_SPACE = ord(" ")


def _resolve_special_characters(data: np.ndarray, mapped: np.ndarray, at: np.ndarray) -> bool:
    """Decode the UTF-8 characters starting at byte positions ``at`` of ``data`` (the lead bytes
    the table marked ``_SPECIAL_LEAD``); write, in place in ``mapped``, the output byte of those
    in ``_ASCII_LOWER_SPECIAL``. The others keep the mark, which is dropped like 0. Returns whether
    any was written."""
    last = len(data) - 1
    b0, b1, b2, b3 = (
        data[np.minimum(at + k, last)].astype(np.int32) & (0xFF if k == 0 else 0x3F)
        for k in range(4)
    )
    code_point = np.where(
        b0 < 0xE0,
        ((b0 & 0x1F) << 6) | b1,
        np.where(
            b0 < 0xF0,
            ((b0 & 0x0F) << 12) | (b1 << 6) | b2,
            ((b0 & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3,
        ),
    )
    index = np.minimum(np.searchsorted(_SPECIAL_CODE_POINTS, code_point), len(_SPECIAL_BYTES) - 1)
    hit = _SPECIAL_CODE_POINTS[index] == code_point
    mapped[at[hit]] = _SPECIAL_BYTES[index[hit]]
    return bool(hit.any())


def _positions_in(sorted_values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Indices into ``sorted_values`` (sorted, distinct) of the entries of ``wanted`` it holds."""
    index = np.searchsorted(sorted_values, wanted)
    found = index < len(sorted_values)
    found[found] = sorted_values[index[found]] == wanted[found]
    return index[found]


def _ascii_lower_chunk(texts: pa.Array) -> pa.Array:
    """``ascii_lower`` of one ``string`` or ``large_string`` array (any slice offset), as an array
    of the same type with the same nulls.

    One table lookup maps every byte (``bytes.translate``). The bytes to remove are then found
    without a Python loop per row: dropped bytes; spaces whose previous byte in the row that is not
    dropped is a space or does not exist (collapsed runs, leading spaces); per row, the last byte
    left when it is a space (trailing). They are zeroed and deleted by one more ``translate``, and
    the offsets shift by the number of bytes removed before each row."""
    n = len(texts)
    if n == 0:
        return pa.array([], texts.type)
    offset_type = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    _, offsets_buf, data_buf = texts.buffers()
    offsets = np.frombuffer(offsets_buf, offset_type)[texts.offset : texts.offset + n + 1]
    offsets = offsets.astype(np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    offsets -= start
    raw = bytearray(data_buf[start:stop]) if stop > start else bytearray()
    size = len(raw)
    mapped_bytes = raw.translate(_ASCII_LOWER_TABLE)
    mapped = np.frombuffer(mapped_bytes, np.uint8)

    dropped = np.flatnonzero(mapped < _SPACE)
    lead = dropped[mapped[dropped] == _SPECIAL_LEAD]
    if len(lead) and _resolve_special_characters(np.frombuffer(raw, np.uint8), mapped, lead):
        dropped = dropped[mapped[dropped] < _SPACE]
    space = mapped == _SPACE
    row_first = offsets[:-1]
    starts = row_first[row_first < size]  # where a row begins (repeated for empty rows)

    # A space is removed when the previous byte of its row that is not dropped is a space or
    # does not exist: first when the byte right before it is a space or it begins its row...
    removed_mask = np.empty(size, dtype=bool)
    removed_mask[:1] = space[:1]
    np.logical_and(space[1:], space[:-1], out=removed_mask[1:])
    removed_mask[starts] = space[starts]
    if len(dropped):
        # ...then when it follows a run of dropped bytes, looking past the run (worked out on the
        # positions of the dropped bytes, a few percent of the bytes of most text).
        at_row_start = np.zeros(len(dropped), dtype=bool)
        at_row_start[_positions_in(dropped, starts)] = True
        run_first = at_row_start.copy()  # a run of dropped bytes does not go on into the next row
        run_first[0] = True
        run_first[1:] |= np.diff(dropped) != 1
        first = np.flatnonzero(run_first)
        after = dropped[np.append(first[1:] - 1, len(dropped) - 1)] + 1
        looks_back_to_space = at_row_start[first] | space[np.maximum(dropped[first] - 1, 0)]
        space_after = after < size
        space_after[space_after] = space[after[space_after]]
        # (A space after a run that ends its row begins the next row: removed already.)
        removed_mask[after[space_after & looks_back_to_space]] = True
        removed_mask[dropped] = True
    removed = np.flatnonzero(removed_mask)
    removed_before = np.searchsorted(removed, offsets)

    # Trailing strip: per row, the last byte not removed yet, when it is a space. When the row's
    # last bytes are removed, that byte is the one before their run of consecutive positions.
    row_end = offsets[1:]
    last_kept = row_end - 1
    if len(removed):
        last_removed = removed_before[1:] - 1
        tail = (last_removed >= 0) & (removed[np.maximum(last_removed, 0)] == row_end - 1)
        run_starts = np.flatnonzero(np.diff(removed, prepend=-2) != 1)
        tail_run = run_starts[np.searchsorted(run_starts, last_removed[tail], side="right") - 1]
        last_kept[tail] = np.maximum(removed[tail_run], row_first[tail]) - 1
    trailing = last_kept >= row_first
    trailing[trailing] = mapped[last_kept[trailing]] == _SPACE
    out_offsets = offsets - removed_before
    out_offsets[1:] -= np.cumsum(trailing)

    mapped[removed] = 0
    mapped[last_kept[trailing]] = 0
    out = mapped_bytes.translate(None, b"\x00")
    validity = texts.is_valid().buffers()[1] if texts.null_count else None
    return pa.Array.from_buffers(
        texts.type,
        n,
        [validity, pa.py_buffer(out_offsets.astype(offset_type)), pa.py_buffer(out)],
        null_count=texts.null_count,
    )


def _ascii_lower(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The ``ascii_lower`` preset of :func:`normalize_array`, chunk by chunk."""
    if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)):
        raise TypeError(f"ascii_lower normalizes string or large_string arrays, not {texts.type}")
    if isinstance(texts, pa.Array):
        return _ascii_lower_chunk(texts)
    if texts.num_chunks == 1:
        return _ascii_lower_chunk(texts.chunk(0))
    if texts.num_chunks == 0:
        return pa.array([], texts.type)
    return pa.concat_arrays([_ascii_lower_chunk(chunk) for chunk in texts.chunks])


@dataclass(frozen=True)
class NormalizeSpec:
    """How ``normalized_documents`` rewrites text."""

    preset: Literal["default", "ascii_lower", "none"] = field(
        default="default",
        metadata={"doc": "default keeps meaning; ascii_lower is the published study's rule"},
    )
    unicode_form: Literal["NFC", "NFKC"] = field(
        default="NFC",
        metadata={
            "doc": "Unicode normalization form: NFC keeps compatibility characters, NFKC "
            "folds them (ligatures, full-width letters)"
        },
    )
    strip_html: bool = field(
        default=False, metadata={"doc": "Remove HTML tags (default and none presets)"}
    )
    """Remove HTML tags and unescape entities before PII and the preset (``default`` and
    ``none``; ``ascii_lower`` is the study's rule and ignores it)."""
    pii: PiiSpec = field(default_factory=lambda: PiiSpec(mode="off"))
    """PII handling after HTML stripping and before the preset; off unless asked for (the
    asset's config turns it on)."""

    @property
    def strips_html(self) -> bool:
        """Whether HTML is stripped: asked for, and the preset is not ``ascii_lower``."""
        return self.strip_html and self.preset != "ascii_lower"

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"normalize preset must be one of {PRESETS}, got {self.preset!r}")
        if self.unicode_form not in UNICODE_FORMS:
            raise ValueError(
                f"unicode_form must be one of {UNICODE_FORMS}, got {self.unicode_form!r}"
            )


def strip_html_text(text: str) -> str:
    """The reference definition of ``strip_html``: each run of tags, with the spaces and tabs
    around it, becomes a line break if it holds a block or table-cell tag, else one space
    (inline markup between words is a word break, and the spaces it leaves must not split a
    number PII redaction looks for); then entities are decoded."""
    blocks = _HTML_BLOCK_RE.sub("\n" + _BLOCK_MARK, text)
    return html.unescape(re.sub(_HTML_TAGS, " ", blocks).replace("\n" + _BLOCK_MARK, "\n"))


def strip_html_array(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """:func:`strip_html_text` of every row (nulls stay null): the tags with RE2, the entities in
    Python, only in the rows that hold an ``&`` (``html.unescape`` has no Arrow equivalent)."""
    blocks = pc.replace_substring_regex(string_array(texts), _HTML_BLOCK, "\n" + _BLOCK_MARK)
    inline = pc.replace_substring_regex(blocks, _HTML_TAGS, " ")
    stripped = pc.replace_substring(inline, "\n" + _BLOCK_MARK, "\n")
    entity = pc.fill_null(pc.match_substring(stripped, "&"), False)
    rows = np.flatnonzero(entity.to_numpy(zero_copy_only=False))
    if rows.size == 0:
        return stripped
    decoded = [html.unescape(t) for t in stripped.take(pa.array(rows)).to_pylist()]
    return pc.replace_with_mask(stripped, entity, pa.array(decoded, stripped.type))


def normalize_text(text: str, spec: NormalizeSpec) -> str:
    """The reference (pure Python) definition of each preset; :func:`normalize_array` must equal
    it on every input whose code points Python's Unicode database knows (Arrow's may be newer:
    Python 3.11's is 14.0, so NFKC leaves U+1E030, added in 15.0, as it is, where Arrow maps it
    to U+0430). Used by tests and by callers holding a single string."""
    if spec.strips_html:
        text = strip_html_text(text)
    if spec.preset == "none":
        return text
    if spec.preset == "ascii_lower":
        return re.sub(r"\s+", " ", re.sub(r"[^a-zA-Z0-9\s]", "", text.lower())).strip()
    text = unicodedata.normalize(spec.unicode_form, text)
    text = re.sub(_LINE_BREAK_PY, "\n", text)
    text = re.sub(_CONTROL_PY, "", text)  # Cc that is not whitespace
    # Again: a control character removed may have kept a letter and its combining mark apart
    # ("A\x08\u0300" is NFC as it is; "A\u0300" is not).
    text = unicodedata.normalize(spec.unicode_form, text)
    text = re.sub(_OTHER_SPACE_PY, " ", text)  # whitespace left: space, tab, newline
    text = re.sub(r"[ \t]+\n", "\n", text)  # trailing spaces and tabs
    text = re.sub(_INNER_SPACE_PY, r"\1 ", text)  # runs inside a line; indentation is kept
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def normalize_array(texts: pa.Array | pa.ChunkedArray, spec: NormalizeSpec) -> pa.Array:
    """Normalize a string array with Arrow compute kernels, or for ``ascii_lower`` one numpy pass
    over the UTF-8 bytes (no Python loop per row). Equal to :func:`normalize_text` on every row;
    nulls stay null."""
    if spec.strips_html:
        texts = strip_html_array(texts)
    if spec.preset == "none":
        return string_array(texts)
    if spec.preset == "ascii_lower":
        return _ascii_lower(texts)
    return _default(string_array(texts), spec.unicode_form)


def _default_passes(texts: pa.Array) -> pa.Array:
    """The ``default`` preset after Unicode normalization: the six regex passes and the strip
    (the outer spaces, tabs and newlines: the only whitespace left)."""
    out = pc.replace_substring_regex(texts, _LINE_BREAK, "\n")
    out = pc.replace_substring_regex(out, _CONTROL, "")
    out = pc.replace_substring_regex(out, _OTHER_SPACE, " ")
    out = pc.replace_substring_regex(out, _TRAILING_SPACE, "\n")
    out = pc.replace_substring_regex(out, _INNER_SPACE, "\\1 ")
    out = pc.replace_substring_regex(out, r"\n{3,}", "\n\n")
    return pc.utf8_trim(out, " \t\n")


def _default(texts: pa.Array, unicode_form: str) -> pa.Array:
    """The ``default`` preset of :func:`normalize_array`.

    Most text is clean already: once Unicode-normalized and stripped of outer spaces and line
    breaks, its only whitespace is single spaces and it holds no control character
    (:func:`single_spaced`). The regex passes leave such a row's core as it
    is and the final strip removes the outer spaces and line breaks, so the stripped row *is* the
    result. Only the other rows pay for the regex passes; their results are scattered back with
    one Arrow take.
    (Unicode normalization goes first on every row: Arrow skips ASCII rows, and space and line
    feed never compose with a neighbour, so normalizing the core alone changes nothing.)"""
    normalized = pc.utf8_normalize(texts, form=unicode_form)
    stripped = pc.utf8_trim(normalized, " \n")
    dirty = np.flatnonzero(~single_spaced(stripped))
    if len(dirty) == 0:
        return stripped
    if len(dirty) == len(texts):
        return pc.utf8_normalize(_default_passes(normalized), form=unicode_form)
    # Normalized again after the passes: a control character they removed may have kept a
    # letter and its combining mark apart (only these rows can hold one).
    cleaned = pc.utf8_normalize(
        _default_passes(normalized.take(pa.array(dirty))), form=unicode_form
    )
    index = np.arange(len(texts), dtype=np.int64)
    index[dirty] = len(texts) + np.arange(len(dirty), dtype=np.int64)
    return pa.concat_arrays([stripped, cleaned]).take(pa.array(index))


_RAW_TEXT = "__raw_text"
"""Temporary column of :func:`normalize_table`: the text before HTML stripping, for samples."""


def normalize_table(table: pa.Table, spec: NormalizeSpec) -> StageResult:
    """Kernel of ``normalized_documents``: strip HTML (when asked), redact (or reject) PII in the
    text and the metadata, apply the preset to ``text``, reject rows left empty.

    HTML goes first so that PII redaction sees decoded text and its placeholders are not taken
    for tags (see the module docstring)."""
    text_index = table.schema.get_field_index(TEXT)
    text_field = table.schema.field(TEXT)
    stripping = spec.strips_html
    if stripping:
        raw = table.column(TEXT)
        table = table.set_column(text_index, text_field, strip_html_array(raw))
        table = table.append_column(_RAW_TEXT, raw)
    pii_rejects = empty_rejects()
    if spec.pii.mode != "off":
        redacted = pii_kernel(table, spec.pii)
        table, pii_rejects = redacted.kept, redacted.rejects
    raw_text = None
    if stripping:
        raw_text = table.column(_RAW_TEXT)
        table = table.drop_columns([_RAW_TEXT])
    if table.num_rows == 0:
        return StageResult(table, pii_rejects)
    normalized = normalize_array(table.column(TEXT), replace(spec, strip_html=False))
    empty = pc.equal(pc.utf8_length(normalized), 0)
    n_empty = pc.sum(empty).as_py() or 0
    # Rejects keep the text as it came in as their sample (the reader wants to see what was
    # emptied), markup included; with PII on, the text PII redaction saw instead: markup can hide
    # PII (``<a href="mailto:...">``) that stripping dropped and redaction never looked at.
    sampled = table
    if raw_text is not None and n_empty and spec.pii.mode == "off":
        sampled = table.set_column(text_index, text_field, raw_text)
    result = drop_rows(
        sampled,
        empty,
        stage=NORMALIZE_STAGE,
        reasons=[EMPTY_AFTER_NORMALIZE] * n_empty,
        values=[spec.preset] * n_empty,
    )
    table = table.set_column(text_index, text_field, normalized)
    rejects = result.rejects
    if pii_rejects.num_rows:
        rejects = pa.concat_tables([pii_rejects, rejects])
    return StageResult(table.filter(pc.invert(empty)), rejects)

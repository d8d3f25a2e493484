"""Charts the UI shows inline: SVG written here (no plotting library at run time), in Markdown
as a base64 data URI, which Dagster's Markdown renders without a file server. Document lengths,
reject reasons, and where the batches' positions go (tokens, padding, truncation)."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from llm_assets.assets.reporting.markdown import count, percent
from llm_assets.assets.reporting.svg import Plot, Svg, margin, nice_ticks, text_width, value_axis

WIDTH = 760
"""Charts 760 px wide: the width of the UI's Markdown dialog."""
_BLUE, _GREY, _ORANGE, _RED = "#4f6bed", "#c9ced6", "#f0a030", "#d9534f"


def image_markdown(image: bytes | str | Path, alt: str) -> str:
    """Markdown that shows an SVG or PNG image (its bytes, or a file) inline, as a base64 data
    URI."""
    data = image if isinstance(image, bytes) else Path(image).read_bytes()
    kind = "svg+xml" if data.lstrip()[:5] in (b"<svg ", b"<?xml") else "png"
    return f"![{alt}](data:image/{kind};base64,{base64.b64encode(data).decode()})"


# --- document lengths ---------------------------------------------------------------------------
def power_of_two_bins(lengths: Iterable[np.ndarray]) -> list[tuple[str, int]]:
    """Token counts binned by powers of two (``0``, ``1``, ``2-3``, ``4-7``, ...), up to the
    largest length seen; ``lengths`` come an array at a time (a shard's column), so memory does
    not grow with the corpus."""
    totals = np.zeros(64, dtype=np.int64)
    for chunk in lengths:
        chunk = np.asarray(chunk, dtype=np.int64)
        if chunk.size:
            # bin 0 holds 0; bin k >= 1 holds [2^(k-1), 2^k)
            bins = np.where(chunk > 0, np.floor(np.log2(np.maximum(chunk, 1))) + 1, 0)
            totals += np.bincount(bins.astype(np.int64), minlength=64)[:64]
    used = np.nonzero(totals)[0]
    if not used.size:
        return []
    labels = ["0", "1"] + [f"{2 ** (k - 1)}-{2**k - 1}" for k in range(2, 64)]
    return [(labels[k], int(totals[k])) for k in range(used[0], used[-1] + 1)]


def _lower(label: str) -> int:
    digits = re.search(r"\d+", label)
    return int(digits.group(0)) if digits else -1


def bin_order(label: str) -> tuple[int, bool]:
    """Sort key of a length bin's label (``"8-15"``, ``">1024"``): by its lower edge."""
    return (_lower(label), label.startswith(">"))


def length_chart(
    bins: Sequence[tuple[str, int]],
    title: str,
    *,
    before: Sequence[tuple[str, int]] | None = None,
    before_label: str = "before",
    label: str = "documents",
    over: int | None = None,
    over_label: str = "",
) -> bytes:
    """A bar chart (SVG) of documents per length bin (in length order). ``before``: the same
    bins of the stage's input, drawn behind in grey (what the stage removed shows as grey).
    ``over``: bins whose lower edge is above it are drawn in orange with ``over_label`` (the
    documents ``seq_len`` cuts or splits)."""
    names = list(dict.fromkeys([n for n, _ in before or ()] + [n for n, _ in bins]))
    names.sort(key=bin_order)
    kept, given = dict(bins), dict(before or ())
    heights = [kept.get(n, 0) for n in names]
    colors = [
        _ORANGE if over is not None and (n.startswith(">") or _lower(n) > over) else _BLUE
        for n in names
    ]
    slanted = len(names) > 8
    under = 16 + (max((text_width(n, 10) for n in names), default=0) * 0.5 if slanted else 0)
    ticks = nice_ticks(max(heights + [given.get(n, 0) for n in names] + [1]))
    svg = Svg(WIDTH, 50 + 230 + int(under) + 34)
    plot = Plot(margin(ticks), 50, WIDTH - 15, 50 + 230)
    svg.title(title)
    y = value_axis(svg, plot, ticks[-1], vertical=True, label="documents", ticks=ticks)
    slot = plot.width / max(len(names), 1)
    for i, name in enumerate(names):
        middle = plot.left + slot * (i + 0.5)
        if before:
            v = given.get(name, 0)
            svg.rect(middle - 0.4 * slot, y(v), 0.8 * slot, plot.bottom - y(v), _GREY, "before", v)
        half = (0.275 if before else 0.4) * slot
        v = heights[i]
        svg.rect(middle - half, y(v), 2 * half, plot.bottom - y(v), colors[i], "kept", v)
        if slanted:
            svg.text(middle + 3, plot.bottom + 10, name, anchor="end", rotate=-30)
        else:
            svg.text(middle, plot.bottom + 12, name, anchor="middle")
    svg.line(plot.left, plot.bottom, plot.right, plot.bottom)
    svg.text((plot.left + plot.right) / 2, svg.height - 14, "tokens per document", 11, "middle")
    entries = [(before_label, _GREY)] if before else []
    entries.append((label, _BLUE))
    if any(c == _ORANGE and h for c, h in zip(colors, heights, strict=True)):
        entries.append((over_label, _ORANGE))
    if before or over is not None:
        svg.legend(entries, plot.right, 36)
    return svg.bytes()


# --- reject reasons -----------------------------------------------------------------------------
def reasons_chart(reasons: dict[str, int], rows_in: int, title: str) -> bytes:
    """Horizontal bars (SVG) of the rows rejected per reason, most frequent on top, each
    labelled with its count and share of the rows the stage was given."""
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    row = 28
    left = min(max((text_width(r, 10) for r, _ in ranked), default=0) + 16, WIDTH / 2)
    svg = Svg(WIDTH, 36 + row * len(ranked) + 50)
    plot = Plot(left, 36, WIDTH - 20, 36 + row * len(ranked))
    svg.title(title)
    top = max([n for _, n in ranked] + [1]) * 1.3
    x = value_axis(svg, plot, top, vertical=False, label="rows rejected")
    for i, (reason, n) in enumerate(ranked):
        middle = plot.top + row * (i + 0.5)
        svg.rect(plot.left, middle - 0.35 * row, x(n) - plot.left, 0.7 * row, _RED, "reason", n)
        svg.text(plot.left - 6, middle, reason, anchor="end")
        svg.text(x(n) + 5, middle, f"{count(n)} ({percent(n, rows_in)})", size=9)
    svg.line(plot.left, plot.top, plot.left, plot.bottom)
    return svg.bytes()


# --- the batches' positions ---------------------------------------------------------------------
def positions_chart(*, tokens: int, padding: int, truncated: int, dropped: int) -> bytes:
    """Two stacked bars (SVG): the tokens the documents gave (kept, cut at ``seq_len``, dropped
    with the last partial blocks) and the positions of the sequences (tokens, padding); each
    label gives the small parts' counts and shares, too thin to see in the bar."""
    given = tokens + truncated + dropped
    positions = tokens + padding
    rows = [
        (
            [
                f"tokens the documents gave: {count(given)}",
                f"truncated {count(truncated)} ({percent(truncated, given)}),"
                f" dropped {count(dropped)} ({percent(dropped, given)})",
            ],
            given,
            [
                ("tokens", tokens, _BLUE),
                ("truncated", truncated, _ORANGE),
                ("dropped", dropped, _RED),
            ],
        ),
        (
            [
                f"positions of the sequences: {count(positions)}",
                f"padding {count(padding)} ({percent(padding, positions)})",
            ],
            positions,
            [("tokens", tokens, _BLUE), ("padding", padding, _GREY)],
        ),
    ]
    left = max(text_width(line, 9) for lines, _, _ in rows for line in lines) + 14
    svg = Svg(WIDTH, 240)
    plot = Plot(left, 36, WIDTH - 20, 170)
    svg.title("Padding and truncation")
    ticks = [i / 5 for i in range(6)]
    x = value_axis(
        svg, plot, 1, vertical=False, label="", ticks=ticks, grid=False, fmt=lambda v: f"{v:.0%}"
    )
    row = plot.height / len(rows)
    for i, (lines, whole, parts) in enumerate(rows):
        middle = plot.top + row * (i + 0.5)
        for j, line in enumerate(lines):
            svg.text(plot.left - 6, middle + 12 * (j - (len(lines) - 1) / 2), line, 9, "end")
        start = 0.0
        for name, value, color in parts:
            share = value / whole if whole else 0.0
            svg.rect(
                x(start),
                middle - 0.3 * row,
                x(start + share) - x(start),
                0.6 * row,
                color,
                name,
                value,
            )
            if share >= 0.06:
                shade = "black" if color == _GREY else "white"
                svg.text(x(start + share / 2), middle, percent(value, whole), 10, "middle", shade)
            start += share
    svg.line(plot.left, plot.top, plot.left, plot.bottom)
    entries = [("tokens", _BLUE), ("padding", _GREY), ("truncated", _ORANGE), ("dropped", _RED)]
    svg.legend(entries, (plot.left + plot.right) / 2, svg.height - 22, align="center")
    return svg.bytes()


def fill_chart(fill: np.ndarray, seq_len: int) -> bytes:
    """A histogram (SVG) of the real tokens per sequence (the rest of its ``seq_len`` is
    padding)."""
    edges = np.linspace(0, seq_len, min(32, seq_len) + 1)
    counts, _ = np.histogram(np.minimum(fill, seq_len), bins=edges)
    ticks = nice_ticks(max(int(counts.max(initial=0)), 1))
    svg = Svg(WIDTH, 300)
    plot = Plot(margin(ticks), 36, WIDTH - 20, 246)
    svg.title("How full the sequences are")
    y = value_axis(svg, plot, ticks[-1], vertical=True, label="sequences", ticks=ticks)
    x = value_axis(
        svg,
        plot,
        seq_len,
        vertical=False,
        label=f"real tokens per sequence (of {count(seq_len)}; the rest is padding)",
        exact=True,
        grid=False,
    )
    for lo, hi, n in zip(edges[:-1], edges[1:], counts, strict=True):
        svg.rect(x(lo), y(n), x(hi) - x(lo), plot.bottom - y(n), _BLUE, "fill", int(n))
    return svg.bytes()

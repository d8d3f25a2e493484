"""Charts the UI shows inline: matplotlib figures as PNG in Markdown (a base64 data URI, which
Dagster's Markdown renders without a file server). Document lengths, reject reasons, and where
the batches' positions go (tokens, padding, truncation)."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from llm_assets.assets.reporting.markdown import count, percent

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_WIDTH_IN, _DPI = 7.6, 100
"""Charts 760 px wide: the width of the UI's Markdown dialog."""
_BLUE, _GREY, _ORANGE, _RED = "#4f6bed", "#c9ced6", "#f0a030", "#d9534f"


def image_markdown(png: bytes | str | Path, alt: str) -> str:
    """Markdown that shows a PNG (its bytes, or a file) inline, as a base64 data URI."""
    data = png if isinstance(png, bytes) else Path(png).read_bytes()
    return f"![{alt}](data:image/png;base64,{base64.b64encode(data).decode()})"


def _figure(height_in: float) -> tuple[Figure, object]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(_WIDTH_IN, height_in), dpi=_DPI)


def _png(fig: Figure) -> bytes:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _tidy(ax: object) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)


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
    """A bar chart of documents per length bin (in length order). ``before``: the same bins of
    the stage's input, drawn behind in grey (what the stage removed shows as grey). ``over``:
    bins whose lower edge is above it are drawn in orange with ``over_label`` (the documents
    ``seq_len`` cuts or splits)."""
    names = list(dict.fromkeys([n for n, _ in before or ()] + [n for n, _ in bins]))
    names.sort(key=bin_order)
    kept = dict(bins)
    fig, ax = _figure(3.4)
    x = np.arange(len(names))
    if before:
        given = dict(before)
        ax.bar(x, [given.get(n, 0) for n in names], 0.8, color=_GREY, label=before_label)
    heights = [kept.get(n, 0) for n in names]
    colors = [
        _ORANGE if over is not None and (n.startswith(">") or _lower(n) > over) else _BLUE
        for n in names
    ]
    ax.bar(x, heights, 0.8 if not before else 0.55, color=colors, label=label)
    if any(c == _ORANGE and h for c, h in zip(colors, heights, strict=True)):
        ax.bar([0], [0], color=_ORANGE, label=over_label)  # legend entry only
    ax.set_xticks(
        x,
        names,
        rotation=30 if len(names) > 8 else 0,
        ha="right" if len(names) > 8 else "center",
        fontsize=8,
    )
    ax.set_xlabel("tokens per document")
    ax.set_ylabel("documents")
    ax.set_title(title, fontsize=11)
    _tidy(ax)
    if before or over is not None:
        ax.legend(fontsize=8, frameon=False, loc="upper right")
    return _png(fig)


# --- reject reasons -----------------------------------------------------------------------------
def reasons_chart(reasons: dict[str, int], rows_in: int, title: str) -> bytes:
    """Horizontal bars of the rows rejected per reason, most frequent on top, each labelled with
    its count and share of the rows the stage was given."""
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    fig, ax = _figure(0.9 + 0.32 * len(ranked))
    y = np.arange(len(ranked))[::-1]
    values = [n for _, n in ranked]
    ax.barh(y, values, 0.7, color=_RED)
    ax.set_yticks(y, [reason for reason, _ in ranked], fontsize=9)
    for yi, n in zip(y, values, strict=True):
        ax.text(n, yi, f"  {count(n)} ({percent(n, rows_in)})", va="center", fontsize=8)
    ax.set_xlim(0, max(values) * 1.3)
    ax.set_xlabel("rows rejected")
    ax.set_title(title, fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    return _png(fig)


# --- the batches' positions ---------------------------------------------------------------------
def positions_chart(*, tokens: int, padding: int, truncated: int, dropped: int) -> bytes:
    """Two stacked bars: the tokens the documents gave (kept, cut at ``seq_len``, dropped with
    the last partial blocks) and the positions of the sequences (tokens, padding); each label
    gives the small parts' counts and shares, too thin to see in the bar."""
    given = tokens + truncated + dropped
    positions = tokens + padding
    rows = [
        (
            f"positions of the sequences: {count(positions)}\n"
            f"padding {count(padding)} ({percent(padding, positions)})",
            positions,
            [("tokens", tokens, _BLUE), ("padding", padding, _GREY)],
        ),
        (
            f"tokens the documents gave: {count(given)}\ntruncated {count(truncated)} "
            f"({percent(truncated, given)}), dropped {count(dropped)} ({percent(dropped, given)})",
            given,
            [
                ("tokens", tokens, _BLUE),
                ("truncated", truncated, _ORANGE),
                ("dropped", dropped, _RED),
            ],
        ),
    ]
    fig, ax = _figure(2.4)
    seen: set[str] = set()
    for y, (_, whole, parts) in enumerate(rows):
        left = 0.0
        for name, value, color in parts:
            share = value / whole if whole else 0.0
            ax.barh(y, share, 0.6, left=left, color=color, label=None if name in seen else name)
            seen.add(name)
            if share >= 0.06:
                shade = "black" if color == _GREY else "white"
                text = percent(value, whole)
                ax.text(
                    left + share / 2, y, text, ha="center", va="center", fontsize=8, color=shade
                )
            left += share
    ax.set_yticks(range(len(rows)), [label for label, _, _ in rows], fontsize=8)
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.set_title("Padding and truncation", fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    return _png(fig)


def fill_chart(fill: np.ndarray, seq_len: int) -> bytes:
    """A histogram of the real tokens per sequence (the rest of its ``seq_len`` is padding)."""
    fig, ax = _figure(3.0)
    edges = np.linspace(0, seq_len, min(32, seq_len) + 1)
    ax.hist(np.minimum(fill, seq_len), bins=edges, color=_BLUE)
    ax.set_xlim(0, seq_len)
    ax.set_xlabel(f"real tokens per sequence (of {count(seq_len)}; the rest is padding)")
    ax.set_ylabel("sequences")
    ax.set_title("How full the sequences are", fontsize=11)
    _tidy(ax)
    return _png(fig)

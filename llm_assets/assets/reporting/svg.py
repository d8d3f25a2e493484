"""A small SVG writer for the UI's charts: rectangles, lines and text on a canvas, axes with
"nice" ticks, a legend. The charts need no plotting library at run time (importing and starting
one costs more than a whole small pipeline run)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
INK, GRID = "#333333", "#dddddd"
_CHAR_EM = 0.58
"""A sans-serif character's mean width in ems: enough to size margins for labels."""


def text_width(text: str, size: float) -> float:
    """The width a line of ``text`` takes at ``size`` px (an estimate: no font metrics)."""
    return len(text) * size * _CHAR_EM


def nice_ticks(top: float, most: int = 6) -> list[float]:
    """Ticks from 0 to at least ``top`` at a step of 1, 2 or 5 times a power of ten, at most
    ``most`` + 1 of them: ``nice_ticks(786)`` is ``[0, 200, 400, 600, 800]``."""
    if top <= 0:
        return [0.0, 1.0]
    rough = top / most
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    steps = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(steps + 1)]


def tick_label(value: float) -> str:
    """A tick's value: ``1,200``, ``0.5``."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.6g}"


@dataclass
class Svg:
    """An SVG document ``width`` x ``height`` px, built element by element."""

    width: int
    height: int
    parts: list[str] = field(default_factory=list)

    def rect(
        self, x: float, y: float, w: float, h: float, fill: str, bar: str = "", value: float = 0
    ) -> None:
        """A rectangle; a data bar (``bar``: its series) carries its value for readers of the
        SVG (tests, scripts) as ``data-value``."""
        data = f' class="bar {bar}" data-value="{value:g}"' if bar else ""
        self.parts.append(
            f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(w, 0):.2f}" height="{max(h, 0):.2f}"'
            f' fill="{fill}"{data}/>'
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = INK) -> None:
        self.parts.append(
            f'<line x1="{x1:.2f}" y1="{y1:.2f}" x2="{x2:.2f}" y2="{y2:.2f}" stroke="{stroke}"/>'
        )

    def text(
        self,
        x: float,
        y: float,
        text: str,
        size: float = 10,
        anchor: str = "start",
        fill: str = INK,
        rotate: float = 0,
        bold: bool = False,
    ) -> None:
        """``text`` (escaped) with its vertical middle at ``y``."""
        turn = f' transform="rotate({rotate:g} {x:.2f} {y:.2f})"' if rotate else ""
        weight = ' font-weight="bold"' if bold else ""
        self.parts.append(
            f'<text x="{x:.2f}" y="{y:.2f}" font-size="{size:g}" text-anchor="{anchor}"'
            f' dominant-baseline="central" fill="{fill}"{weight}{turn}>{escape(text)}</text>'
        )

    def title(self, text: str) -> None:
        """The chart's title, centred on top."""
        self.text(self.width / 2, 14, text, size=13, anchor="middle")

    def legend(
        self, entries: Sequence[tuple[str, str]], x: float, y: float, align: str = "right"
    ) -> None:
        """Colour swatches with their labels (``(label, colour)``), in a row that ends at ``x``
        (``align="right"``) or is centred on it."""
        widths = [15 + text_width(label, 10) + 14 for label, _ in entries]
        x -= sum(widths) if align == "right" else sum(widths) / 2
        for (label, color), w in zip(entries, widths, strict=True):
            self.rect(x, y - 5, 11, 10, color)
            self.text(x + 15, y, label, size=10)
            x += w

    def bytes(self) -> bytes:
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}"'
            f' height="{self.height}" viewBox="0 0 {self.width} {self.height}"'
            f' font-family="{FONT}">'
            f'<rect width="{self.width}" height="{self.height}" fill="white"/>'
        )
        return (head + "".join(self.parts) + "</svg>").encode()


@dataclass(frozen=True)
class Plot:
    """The area the data is drawn in, in px of the canvas."""

    left: float
    top: float
    right: float
    bottom: float

    @property
    def width(self) -> float:
        return self.right - self.left

    @property
    def height(self) -> float:
        return self.bottom - self.top


def margin(ticks: Sequence[float], fmt: Callable[[float], str] = tick_label) -> float:
    """The px left of a plot that a vertical value axis takes: its tick labels and its label."""
    return max(text_width(fmt(t), 10) for t in ticks) + 30


def value_axis(
    svg: Svg,
    plot: Plot,
    top: float,
    *,
    vertical: bool,
    label: str,
    fmt: Callable[[float], str] = tick_label,
    ticks: Sequence[float] | None = None,
    exact: bool = False,
    grid: bool = True,
) -> Callable[[float], float]:
    """The axis of the values from 0 to ``top``, ticked, along the plot's left side
    (``vertical``) or its bottom, with light grid lines; returns the function from a value to
    its px coordinate. The axis ends at its last nice tick, or at ``top`` if ``exact``."""
    ticks = list(ticks) if ticks is not None else nice_ticks(top)
    if exact:
        ticks = [t for t in ticks if t <= top]
    end = (top if exact else ticks[-1]) or 1.0
    if vertical:

        def at(v: float) -> float:
            return plot.bottom - plot.height * v / end

        for t in ticks:
            if grid and t:
                svg.line(plot.left, at(t), plot.right, at(t), GRID)
            svg.line(plot.left - 4, at(t), plot.left, at(t))
            svg.text(plot.left - 6, at(t), fmt(t), size=10, anchor="end")
        svg.line(plot.left, plot.top, plot.left, plot.bottom)
        mid = (plot.top + plot.bottom) / 2
        svg.text(
            plot.left - margin(ticks, fmt) + 8, mid, label, size=11, anchor="middle", rotate=-90
        )
    else:

        def at(v: float) -> float:
            return plot.left + plot.width * v / end

        for t in ticks:
            if grid and t:
                svg.line(at(t), plot.top, at(t), plot.bottom, GRID)
            svg.line(at(t), plot.bottom, at(t), plot.bottom + 4)
            svg.text(at(t), plot.bottom + 12, fmt(t), size=10, anchor="middle")
        svg.line(plot.left, plot.bottom, plot.right, plot.bottom)
        if label:
            svg.text(
                (plot.left + plot.right) / 2, plot.bottom + 32, label, size=11, anchor="middle"
            )
    return at

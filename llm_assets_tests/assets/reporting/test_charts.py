"""The charts: well-formed SVG as wide as the UI's dialog, bars as high as the data, labels
escaped; embedded in Markdown as data URIs."""

from __future__ import annotations

import base64
import io
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from llm_assets.assets.reporting.charts import (
    bin_order,
    fill_chart,
    image_markdown,
    length_chart,
    positions_chart,
    power_of_two_bins,
    reasons_chart,
)
from llm_assets.assets.reporting.svg import nice_ticks

_NS = "{http://www.w3.org/2000/svg}"


def _svg(data: bytes) -> ET.Element:
    root = ET.fromstring(data)
    assert root.tag == f"{_NS}svg"
    return root


def _bars(root: ET.Element, series: str) -> list[tuple[float, float, float]]:
    """The ``series``' bars: (value, width, height) in document order."""
    return [
        (float(r.get("data-value")), float(r.get("width")), float(r.get("height")))
        for r in root.iter(f"{_NS}rect")
        if r.get("class") == f"bar {series}"
    ]


def _texts(root: ET.Element) -> list[str]:
    return [t.text for t in root.iter(f"{_NS}text")]


def _proportional(sizes: list[float], values: list[float]) -> None:
    scale = max(sizes) / max(values)
    assert sizes == pytest.approx([v * scale for v in values], abs=0.02)


def test_lengths_are_binned_by_powers_of_two_shard_by_shard():
    bins = power_of_two_bins([np.array([1, 2, 3]), np.array([], dtype=np.int32), np.array([9])])
    assert bins == [("1", 1), ("2-3", 2), ("4-7", 0), ("8-15", 1)]
    assert power_of_two_bins([np.array([0, 0])]) == [("0", 2)]
    assert power_of_two_bins([]) == []


def test_bins_sort_by_their_lower_edge_not_as_text():
    names = [">256", "1024-2047", "128-255", "0-7", "256-256"]
    assert sorted(names, key=bin_order) == ["0-7", "128-255", "256-256", ">256", "1024-2047"]


def test_every_chart_is_an_svg_as_wide_as_the_dialog():
    charts = [
        length_chart([("1", 3), ("2-3", 5)], "lengths"),
        length_chart([("2-3", 5)], "kept", before=[("1", 3), ("2-3", 9)], label="kept"),
        length_chart(
            [("0-7", 2), ("256-256", 1), (">256", 4)], "batches", over=256, over_label="cut"
        ),
        reasons_chart({"too_few_tokens": 786, "wrong_language": 65}, 3634, "rejects"),
        positions_chart(tokens=188_838, padding=346, truncated=10, dropped=0),
        fill_chart(np.array([3, 256, 200, 17]), 256),
    ]
    for svg in charts:
        root = _svg(svg)
        assert root.get("width") == "760"
        assert root.get("viewBox").split()[2] == "760"


def test_length_bars_are_as_high_as_the_bins_in_length_order():
    root = _svg(
        length_chart([("2-3", 5), ("8-15", 2)], "kept", before=[("1", 3), ("2-3", 9)], label="kept")
    )
    kept, before = _bars(root, "kept"), _bars(root, "before")
    assert [v for v, _, _ in kept] == [0, 5, 2]  # bins 1, 2-3, 8-15
    assert [v for v, _, _ in before] == [3, 9, 0]
    _proportional([h for _, _, h in kept + before], [v for v, _, _ in kept + before])
    assert all(
        w_kept < w_before for (_, w_kept, _), (_, w_before, _) in zip(kept, before, strict=True)
    )
    texts = _texts(root)
    assert {"1", "2-3", "8-15", "kept", "before", "tokens per document", "documents"} <= set(texts)


def test_bins_over_seq_len_are_orange_with_their_legend():
    root = _svg(length_chart([("0-7", 2), (">256", 4)], "b", over=256, over_label="cut"))
    fills = [r.get("fill") for r in root.iter(f"{_NS}rect") if r.get("class") == "bar kept"]
    assert fills == ["#4f6bed", "#f0a030"]
    assert "cut" in _texts(root)
    short = _svg(length_chart([("0-7", 2)], "b", over=256, over_label="cut"))
    assert "cut" not in _texts(short)


def test_reasons_are_bars_most_frequent_first_labelled_and_escaped():
    data = reasons_chart({"a<b&c": 65, "too_few_tokens": 786}, 3634, "Rejects <x>")
    assert b"a&lt;b&amp;c" in data
    root = _svg(data)
    bars = _bars(root, "reason")
    assert [v for v, _, _ in bars] == [786, 65]
    _proportional([w for _, w, _ in bars], [786, 65])
    texts = _texts(root)
    assert {"a<b&c", "too_few_tokens", "Rejects <x>", "786 (21.6 %)", "65 (1.8 %)"} <= set(texts)


def test_positions_are_two_full_stacked_bars_with_their_shares():
    root = _svg(positions_chart(tokens=900, padding=100, truncated=60, dropped=40))
    given = _bars(root, "tokens")[0][1] + _bars(root, "truncated")[0][1]
    given += _bars(root, "dropped")[0][1]
    positions = _bars(root, "tokens")[1][1] + _bars(root, "padding")[0][1]
    assert given == pytest.approx(positions, abs=0.05)
    _proportional([b[1] for b in _bars(root, "truncated") + _bars(root, "dropped")], [60, 40])
    texts = _texts(root)
    assert "tokens the documents gave: 1,000" in texts
    assert "padding 100 (10.0 %)" in texts
    assert {"90.0 %", "10.0 %", "tokens", "padding", "truncated", "dropped", "100%"} <= set(texts)


def test_fill_is_a_histogram_of_the_sequences():
    root = _svg(fill_chart(np.array([3, 256, 300, 200, 17, 18]), 256))
    bars = _bars(root, "fill")
    assert len(bars) == 32
    values = [v for v, _, _ in bars]
    assert sum(values) == 6 and values[0] == 1 and values[2] == 2 and values[-1] == 2
    _proportional([h for _, _, h in bars], values)


def test_ticks_are_nice_numbers_covering_the_data():
    assert nice_ticks(786) == [0, 200, 400, 600, 800]
    assert nice_ticks(5) == [0, 1, 2, 3, 4, 5]
    assert nice_ticks(1_234_567)[-1] >= 1_234_567
    assert len(nice_ticks(1_234_567)) <= 7
    assert nice_ticks(0.3) == [0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]


def test_a_chart_is_markdown_with_a_data_uri():
    svg = reasons_chart({"x": 1}, 2, "one")
    markdown = image_markdown(svg, "rows rejected per reason")
    assert markdown.startswith("![rows rejected per reason](data:image/svg+xml;base64,")
    encoded = markdown.split(",", 1)[1].rstrip(")")
    assert base64.b64decode(encoded) == svg


def test_png_files_are_still_embedded_as_png(tmp_path):
    path = tmp_path / "chart.png"
    Image.new("RGB", (4, 3), "white").save(path)
    markdown = image_markdown(path, "throughput")
    assert markdown.startswith("![throughput](data:image/png;base64,")
    png = base64.b64decode(markdown.split(",", 1)[1].rstrip(")"))
    assert Image.open(io.BytesIO(png)).size == (4, 3)

"""The charts: PNG images that decode, embedded in Markdown as data URIs."""

from __future__ import annotations

import base64
import io

import numpy as np
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


def _size(png: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(png)).size


def test_lengths_are_binned_by_powers_of_two_shard_by_shard():
    bins = power_of_two_bins([np.array([1, 2, 3]), np.array([], dtype=np.int32), np.array([9])])
    assert bins == [("1", 1), ("2-3", 2), ("4-7", 0), ("8-15", 1)]
    assert power_of_two_bins([np.array([0, 0])]) == [("0", 2)]
    assert power_of_two_bins([]) == []


def test_bins_sort_by_their_lower_edge_not_as_text():
    names = [">256", "1024-2047", "128-255", "0-7", "256-256"]
    assert sorted(names, key=bin_order) == ["0-7", "128-255", "256-256", ">256", "1024-2047"]


def test_every_chart_is_a_png_as_wide_as_the_dialog():
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
    for png in charts:
        assert png.startswith(b"\x89PNG")
        assert _size(png)[0] == 760


def test_a_chart_is_markdown_with_a_data_uri():
    png = reasons_chart({"x": 1}, 2, "one")
    markdown = image_markdown(png, "rows rejected per reason")
    assert markdown.startswith("![rows rejected per reason](data:image/png;base64,")
    encoded = markdown.split(",", 1)[1].rstrip(")")
    assert base64.b64decode(encoded) == png

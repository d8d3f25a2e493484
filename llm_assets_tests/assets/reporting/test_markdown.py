"""The Markdown helpers: numbers for people, text shown literally, the reject reasons table."""

from __future__ import annotations

import pyarrow as pa

from llm_assets.assets.reporting.markdown import (
    _cell,
    _column_cells,
    _fenced,
    code_span,
    count,
    duration,
    percent,
    reasons_markdown,
    top_reasons,
)


def test_metadata_tables_show_text_literally():
    """The sample and reject tables show a value as it is: PII placeholders and HTML tags are not
    swallowed as markup, Markdown emphasis and pipes are escaped, and a long list keeps its whole
    length."""

    assert _cell("mail <EMAIL> or <b>x</b> *s* __u__ a|b") == (
        "mail &lt;EMAIL&gt; or &lt;b&gt;x&lt;/b&gt; \\*s\\* \\_\\_u\\_\\_ a\\|b"
    )
    assert _cell(list(range(100_000, 101_024))).endswith("…\\] (1024)")
    assert len(_cell("x" * 500)) == 80


def test_sample_cells_cut_in_arrow_render_as_the_whole_values_would():
    """The sample table cuts texts and lists in Arrow before they become Python objects; what it
    shows is what the whole values would show (their lengths included)."""
    table = pa.table(
        {
            "text": ["é" * 500, "short", None, "x" * 80, "y" * 81],
            "ids": pa.array(
                [list(range(1024)), [], None, list(range(12)), list(range(13))],
                pa.list_(pa.uint16()),
            ),
            "n": [1, 2, 3, 4, 5],
        }
    )
    for column in table.columns:
        assert _column_cells(column) == [_cell(value) for value in column.to_pylist()]


def test_the_sft_example_is_a_code_block_whatever_backticks_the_text_holds():
    """The SFT example's prompt and answer are shown as they are: a fence longer than any run
    of backticks in them (a code answer's own ``` would end a shorter one)."""

    text = "Use:\n```python\nprint(1)\n```\nand `x`."
    block = _fenced(text)
    assert block.startswith("````text\n") and block.endswith("\n````")
    assert block[len("````text\n") : -len("\n````")] == text
    assert _fenced("plain") == "```text\nplain\n```"


def test_numbers_are_written_for_people():
    assert count(188838) == "188,838"
    assert percent(1421, 3634) == "39.1 %"
    assert percent(346, 189184) == "0.18 %"  # small, but not nothing
    assert percent(3634, 3635) == "99.97 %"  # nearly, but not all
    assert percent(0, 10) == percent(5, 0) == "0 %"
    assert percent(7, 7) == "100.0 %"
    assert duration(0.358) == "0.36 s"
    assert duration(12.46) == "12.5 s"
    assert duration(185) == "3 min 05 s"
    assert duration(3725) == "1 h 02 min"


def test_reasons_are_ranked_with_their_share_of_the_rows_in():
    reasons = {"wrong_language": 65, "too_few_tokens": 786, "exact_duplicate": 20, "b": 1}
    table = reasons_markdown(reasons, 3634)
    lines = table.splitlines()
    assert lines[2] == "| too_few_tokens | 786 | 21.6 % |"
    assert lines[-1] == "| b | 1 | 0.03 % |"
    assert reasons_markdown({}) == "_no rejects_"
    assert top_reasons(reasons, 3634, n=2) == (
        "too_few_tokens 786 (21.6 %), wrong_language 65 (1.8 %) and 2 more"
    )


def test_a_code_span_holds_its_backticks():
    assert code_span("x = 1") == "`x = 1`"
    assert code_span("a `b` c") == "``a `b` c``"
    assert code_span("`a`") == "`` `a` ``"

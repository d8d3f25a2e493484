"""The CSV reader: quotes never closed, repeated column names, blank lines."""

from __future__ import annotations

import json

from llm_assets.kernels.ingest.records import (
    CORRUPT_FILE,
    EMPTY_FILE,
    MALFORMED_RECORD,
)
from llm_assets_tests.kernels.ingest.test_read import read, reasons


def test_csv_quote_never_closed_is_a_reject_and_nothing_is_swallowed(tmp_path):
    """A quote never closed is a ``corrupt_file`` at the record it opens (the rest of the file
    is not silently taken as that record's text); a quoted field spanning lines at the end of the
    file is whole."""
    (tmp_path / "open.csv").write_text('id,text\n1,"ok"\n2,"never closed\n3,after\n4,more\n')
    kept, rejects = read(tmp_path / "open.csv")
    assert kept["text"].to_pylist() == ["ok"]
    assert reasons(rejects) == [(2, CORRUPT_FILE)]
    assert "never closed" in rejects["value"][0].as_py()
    assert rejects["sample"][0].as_py() == '2,"never closed\n3,after\n4,more'

    (tmp_path / "whole.csv").write_text('id,text\n1,fine\n2,"two\nlines"')
    kept, rejects = read(tmp_path / "whole.csv")
    assert kept["text"].to_pylist() == ["fine", "two\nlines"]
    assert rejects.num_rows == 0


def test_text_after_a_closing_quote_rejects_that_record_only(tmp_path):
    """``"abc"def,1`` is malformed per RFC 4180: a ``malformed_record`` reject of that record,
    with its line as the sample; the records around it are read, none merged or lost (7
    records: 6 documents and 1 reject). ``"alpha" `` (a space after the quote) is the same."""
    rows = ["1,one", '2,"abc"def', "3,three", '4,"four ""quoted"""', "5,five", "6,six", "7,seven"]
    (tmp_path / "seven.csv").write_text("id,text\n" + "\n".join(rows) + "\n")
    kept, rejects = read(tmp_path / "seven.csv")
    assert kept["text"].to_pylist() == ["one", "three", 'four "quoted"', "five", "six", "seven"]
    assert kept["source_line"].to_pylist() == [1, 3, 4, 5, 6, 7]
    assert reasons(rejects) == [(2, MALFORMED_RECORD)]
    assert "expected after" in rejects["value"][0].as_py()
    assert rejects["sample"][0].as_py() == '2,"abc"def'
    (tmp_path / "space.csv").write_text('id,text\n1,"alpha" \n2,fine\n')
    kept, rejects = read(tmp_path / "space.csv")
    assert kept["text"].to_pylist() == ["fine"] and reasons(rejects) == [(1, MALFORMED_RECORD)]


def test_csv_repeated_column_names_keep_every_value(tmp_path):
    (tmp_path / "dup.csv").write_text("text,id,id,text\na,1,2,b\n")
    kept, _ = read(tmp_path / "dup.csv")
    assert kept["text"].to_pylist() == ["a"]
    assert json.loads(kept["metadata"][0].as_py()) == {"id": "1", "id#2": "2", "text#2": "b"}


def test_csv_header_quote_never_closed_is_a_corrupt_file_reject(tmp_path):
    """A header whose quote is never closed would swallow the whole file as one column name: it
    is a ``corrupt_file`` reject at the header (line 0) saying so, as a body record's unclosed
    quote is, not an ``empty_file`` "no records" reject."""
    (tmp_path / "h.csv").write_text('text,"id\n1,a\n2,b\n3,c\n')
    kept, rejects = read(tmp_path / "h.csv")
    assert kept.num_rows == 0 and reasons(rejects) == [(0, CORRUPT_FILE)]
    assert "header is never closed" in rejects["value"][0].as_py()
    assert rejects["sample"][0].as_py().startswith('text,"id\n1,a')


def test_csv_blank_lines_before_the_header_are_skipped(tmp_path):
    """A blank or whitespace-only first line was taken as a header with no column, and every
    record became a ``ragged_row``; blank lines before the header are skipped as blank lines
    between records are, and records are numbered from the header on as usual."""
    (tmp_path / "b.csv").write_text("\n  \r\n\ntext,id\na,1\n\nb,2\n")
    kept, rejects = read(tmp_path / "b.csv")
    assert rejects.num_rows == 0
    assert kept["text"].to_pylist() == ["a", "b"] and kept["source_line"].to_pylist() == [1, 2]
    (tmp_path / "blank.csv").write_text("\n \n")
    assert reasons(read(tmp_path / "blank.csv")[1]) == [(0, EMPTY_FILE)]

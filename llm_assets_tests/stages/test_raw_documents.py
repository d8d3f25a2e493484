"""Driver side of ``raw_documents``: line ranges, the input listing, files read whole."""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.stages.engine import StageContext, StageInputError
from llm_assets.stages.raw_documents import line_ranges, list_input_files, run_raw_documents


@pytest.mark.parametrize("rows_per_shard", [1, 2, 3, 7, 100])
@pytest.mark.parametrize("trailing_newline", [True, False])
def test_line_ranges_cover_the_file_exactly(tmp_path, rows_per_shard, trailing_newline):
    lines = [f'{{"text": "line {i}"}}' for i in range(1, 11)]
    body = "\n".join(lines) + ("\n" if trailing_newline else "")
    path = tmp_path / "f.jsonl"
    path.write_text(body)
    ranges = line_ranges(path, rows_per_shard)
    data = path.read_bytes()
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    for start, end, first_line in ranges:
        chunk = data[start:end].decode().splitlines()
        assert 1 <= len(chunk) <= rows_per_shard
        assert chunk[0] == lines[first_line - 1]


def test_line_ranges_of_an_empty_file(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"")
    assert line_ranges(path, 10) == [(0, 0, 1)]


def test_line_ranges_across_read_blocks(tmp_path):
    path = tmp_path / "big.jsonl"
    line = '{"text": "' + "x" * 1000 + '"}\n'
    path.write_text(line * 9000)  # ~9 MB: more than two 4 MiB read blocks
    ranges = line_ranges(path, 4000)
    assert [r[2] for r in ranges] == [1, 4001, 8001]
    assert ranges[1][0] == 4000 * len(line)


def test_input_listing_is_sorted_skips_hidden_and_refuses_unknown(tmp_path):
    (tmp_path / "b.jsonl").write_text("{}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.csv").write_text("text\nx\n")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "junk.bin").write_bytes(b"\0")
    assert [rel for _, rel in list_input_files(tmp_path)] == ["b.jsonl", "sub/a.csv"]
    (tmp_path / "README.md").write_text("hi")
    with pytest.raises(StageInputError, match=r"README\.md"):
        list_input_files(tmp_path)


def test_spark_and_hadoop_markers_are_not_read_and_are_reported(tmp_path):
    """A Spark output folder as it is: ``_SUCCESS``, ``_committed_*``, a leftover
    ``_temporary/`` and ``.crc`` files are not read (Spark's and Arrow's readers skip ``_``- and
    ``.``-prefixed names too); before, ``_SUCCESS`` (no extension) failed every run as an
    unsupported file. Each name skipped is reported; a folder holding only such names still
    fails, saying what it skipped."""
    (tmp_path / "part-00000.jsonl").write_text('{"text": "kept"}\n')
    (tmp_path / "_SUCCESS").write_bytes(b"")
    (tmp_path / "_committed_123").write_text("{}")
    (tmp_path / "_temporary" / "0").mkdir(parents=True)
    (tmp_path / "_temporary" / "0" / "part-00001.jsonl").write_text('{"text": "half"}\n')
    (tmp_path / ".part-00000.jsonl.crc").write_bytes(b"crc")
    ignored: list[str] = []
    assert [rel for _, rel in list_input_files(tmp_path, ignored=ignored)] == ["part-00000.jsonl"]
    assert ignored == [".part-00000.jsonl.crc", "_SUCCESS", "_committed_123", "_temporary/"]
    (tmp_path / "part-00000.jsonl").unlink()
    with pytest.raises(StageInputError, match=r"holds no input files \(not read.*_SUCCESS"):
        list_input_files(tmp_path)


def test_empty_or_missing_input_folder(tmp_path):
    with pytest.raises(StageInputError, match="holds no input files"):
        list_input_files(tmp_path)
    with pytest.raises(StageInputError, match="does not exist"):
        list_input_files(tmp_path / "missing")


@pytest.mark.parametrize(
    "name",
    [b"bad\xffname.jsonl", b"sub\xe9/ok.jsonl"],
    ids=["file", "folder"],
)
def test_input_name_that_is_not_utf8_fails_naming_it(tmp_path, name):
    """A file or folder name that is not UTF-8 cannot be recorded as ``source_file`` (nor hashed
    into ``doc_id``): refused at planning, named by its bytes so the message itself prints."""
    (tmp_path / "fine.jsonl").write_text('{"text": "fine"}\n')
    bad = os.path.join(os.fsencode(tmp_path), name)
    os.makedirs(os.path.dirname(bad), exist_ok=True)
    with open(bad, "wb") as handle:
        handle.write(b'{"text": "unreachable"}\n')
    with pytest.raises(StageInputError, match=r"not valid UTF-8.*rename") as err:
        list_input_files(tmp_path)
    message = str(err.value)
    message.encode("utf-8")  # printable: no lone surrogates from the undecodable bytes
    assert repr(bad) in message


def _line_ranges_reference(data: bytes, rows_per_shard: int) -> list[tuple[int, int, int]]:
    """The obvious implementation: split into lines, group them."""
    lines = data.split(b"\n")
    lines = [line + b"\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    ranges, pos = [], 0
    for i in range(0, len(lines), rows_per_shard):
        size = sum(map(len, lines[i : i + rows_per_shard]))
        ranges.append((pos, pos + size, i + 1))
        pos += size
    return ranges or [(0, 0, 1)]


@given(
    line_sizes=st.lists(st.sampled_from([0, 1, 7, 300, 1_500_000]), max_size=40),
    trailing_newline=st.booleans(),
    rows_per_shard=st.integers(1, 12),
)
@settings(max_examples=60, deadline=None)
def test_line_ranges_equal_the_obvious_split(
    tmp_path_factory, line_sizes, trailing_newline, rows_per_shard
):
    # Lines of 1.5 MB put range ends anywhere in and across the 4 MiB read blocks.
    body = b"\n".join(b"x" * n for n in line_sizes) + (b"\n" if trailing_newline else b"")
    path = tmp_path_factory.mktemp("ranges") / "f.jsonl"
    path.write_bytes(body)
    assert line_ranges(path, rows_per_shard) == _line_ranges_reference(body, rows_per_shard)


def test_a_utf16_jsonl_file_is_read_whole_with_the_lines_of_its_utf8_copy(tmp_path):
    """A plain JSONL file is cut into line ranges at b"\\n", which UTF-16 does not have as a
    line end: a UTF-16 file is one shard, transcoded, with the rows and ids of its UTF-8 copy."""
    import json
    import logging

    from llm_assets.compute.in_process import InProcessBackend
    from llm_assets.kernels.ingest.read import IngestSpec
    from llm_assets.warehouse.catalog import Catalog

    body = "".join(json.dumps({"text": f"ligne numéro {i}"}) + "\n" for i in range(25))
    for folder, data in (("utf8", body.encode()), ("utf16", body.encode("utf-16"))):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "docs.jsonl").write_bytes(data)
    rows = {}
    for folder in ("utf8", "utf16"):
        ctx = StageContext(
            warehouse_root=tmp_path / f"wh-{folder}",
            catalog=Catalog(tmp_path / f"wh-{folder}" / "catalog.duckdb"),
            compute=InProcessBackend(),
            log=logging.getLogger("test"),
            run_id=folder,
        )
        report = run_raw_documents(ctx, tmp_path / folder, IngestSpec(), rows_per_shard=10)
        assert len(report.shards) == (3 if folder == "utf8" else 1)
        rows[folder] = ctx.catalog.query(
            "SELECT doc_id, source_line, text FROM raw_documents ORDER BY source_line"
        )
    assert len(rows["utf16"]) == 25 and rows["utf16"] == rows["utf8"]


def test_a_file_url_reads_the_folder_it_names_as_its_path_does(tmp_path):
    """``file:///...`` is the local folder: the same shards (reused, as the same input), the
    same recorded config and lineage; the folder rules of a path apply to it."""
    import logging

    from llm_assets.compute.in_process import InProcessBackend
    from llm_assets.kernels.ingest.read import IngestSpec
    from llm_assets.warehouse.catalog import Catalog

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "docs.jsonl").write_text("".join(f'{{"text": "t{i}"}}\n' for i in range(25)))
    (folder / "_notes.md").write_text("not read")
    ctx = StageContext(
        warehouse_root=tmp_path / "wh",
        catalog=Catalog(tmp_path / "wh" / "catalog.duckdb"),
        compute=InProcessBackend(),
        log=logging.getLogger("test"),
    )
    by_path = run_raw_documents(ctx, folder, IngestSpec(), rows_per_shard=10)
    by_url = run_raw_documents(ctx, folder.as_uri(), IngestSpec(), rows_per_shard=10)
    assert by_path.computed == 3 and by_url.computed == 0 and by_url.skipped == 3
    assert [s.input_shards for s in by_url.shards] == [(str(folder / "docs.jsonl"),)] * 3
    assert by_url.extra["ignored_inputs"] == ["_notes.md"]

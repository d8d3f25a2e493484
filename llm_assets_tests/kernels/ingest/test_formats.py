"""UTF-16 and UTF-32 input with a byte-order mark, read as its UTF-8 copy."""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from llm_assets.kernels.ingest.formats import file_encoding
from llm_assets.kernels.ingest.records import (
    INVALID_UTF8,
)
from llm_assets_tests.kernels.ingest.test_read import read

UNICODE_CODECS = ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"]
_BOMS = {
    "utf-16-le": b"\xff\xfe",
    "utf-16-be": b"\xfe\xff",
    "utf-32-le": b"\xff\xfe\x00\x00",
    "utf-32-be": b"\x00\x00\xfe\xff",
}


def _encoded(text: str, codec: str) -> bytes:
    """``text`` as a Windows program writes it: the byte-order mark, then the encoding."""
    return _BOMS[codec] + text.encode(codec)


@pytest.mark.parametrize("codec", UNICODE_CODECS)
@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".jsonl.gz", ".jsonl.zst", ".csv", ".txt"])
def test_utf16_and_utf32_files_with_a_byte_order_mark_read_as_their_utf8_copy(
    tmp_path, codec, suffix
):
    """PowerShell's ``>`` and Excel's "Unicode Text" write UTF-16 with a byte-order mark: such
    a file (and UTF-32) gives the documents, lines and ids of the same file in UTF-8."""
    texts = ["première ligne, déjà", "二行目 🎉", 'quote " and \\ backslash']
    if suffix.startswith((".jsonl", ".json")):
        body = "".join(
            json.dumps({"text": t, "n": i}, ensure_ascii=False) + "\r\n"
            for i, t in enumerate(texts)
        )
    elif suffix == ".csv":
        body = "text,n\r\n" + "".join(
            f'"{t.replace(chr(34), chr(34) * 2)}",{i}\r\n' for i, t in enumerate(texts)
        )
    else:
        body = "".join(f"{t}\n\n" for t in texts)
    raw = _encoded(body, codec)
    utf8 = body.encode("utf-8")
    if suffix.endswith(".gz"):
        raw, utf8 = gzip.compress(raw), gzip.compress(utf8)
    elif suffix.endswith(".zst"):
        raw, utf8 = zstandard.compress(raw), zstandard.compress(utf8)
    (tmp_path / "wide").mkdir()
    (tmp_path / "narrow").mkdir()
    (tmp_path / "wide" / f"docs{suffix}").write_bytes(raw)
    (tmp_path / "narrow" / f"docs{suffix}").write_bytes(utf8)
    kept, rejects = read(tmp_path / "wide" / f"docs{suffix}")
    expected, _ = read(tmp_path / "narrow" / f"docs{suffix}")
    assert rejects.num_rows == 0
    assert kept["text"].to_pylist() == texts
    assert kept.to_pylist() == expected.to_pylist()
    assert file_encoding(str(tmp_path / "wide" / f"docs{suffix}")) == codec
    assert file_encoding(str(tmp_path / "narrow" / f"docs{suffix}")) is None


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".txt"])
def test_utf16_that_does_not_decode_rejects_only_its_line(tmp_path, suffix):
    """A lone surrogate (a program that cut a string inside a pair) and a last byte of half a
    character are ``invalid_utf8`` rejects of their line, as undecodable UTF-8 is; the other
    lines are kept."""
    if suffix == ".jsonl":
        lines = [json.dumps({"text": t}) for t in ("good one", "BROKEN", "good two")]
        header = ""
    elif suffix == ".csv":
        lines, header = ["good one", "BROKEN", "good two"], "text\n"
    else:
        lines, header = ["good one\n", "BROKEN\n", "good two\n"], ""
    body = _encoded(header + "\n".join(lines) + "\n", "utf-16-le")
    lone_high = b"\x00\xd8"  # U+D800 with no low surrogate after it
    broken = "BROKEN".encode("utf-16-le")
    path = tmp_path / f"docs{suffix}"
    path.write_bytes(body.replace(broken, lone_high + broken) + b"\x41")  # + half a character
    kept, rejects = read(path)
    assert kept["text"].to_pylist() == ["good one", "good two"]
    rows = list(zip(rejects["source_line"].to_pylist(), rejects["reason"].to_pylist(), strict=True))
    broken_at = {".jsonl": 2, ".csv": 2, ".txt": 3}[suffix]  # CSV: record; TXT: paragraph line
    last = {".jsonl": 4, ".csv": 4, ".txt": 7}[suffix]
    assert rows == [(broken_at, INVALID_UTF8), (last, INVALID_UTF8)]
    # The value says what is wrong in the file's encoding (not a UTF-8 byte it does not hold).
    expected = "not valid UTF-16-LE: a lone surrogate, or a character cut off at the end"
    assert all(value.startswith(expected) for value in rejects["value"].to_pylist())

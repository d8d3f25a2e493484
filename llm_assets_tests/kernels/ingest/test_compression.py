"""gzip and zstd input: every record before damage or a cut is kept, and the reject says where."""

from __future__ import annotations

import gzip
import io
import json
import random
import struct
import zlib

import pyarrow as pa
import pytest
import zstandard

from llm_assets.kernels.ingest.records import (
    CORRUPT_FILE,
    TRUNCATED_FILE,
)
from llm_assets_tests.kernels.ingest.test_read import read, reasons


@pytest.mark.parametrize("junk", [b"garbage!!", b"\x28\xb5\x2f\xfd" + b"\xff" * 64])
def test_zstd_junk_after_good_frames_keeps_the_records_before_it(tmp_path, junk):
    """Junk after complete frames (or a damaged frame header): the records decoded before it
    are kept and one ``corrupt_file`` reject follows them."""
    lines = b"".join(b'{"text": "doc %d"}\n' % i for i in range(20_000))
    compressor = zstandard.ZstdCompressor()
    path = tmp_path / "junk.jsonl.zst"
    path.write_bytes(
        compressor.compress(lines[:100_000]) + compressor.compress(lines[100_000:]) + junk
    )
    kept, rejects = read(path)
    assert kept.num_rows == 20_000
    assert reasons(rejects) == [(20_001, CORRUPT_FILE)]


def test_zstd_frame_with_a_window_over_128_mib_is_read(tmp_path):
    """A valid frame written with ``zstd --long=31`` (a 2 GiB window) was refused by the
    decoder's default 128 MiB limit: the whole file was one ``corrupt_file`` reject at line 0.
    Its records are read."""
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=31)
    raw = b"".join(b'{"text": "d%d"}\n' % i for i in range(100))
    path = tmp_path / "long.jsonl.zst"
    with (
        open(path, "wb") as handle,
        zstandard.ZstdCompressor(compression_params=params).stream_writer(handle) as writer,
    ):
        writer.write(raw)  # streamed: the frame keeps its 2 GiB window (no content size)
    kept, rejects = read(path)
    assert rejects.num_rows == 0 and kept["text"].to_pylist() == [f"d{i}" for i in range(100)]


def test_gzip_member_damaged_midway_names_the_lines_that_may_be_damaged(tmp_path):
    """gzip checks a member's CRC only at its end, so the records decoded from a member damaged
    midway have been kept or rejected as if sound: the ``corrupt_file`` reject's value names the
    damaged member and the lines decoded from it, which may hold damaged records; a sound member
    before it is not named. Members padded with zero bytes between them are read."""
    first = b"".join(b'{"text": "a%d"}\n' % i for i in range(10))
    second = bytearray(gzip.compress(b"".join(b'{"text": "b%d"}\n' % i for i in range(30_000))))
    second[-8] ^= 0xFF  # the CRC-32: every byte of data decodes, the check at the end fails
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(first) + b"\0" * 4 + bytes(second))
    kept, rejects = read(tmp_path / "d.jsonl.gz")
    # Every record decoded is kept, the last piece before the bad trailer too (a first version
    # of the member reader lost up to 64 KiB of intact records there, with no reject).
    assert kept["text"].to_pylist() == [f"a{i}" for i in range(10)] + [
        f"b{i}" for i in range(30_000)
    ]
    (value,) = rejects.filter(pa.compute.equal(rejects["reason"], CORRUPT_FILE))["value"]
    assert value.as_py().startswith("CRC check failed: gzip member 2 is damaged")
    assert "(lines 11-30010, 30000 lines)" in value.as_py() and "may be damaged" in value.as_py()
    assert rejects.num_rows == 1


def _gzip_module_lines(data: bytes) -> tuple[list[bytes], bool]:
    """The complete lines :class:`gzip.GzipFile` yields from ``data`` before it raises, and
    whether it raised: the least a damaged ``.jsonl.gz`` must keep."""
    lines = []
    try:
        lines.extend(gzip.GzipFile(fileobj=io.BytesIO(data)))
    except (OSError, EOFError, zlib.error):
        return [line for line in lines if line.endswith(b"\n")], True
    return lines, False


def test_gzip_damage_inside_the_deflate_data_keeps_the_records_decoded_before_it(tmp_path):
    """zlib drops all the output of a call that finds damage inside the deflate data (here a
    stored block whose length and its complement disagree: "invalid stored block lengths"):
    the up to 64 KiB of records that call decoded before the damage were lost, with no reject
    of their own, where the gzip module keeps all but its last 8 KiB. They are recovered and
    kept, and the one ``corrupt_file`` reject counts them among the lines of the member."""
    before = b"".join(b'{"text": "a%d"}\n' % i for i in range(2000))  # 30 KB: within one call
    after = b"".join(b'{"text": "b%d"}\n' % i for i in range(2000))
    deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(before) + deflate.flush(zlib.Z_FULL_FLUSH)
    assert body.endswith(b"\x00\x00\xff\xff")  # a full flush ends with an empty stored block
    body = body[:-4] + b"\x00\x00\xfe\xff" + deflate.compress(after) + deflate.flush()
    damaged = (
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        + body
        + struct.pack("<II", zlib.crc32(before + after), len(before + after))
    )
    sound = b"".join(b'{"text": "s%d"}\n' % i for i in range(10))
    data = gzip.compress(sound) + damaged
    (tmp_path / "d.jsonl.gz").write_bytes(data)
    kept, rejects = read(tmp_path / "d.jsonl.gz")
    assert kept["text"].to_pylist() == [f"s{i}" for i in range(10)] + [f"a{i}" for i in range(2000)]
    assert reasons(rejects) == [(2011, CORRUPT_FILE)]
    value = rejects["value"][0].as_py()
    assert value.startswith(
        "Error -3 while decompressing data: invalid stored block lengths: gzip member 2 is"
        " damaged; its records read before this reject (lines 11-2010, 2000 lines)"
    )
    reference, raised = _gzip_module_lines(data)
    assert raised and len(reference) < kept.num_rows


@pytest.mark.parametrize("seed", range(40))
def test_gzip_damaged_anywhere_keeps_every_record_the_gzip_module_reads(tmp_path, seed):
    """A byte of a gzip file flipped, deleted or inserted at random, in members of random
    sizes, compression levels and strategies: every record the gzip module reads before it
    raises is kept at its line (a first version of the member reader lost up to 64 KiB of them
    when zlib found the damage inside the deflate data), and the file has a ``corrupt_file`` or
    ``truncated_file`` reject exactly when the gzip module raises."""
    rng = random.Random(seed)
    raw = b"".join(
        b'{"text": "%s %d"}\n' % (b"w" * rng.choice([1, 10, 100]), i) for i in range(3000)
    )
    cuts = sorted(rng.sample(range(1, len(raw)), rng.choice([0, 1, 3, 10])))
    data = bytearray()
    for start, end in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        strategy = rng.choice([zlib.Z_DEFAULT_STRATEGY, zlib.Z_FIXED, zlib.Z_RLE])
        member = zlib.compressobj(rng.choice([0, 1, 6, 9]), zlib.DEFLATED, 31, 8, strategy)
        data += member.compress(raw[start:end]) + member.flush()  # wbits 31: a gzip member
    where = rng.randrange(10, len(data) - 8)
    change = rng.choice(["flip", "delete", "insert"])
    if change == "flip":
        data[where] ^= 1 << rng.randrange(8)
    elif change == "delete":
        del data[where]
    else:
        data[where:where] = bytes([rng.randrange(256)])
    (tmp_path / "d.jsonl.gz").write_bytes(data)
    kept, rejects = read(tmp_path / "d.jsonl.gz")
    reference, raised = _gzip_module_lines(bytes(data))
    texts = dict(zip(kept["source_line"].to_pylist(), kept["text"].to_pylist(), strict=True))
    for line_no, line in enumerate(reference, 1):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("text"), str):
            assert texts.get(line_no) == record["text"], (change, where, line_no)
    fatal = set(rejects["reason"].to_pylist()) & {CORRUPT_FILE, TRUNCATED_FILE}
    assert bool(fatal) == raised


def test_many_one_line_gzip_members_are_all_read_in_order(tmp_path):
    """20,000 one-line members, each its own gzip member: every record kept at its line. (The
    input buffer is walked with an offset, so a member copies none of it: 100,000 such members
    take about as long as with the gzip module. Speed is measured outside the tests; this checks
    the offset walk loses nothing.)"""
    path = tmp_path / "tiny.jsonl.gz"
    path.write_bytes(
        b"".join(gzip.compress(b'{"text": "doc %d"}\n' % i, mtime=0) for i in range(20_000))
    )
    kept, rejects = read(path)
    assert kept["text"].to_pylist() == [f"doc {i}" for i in range(20_000)]
    assert kept["source_line"].to_pylist() == list(range(1, 20_001))
    assert rejects.num_rows == 0

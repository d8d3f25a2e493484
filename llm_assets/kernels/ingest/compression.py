"""Decompressed byte streams of gzip and zstd input: concatenated members and frames, and
every byte decoded before damage or a cut handed out before the error."""

from __future__ import annotations

import io
import struct
import zlib
from typing import IO, Any

import zstandard

from llm_assets.kernels.ingest.records import _READ_CHUNK

_ZSTD_MAX_WINDOW = 1 << zstandard.WINDOWLOG_MAX
"""Largest zstd window decoded (2 GiB on 64-bit): the library's default limit, 128 MiB, refuses
valid frames written with ``zstd --long`` (or ``--long=31``) as "too much memory". Memory is
only used as data is decoded into the window, so a small file with a large window stays small."""
_CORRUPT_ERRORS = (zlib.error, zstandard.ZstdError)
"""What a compressed stream raises when its bytes cannot be decoded (EOFError means truncated)."""


class _DecodedStream(io.RawIOBase):
    """A raw stream of data decoded piece by piece from a compressed source: a subclass gives
    :meth:`_next_piece`. An error met while decoding is kept in ``_error`` and raised only once
    the data decoded before it has been read, so the records before damage are kept."""

    def __init__(self) -> None:
        super().__init__()
        self._pending = memoryview(b"")
        self._error: Exception | None = None

    def readable(self) -> bool:
        return True

    def _next_piece(self) -> bytes | None:
        """The next decoded bytes (maybe none yet), or None at the end of the source."""
        raise NotImplementedError

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            if self._error is not None:
                raise self._error
            piece = self._next_piece()
            if piece is None:
                return 0
            self._pending = memoryview(piece)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


class _ZstdFrames(_DecodedStream):
    """Decompress concatenated zstd frames; raise EOFError if the source ends inside a frame.

    zstandard's ``stream_reader`` returns the data of a cut-off stream without any error, so each
    frame gets its own ``decompressobj``, whose ``eof`` says whether the frame was complete.
    """

    def __init__(self, source: IO[bytes]) -> None:
        super().__init__()
        self._source = source
        self._decompressor = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
        self._frame = self._decompressor.decompressobj()
        self._in_frame = False

    def _next_piece(self) -> bytes | None:
        compressed = self._source.read(_READ_CHUNK)
        if not compressed:
            if self._in_frame:
                raise EOFError("zstd stream ended before the end of its last frame")
            return None
        return self._decompress(compressed)

    def _decompress(self, compressed: bytes) -> bytes:
        """The data of the frames in ``compressed``. Bytes that are not a frame (junk after the
        last one, a damaged frame) raise, but only once the data decoded before them has been
        read: the records before the damage are kept."""
        chunks = []
        try:
            while compressed:
                chunks.append(self._frame.decompress(compressed))
                self._in_frame = not self._frame.eof
                if self._in_frame:
                    break
                compressed = self._frame.unused_data
                self._frame = self._decompressor.decompressobj()
        except zstandard.ZstdError as error:
            self._error = error
        return b"".join(chunks)


_GZIP_PIECE = 64 << 10
"""Decompressed bytes asked of zlib at a time (bounds what one compressed chunk expands to)."""
_GZIP_FEED_FIRST = 1 << 10
_GZIP_FEED_MAX = 32 << 10
"""Compressed bytes handed to zlib in one call: ``_GZIP_FEED_FIRST`` in a member's first call,
twice as many in each next one, up to ``_GZIP_FEED_MAX``. zlib gives back what it leaves of the
bytes it was handed (at the end of a member, or when a piece is full) as a copy: handed the
whole input buffer, each of 100,000 one-line members copied up to 1 MiB, and each piece of a
big member most of it."""
_GZIP_ZERO_RUN = 4 << 10
"""Bytes of zero padding between members skipped per step (each step copies them once)."""
_GZIP_FLAGS = {"FHCRC": 2, "FEXTRA": 4, "FNAME": 8, "FCOMMENT": 16}


def _gzip_header_length(data: bytes, start: int = 0) -> int | None:
    """Length of the gzip member header (RFC 1952) at offset ``start`` of ``data``, or None when
    ``data`` ends too soon to tell. Raises :class:`zlib.error` if it is not a gzip header. An
    offset rather than a slice, so that finding a member in the input buffer copies nothing."""
    if len(data) < start + 10:
        return None
    if data[start : start + 2] != b"\x1f\x8b":
        raise zlib.error(f"not a gzip member (starts with {bytes(data[start : start + 2])!r})")
    if data[start + 2] != 8:
        raise zlib.error(f"unknown gzip compression method {data[start + 2]}")
    flags, pos = data[start + 3], start + 10
    if flags & _GZIP_FLAGS["FEXTRA"]:
        if len(data) < pos + 2:
            return None
        pos += 2 + int.from_bytes(data[pos : pos + 2], "little")
    for flag in ("FNAME", "FCOMMENT"):
        if flags & _GZIP_FLAGS[flag]:
            end = data.find(b"\0", pos)
            if end < 0:
                return None
            pos = end + 1
    if flags & _GZIP_FLAGS["FHCRC"]:
        pos += 2
    return pos - start if len(data) >= pos else None


class _GzipMembers(_DecodedStream):
    """Decompress concatenated gzip members (as :class:`gzip.GzipFile` does, zero padding between
    them allowed), counting the lines decoded from each one.

    The header and the trailer (CRC-32 and length) are read here and the deflate data by zlib
    raw, so that every byte decoded is handed out before the trailer is checked (zlib's own gzip
    mode drops the output of the call that finds a bad trailer: up to a piece of intact records
    lost without a reject). zlib also drops the output of a call that finds damage inside the
    deflate data: the state before each call is kept, and on damage the data decoded before it
    is recovered from that state (:meth:`_salvage`) and handed out before the error. gzip checks
    a member only at its end, so the records of a member damaged midway have been parsed (some
    garbled, some lost) by the time the damage is found; the error then names the member and the
    lines decoded from it, so that its ``corrupt_file`` reject says which records before it may
    be damaged. A source that ends inside a member raises EOFError.

    The input buffer is walked with an offset (``_pos``) and handed to zlib through a
    memoryview, so that a member, however small, copies none of it.
    """

    def __init__(self, source: IO[bytes]) -> None:
        super().__init__()
        self._source = source
        self._state = "between"  # then "header", "body", "trailer", and "between" again
        self._member = zlib.decompressobj(-zlib.MAX_WBITS)
        self._fresh = True  # no call made to _member yet: its state needs no copy to be replayed
        self._feed = _GZIP_FEED_FIRST
        self._crc = self._size = 0
        self._input = b""
        self._view = memoryview(self._input)
        self._pos = 0  # of the first byte of _input not decoded yet
        self._need_input = True
        self._members = 0
        self._lines_before = 0
        self._member_lines = 0

    def _next_piece(self) -> bytes | None:
        if self._need_input:
            chunk = self._source.read(_READ_CHUNK)
            if not chunk:
                # "between" asks for input only once every byte left was zero padding.
                if self._state != "between":
                    raise EOFError(
                        "Compressed file ended before the end-of-stream marker was reached"
                    )
                return None
            # Only the undecoded rest is copied: in the body of a member there is none, and a
            # header or trailer cut by the end of a chunk leaves a few bytes.
            self._input = self._input[self._pos :] + chunk
            self._view = memoryview(self._input)
            self._pos = 0
        return self._inflate()

    def _inflate(self) -> bytes:
        """The next piece of data decoded from the pending input (``_need_input`` set when more
        is needed first). A damaged member raises on the next read, once the data decoded
        before the damage has been read (as in :class:`_ZstdFrames`)."""
        self._need_input = False
        try:
            if self._state == "between":
                while self._pos < len(self._input) and not self._input[self._pos]:
                    run = self._input[self._pos : self._pos + _GZIP_ZERO_RUN]
                    self._pos += len(run) - len(run.lstrip(b"\0"))
                if self._pos == len(self._input):
                    self._need_input = True
                    return b""
                self._state = "header"
                self._members += 1
                self._member_lines = 0
            if self._state == "header":
                length = _gzip_header_length(self._input, self._pos)
                if length is None:
                    self._need_input = True
                    return b""
                self._pos += length
                self._member = zlib.decompressobj(-zlib.MAX_WBITS)
                self._fresh = True
                self._feed = _GZIP_FEED_FIRST
                self._crc = self._size = 0
                self._state = "body"
            data = b""
            if self._state == "body":
                data = self._decompress()
                if self._error is not None:
                    return data
            if self._state == "trailer":
                if len(self._input) - self._pos < 8:
                    self._need_input = True
                    return data
                crc, size = struct.unpack_from("<II", self._input, self._pos)
                self._pos += 8
                self._state = "between"
                self._lines_before += self._member_lines
                if crc != self._crc:
                    self._error = self._damaged(zlib.error("CRC check failed"), damaged=True)
                elif size != self._size & 0xFFFFFFFF:
                    self._error = self._damaged(
                        zlib.error("incorrect length of data produced"), damaged=True
                    )
            return data
        except zlib.error as error:
            self._error = self._damaged(error)
            return b""

    def _decompress(self) -> bytes:
        """One call to zlib on the deflate data of the current member: a piece of its data, the
        state moved to "trailer" at its end. On damage, the data decoded before it, with
        ``_error`` set."""
        feed = self._view[self._pos : self._pos + self._feed]
        before = None if self._fresh else self._member.copy()
        try:
            data = self._member.decompress(feed, _GZIP_PIECE)
        except zlib.error as error:
            data = self._salvage(before, feed)
            self._member_lines += data.count(b"\n")
            self._error = self._damaged(error)
            return data
        self._fresh = False
        self._feed = min(2 * self._feed, _GZIP_FEED_MAX)
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._member_lines += data.count(b"\n")
        if self._member.eof:
            self._pos += len(feed) - len(self._member.unused_data)
            self._state = "trailer"
        else:
            self._pos += len(feed) - len(self._member.unconsumed_tail)
            # A full piece may leave output inside zlib with no input left: ask again first.
            self._need_input = self._pos == len(self._input) and len(data) < _GZIP_PIECE
        return data

    @staticmethod
    def _salvage(before: Any, feed: memoryview) -> bytes:
        """The data that ``feed``, handed to the decompressor whose state was ``before`` (None:
        a fresh one), decodes before the damage in it: zlib drops all the output of the call
        that finds damage, up to a piece of intact records.

        Replayed from copies of ``before``: the longest prefix of ``feed`` that decodes without
        error is found by bisection, then the byte holding the damage is decoded one output byte
        a call, since it may complete symbols before the damage. This keeps at least what
        :class:`gzip.GzipFile` yields, whose calls stop wherever its 8 KiB buffer is full, in
        the damaged byte too. The output before the damage is at most a piece (the failed call
        asked for no more), and damage is found once per file, so the replay is cheap."""

        def replay() -> Any:
            return zlib.decompressobj(-zlib.MAX_WBITS) if before is None else before.copy()

        good, bad = 0, len(feed)  # feed[:good] decodes (if good), feed[:bad] raises
        while bad - good > 1:
            middle = (good + bad) // 2
            try:
                replay().decompress(feed[:middle])
            except zlib.error:
                bad = middle
            else:
                good = middle
        member, pieces, rest = replay(), [], feed[:bad]
        if good:  # else the damage may lie in bits the last call took in: step from the start
            pieces.append(member.decompress(feed[:good]))
            rest = feed[good:bad]
        try:
            while piece := member.decompress(rest, 1):
                pieces.append(piece)
                rest = member.unconsumed_tail
        except zlib.error:
            pass
        return b"".join(pieces)

    def _damaged(self, error: zlib.error, damaged: bool = False) -> zlib.error:
        """``error``, naming the damaged member and the lines already decoded from it (already
        counted in ``_lines_before`` when the member ended: ``damaged``, a bad trailer)."""
        before = self._lines_before - (self._member_lines if damaged else 0)
        first = before + 1
        if not self._member_lines:
            return zlib.error(f"{error} (gzip member {self._members}, from line {first})")
        last = before + self._member_lines
        return zlib.error(
            f"{error}: gzip member {self._members} is damaged; its records read before this reject"
            f" (lines {first}-{last}, {self._member_lines} lines) may be damaged too: gzip checks"
            " a member only at its end"
        )


def _decompressed(handle: io.BufferedReader, fmt: str) -> io.BufferedReader:
    """The decompressed byte stream of an open ``jsonl*`` or ``json*`` file."""
    if fmt.endswith(".gz"):
        return io.BufferedReader(_GzipMembers(handle), _READ_CHUNK)
    if fmt.endswith(".zst"):
        return io.BufferedReader(_ZstdFrames(handle), _READ_CHUNK)
    return handle

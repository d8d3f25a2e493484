"""PII redaction: every kind found in its usual spellings, look-alikes left alone, nothing left to
find after redaction, and the kernel's three modes."""

from __future__ import annotations

import ipaddress
import json
import re

import numpy as np
import pyarrow as pa
import pytest
import regex  # EMAIL_PATTERN's Unicode classes (``\p{L}``) are RE2 and ``regex``, not ``re``
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.pii import (
    EMAIL_PATTERN,
    IPV4_PATTERN,
    IPV6_PATTERN,
    PHONE_PATTERN,
    PII_DENSITY,
    PII_KINDS,
    PII_REDACTIONS,
    US_SSN_PATTERN,
    PiiSpec,
    find_pii,
    iban_valid,
    luhn_valid,
    pii_kernel,
    redact_metadata,
    redact_pii,
)
from llm_assets.kernels.schema import REJECT_SCHEMA
from llm_assets_tests.conftest import docs_table


def _redact(text: str, kinds=PII_KINDS) -> str:
    return redact_pii([text], kinds)[0][0].as_py()


def _table(texts: list[str]) -> pa.Table:
    return docs_table(texts, metadata=True)


# --- each kind: positives ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("email", "john.doe@example.com"),
        ("email", "first.last+tag@mail.example.co.uk"),
        ("email", "X_Y-9%z@sub-domain.example.org"),
        # internationalized (RFC 6531): once "jö<EMAIL>", "andré<EMAIL>" or not redacted at all
        ("email", "jörg.schmidt@example.com"),
        ("email", "andré.dupont@exemple.fr"),
        ("email", "josé@example.com"),
        ("email", "jörg@müller.de"),
        ("email", "jose\u0301@example.com"),  # NFD: e + combining acute
        ("email", "用户@例子.广告"),
        ("email", "иван@пример.рф"),
        ("email", "user@example.xn--p1ai"),
        ("phone", "(555) 123-4567"),
        ("phone", "555-123-4567"),
        ("phone", "555.123.4567"),
        ("phone", "1-800-555-0199"),
        ("phone", "+44 20 7946 0958"),
        ("phone", "+1 (555) 123-4567"),
        ("phone", "+33 1 23 45 67 89"),
        ("phone", "+49 30 12345678"),
        ("phone", "+15551234567"),
        # no-break spaces (typography, &nbsp;) between the groups
        ("phone", "555\u00a0123\u00a04567"),
        ("phone", "+33\u00a01\u00a023\u00a045\u00a067\u00a089"),
        ("phone", "+33\u202f1\u202f23\u202f45\u202f67\u202f89"),
        ("ip_address", "192.168.0.1"),
        ("ip_address", "10.0.0.255"),
        ("ip_address", "1.2.3.4"),
        ("ip_address", "2001:db8::1"),
        ("ip_address", "fe80::1"),
        ("ip_address", "2001:0db8:85a3:0000:0000:8a2e:0370:7334"),
        ("credit_card", "4111 1111 1111 1111"),
        ("credit_card", "4111-1111-1111-1111"),
        ("credit_card", "4111111111111111"),
        ("credit_card", "5500 0000 0000 0004"),
        ("credit_card", "3782 822463 10005"),
        ("credit_card", "6011000990139424"),
        ("credit_card", "4111\u00a01111\u00a01111\u00a01111"),
        ("iban", "DE89 3704 0044 0532 0130 00"),
        ("iban", "GB82WEST12345698765432"),
        ("iban", "NO93 8601 1117 947"),
        ("us_ssn", "123-45-6789"),
        ("us_ssn", "078-05-1120"),
    ],
)
def test_each_kind_is_found_and_replaced_by_its_placeholder(kind, value):
    text = f"Contact: {value}, thanks."
    assert _redact(text) == f"Contact: <{kind.upper()}>, thanks."
    counts = find_pii([text])
    assert counts[kind].tolist() == [1]
    assert sum(int(c[0]) for c in counts.values()) == 1
    # and with only that kind switched on
    assert _redact(text, (kind,)) == f"Contact: <{kind.upper()}>, thanks."


def test_several_matches_in_one_text_are_counted_per_kind():
    text = (
        "Mail a@b.io or c.d@e.org, call 555-123-4567, card 4111 1111 1111 1111, "
        "host 10.0.0.1 and 10.0.0.2 (sentence end 8.8.8.8."
    )
    redacted, total = redact_pii([text])
    assert redacted[0].as_py() == (
        "Mail <EMAIL> or <EMAIL>, call <PHONE>, card <CREDIT_CARD>, "
        "host <IP_ADDRESS> and <IP_ADDRESS> (sentence end <IP_ADDRESS>."
    )
    assert total.tolist() == [7] and total.dtype == np.int32
    counts = find_pii([text])
    assert {k: int(v[0]) for k, v in counts.items()} == {
        "email": 2,
        "phone": 1,
        "ip_address": 3,
        "credit_card": 1,
        "iban": 0,
        "us_ssn": 0,
    }
    assert all(v.dtype == np.int32 for v in counts.values())


# --- look-alikes: negatives -------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "In 1999, 2005 and 2023 the population grew to 1,234,567.",
        "It costs $1,234.56 or €12.50, about 3.5 million in total.",
        "Dates: 2023-01-15, 12/25/2023, 15.01.2023; times 10:30:45 and 08:00.",
        "Upgrade from version 1.2.3.4.5 to v2.0.1 (build 10.0.19045).",
        "Bad address 256.1.1.1 and 1.2.3 and 999.999.999.999.",
        "Luhn-invalid: 4111 1111 1111 1112 and 4111111111111112.",
        "ISBN 978-3-16-148410-0, ISBN 9780306406157, ISBN 0-306-40615-2.",
        "Not SSNs: 000-12-3456, 666-12-3456, 900-12-3456, 123-00-4567, 123-45-0000.",
        "Not an IBAN: DE00 3704 0044 0532 0130 00 and ABCD EFGH IJKL.",
        "C++ std::vector, Bad::Add, a slice x[::2] and a map a:b:c.",
        "The score was 3-2 and the range 100-200, room 12 34, ratio 1:2.",
        "A plain number 5551234567 and an order #123456.",
        "a@b is no email, neither is user@localhost.",
        # Unicode look-alikes: no dot in the domain, no local part, no top-level domain
        "Grüße an jörg@host, @jörg und @müller.de; x = ä@ö; café@bar. ok",
        "Mentions: @jörg.schmidt, @用户; code: a@b, b@c.d, x@y.1",
        # a ``+`` glued to a word is no phone's prefix
        "GMT+1 2023 2024 and UTC+5 10 20",
    ],
)
def test_look_alikes_are_left_alone(text):
    assert _redact(text) == text
    assert all(int(c[0]) == 0 for c in find_pii([text]).values())


def test_checksums():
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert luhn_valid("378282246310005")
    assert iban_valid("DE89 3704 0044 0532 0130 00") and iban_valid("GB82WEST12345698765432")
    assert not iban_valid("DE88 3704 0044 0532 0130 00")


def test_card_inside_longer_number_run_and_priority_over_phone():
    # the 4-4-4-4 card is found although more numbers follow it
    assert _redact("4111 1111 1111 1111 2024") == "<CREDIT_CARD> 2024"
    assert _redact("4111-1111-1111-1111 555-123-4567") == "<CREDIT_CARD> <PHONE>"
    # a phone-like piece of a card number is not a phone
    assert find_pii(["4111 1111 1111 1111"])["phone"].tolist() == [0]


def test_replacement_that_creates_a_match_is_followed_to_a_fixed_point():
    # separated by a single character, the second address needs the first one's guard character
    assert _redact("1.1.1.1 2.2.2.2,3.3.3.3") == "<IP_ADDRESS> <IP_ADDRESS>,<IP_ADDRESS>"
    # the card gains a word boundary only once the e-mail before it is replaced
    assert _redact("x@y.com4111111111111111") == "<EMAIL><CREDIT_CARD>"


def test_placeholders_are_not_matched_again():
    text = " ".join(f"<{k.upper()}>" for k in PII_KINDS)
    assert _redact(text) == text


def test_chunked_and_null_input():
    chunked = pa.chunked_array([["a@b.io"], [None, "555-123-4567"]], pa.string())
    redacted, total = redact_pii(chunked)
    assert redacted.to_pylist() == ["<EMAIL>", None, "<PHONE>"]
    assert total.tolist() == [1, 0, 1]


# --- property: nothing left to find -----------------------------------------------------------
_WORDS = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)


def _luhn_complete(body: str) -> str:
    for check in "0123456789":
        if luhn_valid(body + check):
            return body + check
    raise AssertionError


@st.composite
def _cards(draw):
    first = draw(st.sampled_from("3456"))
    if first == "3" and draw(st.booleans()):  # Amex, 4-6-5
        digits = _luhn_complete("37" + draw(st.text("0123456789", min_size=12, max_size=12)))
        sep = draw(st.sampled_from([" ", "-"]))
        return f"{digits[:4]}{sep}{digits[4:10]}{sep}{digits[10:]}"
    digits = _luhn_complete(first + draw(st.text("0123456789", min_size=14, max_size=14)))
    sep = draw(st.sampled_from(["", " ", "-", "\u00a0"]))
    return sep.join(digits[i : i + 4] for i in range(0, 16, 4))


@st.composite
def _ibans(draw):
    bban = draw(st.text("0123456789", min_size=18, max_size=18))
    rest = int("".join(str(int(c, 36)) for c in bban + "DE00"))
    iban = f"DE{98 - rest % 97:02d}{bban}"
    return (
        " ".join(iban[i : i + 4] for i in range(0, len(iban), 4)) if draw(st.booleans()) else iban
    )


_digits = st.integers(0, 9).map(str)
_UNICODE_WORDS = st.text("abcéöüßçñøåжяαβ中文\u0301", min_size=1, max_size=8).filter(
    lambda w: not w.startswith("\u0301")
)
_emails = st.one_of(
    st.builds(
        lambda a, b, c: f"{a}.{a}@{b}.{c}", _WORDS, _WORDS, st.sampled_from(["com", "org", "io"])
    ),
    st.builds(
        lambda a, b, c: f"{a}@{b}.{c}",
        _UNICODE_WORDS,
        _UNICODE_WORDS,
        st.sampled_from(["de", "рф"]),
    ),
)
_phones = st.builds(
    lambda fmt, ds: fmt.format(*ds),
    st.sampled_from(
        [
            "({}{}{}) {}{}{}-{}{}{}{}",
            "{}{}{}-{}{}{}-{}{}{}{}",
            "+44 20 {}{}{}{} {}{}{}{}",
            "+44\u00a020\u00a0{}{}{}{}\u00a0{}{}{}{}",
        ]
    ),
    st.lists(_digits, min_size=10, max_size=10),
)
_ipv4s = st.lists(st.integers(0, 255), min_size=4, max_size=4).map(lambda o: ".".join(map(str, o)))
_ipv6s = (
    st.lists(st.integers(1, 0xFFFF), min_size=8, max_size=8)
    .map(lambda g: str(ipaddress.IPv6Address(":".join(f"{x:x}" for x in g))))
    .filter(lambda s: any(c.isdigit() for c in s))
)
_ssns = st.builds(
    lambda a, g, s: f"{a:03d}-{g:02d}-{s:04d}",
    st.integers(1, 665),
    st.integers(1, 99),
    st.integers(1, 9999),
)
_PII = {
    "email": _emails,
    "phone": _phones,
    "ip_address": st.one_of(_ipv4s, _ipv6s),
    "credit_card": _cards(),
    "iban": _ibans(),
    "us_ssn": _ssns,
}
_pieces = st.lists(
    st.one_of(
        _WORDS.map(lambda w: ("word", w)), *[s.map(lambda v, k=k: (k, v)) for k, s in _PII.items()]
    ),
    min_size=1,
    max_size=12,
)
_IPV4_GUARDED = re.compile(rf"(?<![0-9A-Za-z_.]){IPV4_PATTERN}(?![0-9A-Za-z_])(?!\.[0-9A-Za-z_])")
_PLAIN = [
    regex.compile(EMAIL_PATTERN),
    *(re.compile(p, re.ASCII) for p in (PHONE_PATTERN, US_SSN_PATTERN)),
]


def _leftover(text: str) -> list[str]:
    """Every match of any pattern in ``text``, found with Python's ``re`` (independently of the
    RE2 kernels), IPv6 candidates checked like the kernel checks them."""
    found = [m.group() for r in [*_PLAIN, _IPV4_GUARDED] for m in r.finditer(text)]
    for m in re.finditer(IPV6_PATTERN, text, re.ASCII):
        try:
            ipaddress.IPv6Address(m.group())
        except ValueError:
            continue
        if any(c.isdigit() for c in m.group()):
            found.append(m.group())
    return found


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_pieces, st.sampled_from([" ", ", ", "\n", " ; "])), max_size=8))
def test_after_redaction_nothing_is_left_to_find(docs):
    texts = [sep.join(v for _, v in pieces) for pieces, sep in docs]
    redacted, total = redact_pii(texts)
    out = redacted.to_pylist()
    for (pieces, _), text in zip(docs, out, strict=True):
        for kind, value in pieces:
            if kind != "word":
                assert value not in text, (kind, value, text)
        assert _leftover(text) == [], text
    for (pieces, sep), n in zip(docs, total.tolist(), strict=True):
        # one count per value (with a bare space between them, "+44 20 0000 0000 000-000-0000"
        # is one long phone number to anyone)
        if sep != " ":
            assert n == sum(k != "word" for k, _ in pieces)
    # a fixed point: nothing of any kind left, so a second redaction changes nothing
    assert all(int(c.sum()) == 0 for c in find_pii(out).values())
    assert redact_pii(out)[0].to_pylist() == out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text("0123456789 .-:@+()abcDEF<>", max_size=60), max_size=8))
def test_redaction_of_digit_soup_is_a_fixed_point(texts):
    out = redact_pii(texts)[0].to_pylist()
    assert _leftover("".join(t + "\x00" for t in out)) == []
    assert all(int(c.sum()) == 0 for c in find_pii(out).values())


# --- the kernel -------------------------------------------------------------------------------
TEXTS = [
    "Write to jane@example.com about the meeting next week, she said.",  # 1 in 10 words
    "jane@example.com 555-123-4567",  # 2 in 2 words
    "No personal data here at all, only words.",
    # 3 in 11 words
    "Call (555) 123-4567 or mail bob@example.org or visit 10.0.0.1 today please",
]


def test_redact_mode_keeps_every_row_and_counts():
    table = _table(TEXTS)
    result = pii_kernel(table, PiiSpec())
    assert result.rejects.num_rows == 0
    assert result.kept.column_names == [*table.column_names, PII_REDACTIONS]
    assert result.kept.schema.field(PII_REDACTIONS).type == pa.int32()
    assert result.kept[PII_REDACTIONS].to_pylist() == [1, 2, 0, 3]
    assert result.kept["text"].to_pylist()[1] == "<EMAIL> <PHONE>"
    assert result.kept["doc_id"].to_pylist() == table["doc_id"].to_pylist()


def test_reject_mode_drops_dense_rows_and_redacts_the_rest():
    result = pii_kernel(_table(TEXTS), PiiSpec(mode="reject", max_density=0.3))
    assert result.kept["doc_id"].to_pylist() == ["d0", "d2", "d3"]
    assert result.kept[PII_REDACTIONS].to_pylist() == [1, 0, 3]
    assert "<EMAIL>" in result.kept["text"][0].as_py()
    assert result.rejects.schema == REJECT_SCHEMA
    assert result.rejects["reason"].to_pylist() == [PII_DENSITY]
    assert result.rejects["value"].to_pylist() == ["1.000 (email=1, phone=1)"]
    assert result.rejects["stage"].to_pylist() == ["normalize"]
    # the reject's sample is redacted too
    assert result.rejects["sample"].to_pylist() == ["<EMAIL> <PHONE>"]

    stricter = pii_kernel(_table(TEXTS), PiiSpec(mode="reject", max_density=0.05))
    assert stricter.kept["doc_id"].to_pylist() == ["d2"]
    assert stricter.rejects["value"].to_pylist() == [
        "0.100 (email=1)",
        "1.000 (email=1, phone=1)",
        "0.273 (email=1, phone=1, ip_address=1)",
    ]


def test_density_exactly_at_threshold_is_kept():
    text = " mail a@b.io " + "word " * 8  # 1 in 10 words (outer spaces are no words)
    result = pii_kernel(_table([text]), PiiSpec(mode="reject", max_density=0.1))
    assert result.kept.num_rows == 1 and result.rejects.num_rows == 0


def test_off_mode_is_the_identity():
    table = _table(TEXTS)
    result = pii_kernel(table, PiiSpec(mode="off"))
    assert result.kept.equals(table)
    assert result.rejects.num_rows == 0


@pytest.mark.parametrize("mode", ["redact", "reject"])
def test_empty_table(mode):
    result = pii_kernel(_table([]), PiiSpec(mode=mode))
    assert result.kept.num_rows == 0 and result.rejects.num_rows == 0
    assert PII_REDACTIONS in result.kept.column_names


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([*TEXTS, "", "x", "4111 1111 1111 1111 and 1.2.3.4"]), max_size=20),
    st.floats(0, 1.5),
)
def test_nothing_lost(texts, density):
    result = pii_kernel(_table(texts), PiiSpec(mode="reject", max_density=density))
    assert result.kept.num_rows + result.rejects.num_rows == len(texts)
    ids = result.kept["doc_id"].to_pylist() + result.rejects["doc_id"].to_pylist()
    assert sorted(ids) == sorted(f"d{i}" for i in range(len(texts)))


def test_kinds_subset_only_touches_those_kinds():
    result = pii_kernel(_table(TEXTS), PiiSpec(kinds=("phone",)))
    assert result.kept["text"][1].as_py() == "jane@example.com <PHONE>"
    assert result.kept[PII_REDACTIONS].to_pylist() == [0, 1, 0, 1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "mask"}, "mode"),
        ({"kinds": ("email", "passport")}, "passport"),
        ({"kinds": ("email", "email")}, "twice"),
        ({"kinds": ()}, "at least one"),
        ({"max_density": -0.1}, "max_density"),
    ],
)
def test_bad_specs_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PiiSpec(**kwargs)


def test_unknown_kind_in_functions_is_refused():
    with pytest.raises(ValueError, match="passport"):
        find_pii(["x"], ("passport",))


# --- metadata (SFT prompts are rendered from it) ------------------------------------------------
def test_metadata_string_values_are_redacted_at_any_depth_keys_and_scalars_untouched():
    record = {
        "instruction": "Summarize.",
        "input": "Mail jane@example.com, call 555-123-4567, card 4111 1111 1111 1111.",
        "nested": {"list": ["x", "ip 10.0.0.1", 5551234567, 4111111111111111], "ok": True},
        "a@b.com": 1.5,  # a key is a name, not a value
        "n": None,
    }
    out, total = redact_metadata([json.dumps(record)])
    assert total.tolist() == [4] and total.dtype == np.int32
    assert json.loads(out[0].as_py()) == {
        "instruction": "Summarize.",
        "input": "Mail <EMAIL>, call <PHONE>, card <CREDIT_CARD>.",
        "nested": {"list": ["x", "ip <IP_ADDRESS>", 5551234567, 4111111111111111], "ok": True},
        "a@b.com": 1.5,
        "n": None,
    }


def test_metadata_without_pii_null_empty_or_invalid_is_kept_byte_for_byte():
    rows = [
        None,
        "{}",
        '{"title": "Tropical Storm John (1881)", "id": "wiki-0-00000001"}',
        '{"x": 1.0e5,   "y": "spaced as written"}',  # not rewritten: no redaction
        '{"input": "not json", ',  # invalid JSON: nothing can render a prompt from it
        '["a list", 123]',
    ]
    out, total = redact_metadata(pa.array(rows, pa.string()))
    assert out.to_pylist() == rows
    assert total.tolist() == [0] * len(rows)
    out, total = redact_metadata(pa.array([None, None], pa.string()))
    assert out.to_pylist() == [None, None] and total.tolist() == [0, 0]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # escapes hide what the JSON text alone would show: the n of \n glued to the number...
        ('{"input": "call\\n555-123-4567"}', "call\n<PHONE>"),
        # ...an escaped letter of the address (json.dumps' default ensure_ascii)
        ('{"input": "jos\\u00e9@example.com"}', "<EMAIL>"),
        ('{"input": "say \\"a@b.com\\" \\\\ 10.0.0.1"}', 'say "<EMAIL>" \\ <IP_ADDRESS>'),
        ('{"input": "jörg@müller.de"}', "<EMAIL>"),
    ],
)
def test_metadata_with_json_escapes(raw, expected):
    out, total = redact_metadata([raw])
    assert json.loads(out[0].as_py()) == {"input": expected}
    assert total.tolist() == [1 + ("10.0.0.1" in raw)]


def test_kernel_redacts_metadata_and_counts_it_but_density_is_the_texts():
    table = _table(["Plain words and nothing else here.", "Call 555-123-4567.", "x"])
    meta = [
        json.dumps({"input": "mail a@b.com or c@d.org", "stars": 5}),
        None,
        "{}",
    ]
    table = table.set_column(table.schema.get_field_index("metadata"), "metadata", pa.array(meta))
    result = pii_kernel(table, PiiSpec())
    assert result.kept[PII_REDACTIONS].to_pylist() == [2, 1, 0]
    assert json.loads(result.kept["metadata"][0].as_py()) == {
        "input": "mail <EMAIL> or <EMAIL>",
        "stars": 5,
    }
    assert result.kept["metadata"].to_pylist()[1:] == [None, "{}"]
    # reject: the first row's text has no PII (2 metadata matches for 6 words would be 0.33)
    result = pii_kernel(table, PiiSpec(mode="reject", max_density=0.3))
    assert result.kept["doc_id"].to_pylist() == ["d0", "d2"]
    assert result.kept[PII_REDACTIONS].to_pylist() == [2, 0]
    assert result.rejects["value"].to_pylist() == ["0.500 (phone=1)"]
    assert "a@b.com" not in str(result.kept["metadata"].to_pylist())
    # the kinds asked for only
    result = pii_kernel(table, PiiSpec(kinds=("phone",)))
    assert result.kept["metadata"][0].as_py() == meta[0]
    assert result.kept[PII_REDACTIONS].to_pylist() == [0, 1, 0]


def test_metadata_in_sliced_and_chunked_arrays():
    """The prefilter reads the UTF-8 buffers directly: slices and chunks must line up."""
    rows = [None, "", '{"a": "x@y.com"}', "{}", '{"b": "no digits"}', '{"c": "10.0.0.1"}']
    arr = pa.array(rows, pa.string())
    out, total = redact_metadata(arr.slice(2, 4))
    assert total.tolist() == [1, 0, 0, 1]
    assert out.to_pylist() == [
        '{"a":"<EMAIL>"}',
        "{}",
        '{"b": "no digits"}',
        '{"c":"<IP_ADDRESS>"}',
    ]
    out, total = redact_metadata(pa.chunked_array([arr.slice(0, 3), arr.slice(3)]))
    assert total.tolist() == [0, 0, 1, 0, 0, 1]
    out, total = redact_metadata(pa.array(rows, pa.large_string()))
    assert total.tolist() == [0, 0, 1, 0, 0, 1] and out.type == pa.large_string()


def test_a_long_run_of_numbers_is_scanned_in_linear_time():
    """Spans of more than five groups are never a card, so none is tried: a run of 3,000 small
    numbers (a table's cells, a list of counts) took minutes, every start against every end,
    and now takes milliseconds, still finding the card inside it."""
    numbers = " ".join(str(i % 97) for i in range(3000))
    text = f"{numbers} 4111 1111 1111 1111 {numbers}"
    (redacted,), counts = redact_pii([text])
    redacted = str(redacted)
    assert redacted.count("<CREDIT_CARD>") == 1 and counts.tolist() == [1]
    assert redacted.replace(" <CREDIT_CARD> ", " ") == f"{numbers} {numbers}"


def test_numbers_of_tool_call_arguments_are_redacted_as_text_and_no_other_number():
    """A tool call's arguments are written into the prompt and the learned tokens as text: a
    card number given as a JSON number is redacted there (the row's text, the calls as JSON,
    is redacted as a text). Every other number of the metadata (an id, a count) is data."""
    card = 4111111111111111
    call = {"type": "function", "function": {"name": "pay", "arguments": {"card": card, "n": 3}}}
    record = {
        "id": card,
        "messages": [{"role": "assistant", "content": None, "tool_calls": [call]}],
        "tool_call_answer": {"content": None, "tool_calls": [call]},
    }
    out, total = redact_metadata([json.dumps(record)])
    redacted = json.loads(out[0].as_py())
    assert redacted["id"] == card and total.tolist() == [2]
    answer = redacted["tool_call_answer"]
    for calls in (redacted["messages"][0]["tool_calls"], answer["tool_calls"]):
        assert calls[0]["function"]["arguments"] == {"card": "<CREDIT_CARD>", "n": 3}

"""What ``pii_redaction`` masks, and what it must leave alone: a labelled corpus of
positives and negatives, and property tests over generated dates, times, versions,
addresses and numbers that must pass through unchanged.

The first call of the Quickstart answered ``Tool results: 8; [PHONE]T11:27:40+00:00``:
an ISO timestamp masked as a phone number, in the answer, the trace and what the model
saw. A masker that eats ordinary data is as wrong as one that lets PII through."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynagent.interceptors.pii import redact

MASKED = {
    # phones, as people write them
    "call +1 415 555 0100": "call [PHONE]",
    "call +1-415-555-2671 today": "call [PHONE] today",
    "(415) 555-2671": "[PHONE]",
    "415.555.2671": "[PHONE]",
    "call 555-1234.": "call [PHONE].",
    "+44 20 7946 0958": "[PHONE]",
    "020 7946 0958": "[PHONE]",
    "+86 138 1234 5678": "[PHONE]",
    "mobile 13812345678": "mobile [PHONE]",
    "010-12345678": "[PHONE]",
    "+33 1 23 45 67 89": "[PHONE]",
    "+49 30 12345678": "[PHONE]",
    "tel:+14155552671": "tel:[PHONE]",
    "+14155552671": "[PHONE]",
    # beside things that are not phones
    "2026-12-04 555-1234": "2026-12-04 [PHONE]",
    "on 2026-12-04 call +1 415 555 0100": "on 2026-12-04 call [PHONE]",
    # e-mail and IDs
    "jane.doe@corp.example.com": "[EMAIL]",
    "SSN 123-45-6789": "SSN [ID]",
    "11010519491231002X": "[ID]",
    "card 4111 1111 1111 1111": "card [ID]",
    "card 4111-1111-1111-1111": "card [ID]",
    "card 4111111111111111": "card [ID]",
    "amex 3782 822463 10005": "amex [ID]",
}

UNCHANGED = [
    "Tool results: 8; 2026-12-04T11:27:40+00:00",
    "2026-12-04T11:27:40.123456+08:00",
    "2026-12-04 11:27:40",
    "04.12.2026",
    "12/04/2026",
    "2026/12/04 10:00",
    "at 11:27:40",
    "version 10.0.19041.1234",
    "v1.2.3 build 20261204",
    "dynagent 0.1.0",
    "ip 192.168.100.200 in the log",
    "10.0.0.1:8080",
    "order ORD-2024-000123 shipped",
    "ticket #12345678",
    "INV/2026/0001234",
    "count 12345678",
    "price 1500000.00",
    "1,234,567.89 units",
    "trace 5f0c3a9e1b2d4c6a8e0f1a2b3c4d5e6f",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "epoch 1764846460",
    "lat 37.7749295, lon -122.4194155",
]


@pytest.mark.parametrize(("text", "masked"), MASKED.items(), ids=list(MASKED))
def test_what_is_pii_is_masked(text: str, masked: str) -> None:
    assert redact(text) == masked


@pytest.mark.parametrize("text", UNCHANGED)
def test_ordinary_data_passes_unchanged(text: str) -> None:
    assert redact(text) == text


moments = st.datetimes(min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(2100, 1, 1)).map(
    lambda moment: moment.replace(tzinfo=dt.UTC)
)


@settings(max_examples=300, deadline=None)
@given(moment=moments, style=st.sampled_from(["iso", "iso-ms", "space", "date", "eu", "us"]))
def test_generated_dates_and_times_pass_unchanged(moment: dt.datetime, style: str) -> None:
    text = {
        "iso": moment.isoformat(timespec="seconds"),
        "iso-ms": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "space": moment.strftime("%Y-%m-%d %H:%M:%S"),
        "date": moment.strftime("%Y-%m-%d"),
        "eu": moment.strftime("%d.%m.%Y"),
        "us": moment.strftime("%m/%d/%Y"),
    }[style]
    sentence = f"Tool results: 8; {text} (logged)"
    assert redact(sentence) == sentence


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.integers(0, 99_999), min_size=2, max_size=4), patch=st.integers(0, 999))
def test_generated_versions_pass_unchanged(parts: list[int], patch: int) -> None:
    # Three dotted parts ending in four digits read as a phone (415.555.2671): a version's
    # last part here has at most three.
    text = "version " + ".".join(map(str, [*parts[:-1], patch]))
    assert redact(text) == text


@settings(max_examples=300, deadline=None)
@given(octets=st.lists(st.integers(0, 255), min_size=4, max_size=4), port=st.integers(1, 65535))
def test_generated_ipv4_addresses_pass_unchanged(octets: list[int], port: int) -> None:
    text = f"client {'.'.join(map(str, octets))}:{port} connected from {'.'.join(map(str, octets))}"
    assert redact(text) == text


def _not_a_mobile(number: int) -> bool:
    # An 11-digit run starting 13-19 is a mainland China mobile number: masked on purpose.
    digits = str(number)
    return not (len(digits) == 11 and digits[0] == "1" and digits[1] in "3456789")


@settings(max_examples=500, deadline=None)
@given(
    # Up to 12 digits: a run of 13 to 19 digits is masked as a card number, on purpose.
    number=st.integers(0, 10**12 - 1).filter(_not_a_mobile),
    fraction=st.one_of(st.none(), st.integers(0, 99)),
    prefix=st.sampled_from(["count ", "total: ", "ORD-", "#", "id=", "", "INV-2026-"]),
)
def test_generated_numbers_and_order_numbers_pass_unchanged(
    number: int, fraction: int | None, prefix: str
) -> None:
    text = f"{prefix}{number}" + (f".{fraction:02d}" if fraction is not None else "")
    assert redact(text) == text


@settings(max_examples=200, deadline=None)
@given(
    area=st.integers(200, 999),
    exchange=st.integers(200, 999),
    line=st.integers(0, 9999),
    style=st.sampled_from(["+1 {a} {e} {l}", "({a}) {e}-{l}", "{a}-{e}-{l}", "+1-{a}-{e}-{l}"]),
)
def test_generated_phone_numbers_are_masked(
    area: int, exchange: int, line: int, style: str
) -> None:
    phone = style.format(a=area, e=exchange, l=f"{line:04d}")
    assert redact(f"call {phone} now") == "call [PHONE] now"

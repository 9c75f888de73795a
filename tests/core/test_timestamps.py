"""The one text format of stored timestamps: fixed width, UTC, microseconds."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from starflow.clock import format_ts, parse_ts

ZONES = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8)),
         ZoneInfo("Europe/Paris")]


def test_format_is_strftimes_text_in_utc_for_any_zone() -> None:
    rng = random.Random(7)
    for _ in range(5_000):
        ts = datetime(rng.randint(1000, 9998), rng.randint(1, 12), rng.randint(1, 28),
                      rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59),
                      rng.choice([0, 1, 999_999, rng.randint(0, 999_999)]),
                      tzinfo=rng.choice(ZONES))
        text = format_ts(ts)
        assert text == ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert len(text) == 27
        back = parse_ts(text)
        assert back == ts and back.tzinfo is UTC


def test_text_order_is_time_order() -> None:
    base = datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    times = [base + timedelta(microseconds=k * 7_919) for k in range(-300, 300)]
    assert sorted(times, key=format_ts) == times
    assert format_ts(datetime(5, 1, 2, tzinfo=UTC)) == "0005-01-02T00:00:00.000000Z"


def test_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        format_ts(datetime(2026, 1, 1))


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-01-02T03:04:05.000006Z", datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)),
    ("2026-01-02T03:04:05+02:00", datetime(2026, 1, 2, 1, 4, 5, tzinfo=UTC)),
    ("2026-01-02 03:04:05", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),  # naive: UTC
])
def test_parse_reads_any_iso_text_as_utc(text: str, expected: datetime) -> None:
    parsed = parse_ts(text)
    assert parsed == expected and parsed.tzinfo is UTC

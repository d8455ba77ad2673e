"""The span of instants a count by time bucket is taken over (`_core.aggregates` rule 6): an
hour only where every offset and change is whole hours, a minute where whole minutes, else a
second; and every instant of a span lies in the bucket of its least instant, in every
granularity (checked against `zoneinfo` over DST changes of several zones)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from pdpp_store._core.aggregates import OffsetChanges, format_instant, offset_changes

SPANS = {13: timedelta(hours=1), 16: timedelta(minutes=1), 19: timedelta(seconds=1)}


@pytest.mark.parametrize(
    ("zone", "low", "high", "prefix"),
    [
        ("UTC", "1900-01-01", "2030-01-01", 13),
        ("America/New_York", "2021-01-01", "2024-01-01", 13),
        ("Europe/Paris", "2021-01-01", "2024-01-01", 13),
        ("Asia/Kolkata", "2000-01-01", "2024-01-01", 16),
        ("Australia/Lord_Howe", "2020-01-01", "2024-01-01", 16),
        ("Pacific/Chatham", "2020-01-01", "2024-01-01", 16),
        ("Europe/Amsterdam", "1910-01-01", "1911-01-01", 19),  # +00:19:32
    ],
)
def test_the_span_is_as_coarse_as_the_offsets_allow(
    zone: str, low: str, high: str, prefix: int
) -> None:
    offsets = offset_changes(ZoneInfo(zone), f"{low}T00:00:00.000000Z", f"{high}T00:00:00.000000Z")
    assert offsets.uniform_prefix == prefix


def test_a_change_off_the_hour_narrows_the_span() -> None:
    assert OffsetChanges(0, (("2024-01-01T00:00:00.000000Z", 3600),)).uniform_prefix == 13
    assert OffsetChanges(0, (("2024-01-01T00:30:00.000000Z", 3600),)).uniform_prefix == 16
    assert OffsetChanges(0, (("2024-01-01T00:30:01.000000Z", 3600),)).uniform_prefix == 19
    assert OffsetChanges(1800, ()).uniform_prefix == 16
    assert OffsetChanges(-18000, ()).uniform_prefix == 13


def _buckets(moment: datetime, zone: ZoneInfo) -> tuple[object, ...]:
    local = moment.astimezone(zone)
    day = local.date()
    return (
        (local.replace(minute=0, second=0, microsecond=0), local.utcoffset()),
        day,
        day - timedelta(days=day.weekday()),
        (day.year, day.month),
        day.year,
    )


@pytest.mark.parametrize(
    ("zone", "around"),
    [
        ("America/New_York", datetime(2024, 11, 3, 6, tzinfo=UTC)),
        ("Asia/Kolkata", datetime(2024, 2, 29, 18, 30, tzinfo=UTC)),
        ("Pacific/Chatham", datetime(2024, 4, 6, 14, tzinfo=UTC)),
        ("Australia/Lord_Howe", datetime(2024, 4, 6, 15, tzinfo=UTC)),
        ("Europe/Amsterdam", datetime(1910, 12, 31, 23, 40, tzinfo=UTC)),
    ],
)
def test_every_instant_of_a_span_is_in_the_bucket_of_its_least(zone: str, around: datetime) -> None:
    tz = ZoneInfo(zone)
    low, high = around - timedelta(days=2), around + timedelta(days=2)
    prefix = offset_changes(tz, format_instant(low), format_instant(high)).uniform_prefix
    step = timedelta(seconds=37, microseconds=250)
    moment = low
    while moment < high:
        start = datetime.strptime(
            format_instant(moment)[:prefix], "%Y-%m-%dT%H:%M:%S"[: prefix - 2]
        )
        start = start.replace(tzinfo=UTC)
        assert _buckets(moment, tz) == _buckets(start, tz), (zone, moment)
        assert start <= moment < start + SPANS[prefix]
        moment += step

"""Time buckets as ranges of instants (`_core.aggregates` rule 7): the ranges are consecutive,
start at the lowest instant and end just after the highest, and every instant between lies in
exactly one range whose bucket is the instant's bucket by `zoneinfo`, in every granularity,
across DST changes of several zones (a half-hour and a 45-minute offset, a change at local
midnight, clocks set back across midnight); too many ranges are refused (counted per span)."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from _aggregates import bucket_of

from pdpp_store._core.aggregates import (
    END_INSTANT,
    MAX_BUCKET_RANGES,
    bucket_key,
    bucket_ranges,
    format_instant,
    offset_changes,
)

GRANULARITIES = ("hour", "day", "week", "month", "year")
SPAN = {"hour": 20, "day": 400, "week": 2000, "month": 5000, "year": 30000}
"""Days the instants of a case spread over, per granularity (within `MAX_BUCKET_RANGES`)."""


@pytest.mark.parametrize(
    ("zone", "around"),
    [
        ("America/New_York", datetime(2024, 11, 3, 6, tzinfo=UTC)),
        ("Europe/Paris", datetime(2024, 3, 31, 1, tzinfo=UTC)),
        ("Australia/Lord_Howe", datetime(2024, 4, 6, 15, tzinfo=UTC)),
        ("Pacific/Chatham", datetime(2024, 4, 6, 14, 45, tzinfo=UTC)),
        ("America/Havana", datetime(2024, 3, 10, 5, tzinfo=UTC)),
        ("Asia/Kolkata", datetime(2024, 2, 29, 18, 30, tzinfo=UTC)),
        ("Antarctica/Casey", datetime(2010, 3, 4, 16, tzinfo=UTC)),  # +11 to +08 at 02:00
        ("Pacific/Apia", datetime(2011, 12, 30, 10, tzinfo=UTC)),  # a day skipped
        ("Europe/Amsterdam", datetime(1910, 12, 31, 23, 40, tzinfo=UTC)),  # +00:19:32
    ],
)
@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_every_instant_is_in_one_range_of_its_own_bucket(
    zone: str, around: datetime, granularity: str
) -> None:
    tz = ZoneInfo(zone)
    rnd = random.Random(f"{zone}{granularity}")
    spread = timedelta(days=SPAN[granularity])
    instants = sorted(
        format_instant(
            around
            + timedelta(seconds=rnd.randint(-86400 * 3, int(spread.total_seconds())))
            + timedelta(microseconds=rnd.choice([0, 0, 999999, 500000]))
        )
        for _ in range(400)
    )
    instants += [format_instant(around + timedelta(seconds=s)) for s in (-1, 0, 1, 3599, 3600)]
    low, high = min(instants), max(instants)
    ranges = bucket_ranges(granularity, offset_changes(tz, low, high), low, high)
    assert ranges is not None
    assert ranges[0].start == low
    assert ranges[-1].end == format_instant(
        datetime.strptime(high, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        + timedelta(microseconds=1)
    )
    for earlier, later in itertools.pairwise(ranges):
        assert earlier.start < earlier.end == later.start
        assert (earlier.bucket, earlier.offset) != (later.bucket, later.offset)
    for instant in instants:
        (found,) = [r for r in ranges if r.start <= instant < r.end]
        key = bucket_key(granularity, found.bucket, found.offset)
        assert key == bucket_of(instant, granularity, tz), (zone, granularity, instant)


def test_clocks_set_back_across_a_bucket_start_give_it_two_ranges() -> None:
    """Casey went from +11 to +08 at 02:00 local: 23:00-01:59 of the day before came again, so
    that day's bucket owns two ranges with the next day's between them."""
    tz = ZoneInfo("Antarctica/Casey")
    low, high = "2010-03-04T12:00:00.000000Z", "2010-03-04T20:00:00.000000Z"
    ranges = bucket_ranges("day", offset_changes(tz, low, high), low, high)
    assert ranges is not None
    days = [bucket_key("day", r.bucket, None) for r in ranges]
    assert days == ["2010-03-04", "2010-03-05", "2010-03-04", "2010-03-05"]


def test_too_many_ranges_are_refused_and_an_empty_range_has_none() -> None:
    tz = ZoneInfo("Europe/Paris")
    low, high = "2020-01-01T00:00:00.000000Z", "2024-01-01T00:00:00.000000Z"
    offsets = offset_changes(tz, low, high)
    assert bucket_ranges("hour", offsets, low, high) is None  # 35,000 hours
    days = bucket_ranges("day", offsets, low, high)
    assert days is not None
    assert len(days) == 1462 <= MAX_BUCKET_RANGES
    assert bucket_ranges("day", offsets, END_INSTANT, END_INSTANT) == ()

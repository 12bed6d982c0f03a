"""Load profiles and their seeded Poisson arrival schedules."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from pydantic import ValidationError

from autotune.bench import LoadProfile


def test_rate_or_concurrency_required() -> None:
    with pytest.raises(ValidationError, match="rate"):
        LoadProfile()
    with pytest.raises(ValidationError):
        LoadProfile(rate=0)
    with pytest.raises(ValidationError):
        LoadProfile(concurrency=0)
    assert LoadProfile(rate=2.0, concurrency=4).concurrency == 4


@pytest.mark.parametrize(
    "fields",
    [
        {"rate": math.nan},
        {"rate": 1e7},
        {"rate": -math.inf},
        {"concurrency": 10**7},
        {"rate": 1.0, "request_timeout_s": math.inf},
        {"rate": 1.0, "request_timeout_s": 1e10},  # past a week (a timer overflows near 9e9)
        {"rate": 1.0, "seed": 2**32},
        {"rate": 1.0, "seed": -1},
    ],
)
def test_a_number_past_its_bound_is_refused(fields: dict[str, float]) -> None:
    # Issue 45; `rate: inf` stays a rate's own word for all at once (below).
    with pytest.raises(ValidationError):
        LoadProfile(**fields)


def test_all_at_once_without_finite_rate() -> None:
    assert LoadProfile(concurrency=4).arrival_offsets(3) == [0.0, 0.0, 0.0]
    assert LoadProfile(rate=math.inf).arrival_offsets(2) == [0.0, 0.0]


def test_poisson_offsets_seeded_with_right_mean() -> None:
    profile = LoadProfile(rate=8.0, seed=3)
    offsets = profile.arrival_offsets(20_000)
    assert offsets == LoadProfile(rate=8.0, seed=3).arrival_offsets(20_000)
    assert offsets != LoadProfile(rate=8.0, seed=4).arrival_offsets(20_000)
    assert offsets[0] == 0.0
    gaps = [b - a for a, b in pairwise(offsets)]
    assert all(gap >= 0 for gap in gaps)
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 8.0, rel=0.03)
    # exponential gaps: the standard deviation equals the mean
    mean = sum(gaps) / len(gaps)
    std = math.sqrt(sum((gap - mean) ** 2 for gap in gaps) / len(gaps))
    assert std == pytest.approx(mean, rel=0.05)

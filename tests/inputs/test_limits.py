"""The bounds of the numbers a user gives: NaN and inf are never in range."""

from __future__ import annotations

import math

import pytest

from autotune.inputs.limits import MAX_SEED, bounded_problem


@pytest.mark.parametrize(
    ("value", "low", "high", "low_open", "problem"),
    [
        (1, 1, 10, False, None),
        (10, 1, 10, False, None),
        (0, 1, 10, False, "expected a whole number >= 1 and <= 10"),
        (MAX_SEED + 1, 0, MAX_SEED, False, f"expected a whole number >= 0 and <= {MAX_SEED}"),
        (0.0, 0, 1e6, True, "expected a number > 0 and <= 1000000"),
        (math.inf, 0, 1e6, True, "expected a number > 0 and <= 1000000"),
        (math.nan, 0, 1e6, True, "expected a number > 0 and <= 1000000"),
        (-math.inf, -1, 1, False, "expected a number >= -1 and <= 1"),
    ],
)
def test_a_number_is_in_its_range_or_says_which(
    value: float, low: float, high: float, low_open: bool, problem: str | None
) -> None:
    assert bounded_problem(value, low, high, low_open=low_open) == problem

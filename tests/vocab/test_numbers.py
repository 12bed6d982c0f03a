"""`autotune.vocab.numbers.readable`: thousands separators, about four digits, no exponent."""

from __future__ import annotations

import math

import pytest

from autotune.vocab.numbers import readable


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (23412.4, "23,412"),
        (19480.0, "19,480"),
        (1234567.8, "1,234,568"),
        (-2500.0, "-2,500"),
        (999.44, "999.4"),
        (123.456, "123.5"),
        (12.3456, "12.35"),
        (1.0, "1"),
        (0.012345, "0.01235"),
        (0.0, "0"),
        (0.00001234, "1.23e-05"),
        (1024, "1,024"),
        (True, "true"),
        (math.inf, "-"),
        (math.nan, "-"),
    ],
)
def test_readable(value: float, text: str) -> None:
    assert readable(value) == text


def test_an_interval_reads_as_short_as_it_can() -> None:
    from autotune.vocab.numbers import interval_text

    assert interval_text(1000.0, (970.0, 1030.0)) == "±3%"  # a rate's: even
    assert interval_text(261.9, (240.0, 290.5), ".1f") == "240.0-290.5"
    assert interval_text(261.9, (240.0, float("inf")), ".1f") == "240.0-?"  # no upper end
    assert interval_text(261.9, None) == ""

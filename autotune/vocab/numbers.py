"""Numbers as people read them: `23,412` tok/s and `1,948` ms, not `2.341e+04`."""

from __future__ import annotations

import math


def readable(value: float) -> str:
    """`value` with thousands separators and about four significant digits, never in
    exponent notation from 0.001 up: `23,412`, `1,948`, `123.4`, `12.35`, `0.0123`; an int as
    it is (`1,024`); `-` for a value that is not finite."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return "-"
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size == 0 or size >= 0.001:
        return f"{value:.4g}"
    return f"{value:.2e}"


def interval_text(value: float, interval: tuple[float, float] | None, fmt: str = "") -> str:
    """A metric's 90% interval beside it, as short as it reads: `±3%` where it is even (a
    rate's), else `240-290` (`240-?` with no upper end, a p99 over too few requests); empty
    without one. `fmt` formats the ends (default `readable`)."""
    if interval is None or not math.isfinite(value) or value == 0:
        return ""
    lo, hi = interval

    def show(x: float) -> str:
        return "?" if not math.isfinite(x) else format(x, fmt) if fmt else readable(x)

    if (
        math.isfinite(lo)
        and math.isfinite(hi)
        and math.isclose(value - lo, hi - value, rel_tol=1e-6)
    ):
        return f"±{(hi - value) / abs(value):.0%}"
    return f"{show(lo)}-{show(hi)}"

"""The command-line spellings of spec fields: `--slo NAME=NUMBER|baseline*FACTOR` and
`--objective METRIC:max|min`, parsed into what `TuneSpec` takes (each raises SpecError in one
line naming the flag)."""

from __future__ import annotations

import math

from autotune.inputs.limits import MAX_FACTOR
from autotune.spec._errors import SpecError


def parse_pairs(items: list[str], what: str, problem: str | None = None) -> dict[str, float]:
    """`["p99_ttft_ms=2000", ...]` -> `{"p99_ttft_ms": 2000.0}`; an item that is no
    NAME=NUMBER raises SpecError with `problem` (default: `what` and the item)."""
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise SpecError(
                problem or f"{what} {item!r}: expected NAME=NUMBER, e.g. p99_ttft_ms=2000"
            )
    return out


RELATIVE_SYNTAX = "baseline*FACTOR"


def parse_slos(items: list[str], what: str = "--slo") -> tuple[dict[str, float], dict[str, float]]:
    """`["p99_ttft_ms=2000", "p99_tpot_ms=baseline*1.2"]` -> the absolute bounds and the
    baseline-relative factors: `({"p99_ttft_ms": 2000.0}, {"p99_tpot_ms": 1.2})`."""
    absolute: list[str] = []
    relative: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if sep and value.strip().startswith("baseline"):
            relative[key.strip()] = parse_relative(f"{what} {item!r}", value)
        else:
            absolute.append(item)
    return parse_pairs(absolute, what), relative


def parse_relative(where: str, text: str) -> float:
    """`baseline*1.2` -> 1.2 (`baseline` alone: 1.0). Raises SpecError naming `where`."""
    rest = text.strip().removeprefix("baseline").strip()
    if not rest:
        return 1.0
    factor = rest.removeprefix("*").strip()
    try:
        value = float(factor) if rest.startswith("*") else math.nan
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_FACTOR:  # NaN and inf too: a factor of inf bounds nothing
        raise SpecError(
            f"{where}: expected {RELATIVE_SYNTAX} with a finite factor > 0, e.g. "
            "p99_tpot_ms=baseline*1.2 (at most 20% above the baseline's own value)"
        )
    return value


def parse_objectives(items: list[str]) -> list[dict[str, str]]:
    """`["output_throughput:max", "p99_ttft_ms:min"]` -> objective dicts."""
    out = []
    for item in items:
        metric, _, direction = item.partition(":")
        full = {"max": "maximize", "min": "minimize"}.get(direction, direction)
        if full not in ("maximize", "minimize"):
            raise SpecError(f"--objective {item!r}: expected METRIC:max or METRIC:min")
        out.append({"metric": metric, "direction": full})
    return out


def parse_precision(text: str) -> dict[str, float] | str:
    """`--precision off` -> "off" (one batch per trial, or --repeats; the spec's `precision:
    off`); `throughput=0.05,slo=0.1,max_s=240,max_batches=20` (any of them) -> the fields of
    `bench.Precision`."""
    if text.strip() == "off":
        return "off"
    problem = (
        f"--precision {text!r}: expected off, or KEY=NUMBER pairs of throughput, slo, max_s, "
        "max_batches (e.g. throughput=0.05,max_s=120)"
    )
    return parse_pairs(text.split(","), "--precision", problem)

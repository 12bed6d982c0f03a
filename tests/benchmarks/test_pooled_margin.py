"""The pooled margin (benchmarks/pooled_margin.py): a config's runs pooled with the engine
model's prediction of it, made before it ran. Not the product's: export judges the runs alone
(docs/prediction.md, "The pooled margin"); the benchmarks compare the two."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from builders import record

from autotune.answer.export import choose_export
from autotune.answer.repeats import Noise, config_key
from autotune.answer.selection import MARGIN_Z, margin, pick
from autotune.store import TrialRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pooled_margin import (
    POOL_MIN,
    POOLED,
    choose_pooled_export,
    estimate,
    model_errors,
    pooled_clear_of_noise,
    pooled_margin,
    pooled_pick,
)

Make = Callable[..., TrialRecord]


@pytest.fixture
def trial() -> Make:
    """`trial(number, throughput, ttft, tpot, status=, role=, constraints=, config=)`."""
    return record


def numbers(trials: Sequence[TrialRecord]) -> list[int]:
    return [t.number for t in trials]


def slo_trial(trial: Make, number: int, throughput: float, tpot_ratio: float) -> TrialRecord:
    """A trial under a p99 TPOT bound of 10 ms, measured at `tpot_ratio` of it."""
    cons = {"failed": 0.0, "error_rate": -0.05, "p99_tpot_ms": tpot_ratio - 1.0}
    return trial(number, throughput, tpot=10 * tpot_ratio, constraints=cons)


def modelled(t: TrialRecord, predicted_tpot: float) -> TrialRecord:
    """`t` as its own config (params), with the engine model's p99 TPOT prediction made
    before it ran."""
    interval = [predicted_tpot * 0.9, predicted_tpot, predicted_tpot * 1.1]
    return t.model_copy(
        update={"params": {"n": t.number}, "prediction": {"metrics": {"p99_tpot_ms": interval}}}
    )


def scored_others(trial: Make, error: float, count: int = POOL_MIN) -> list[TrialRecord]:
    """`count` trials far inside a 10 ms TPOT bound, each measured `error` (log) above what
    the model predicted for it before it ran; a throughput no pick would choose."""
    out = []
    for i in range(count):
        t = slo_trial(trial, 10 + i, 100, 0.5)
        out.append(modelled(t, 5.0 * math.exp(-error if i % 2 else error)))
    return out


def test_a_model_that_agrees_with_a_run_near_its_bound_lets_it_be_picked(trial: Make) -> None:
    # One run 4% inside the TPOT bound is 0.45 sd of a 0.09 noise: not clear of it alone. The
    # model, whose predictions of other configs were within 2%, put this config at 95% of the
    # bound before it ran: two witnesses, the estimate's sd 0.02 and its margin 2.4 sd.
    first = [("output_throughput", "maximize")]
    near = modelled(slo_trial(trial, 0, 1000, 0.96), 9.5)
    safe = modelled(slo_trial(trial, 1, 900, 0.80), 8.0)
    others = scored_others(trial, 0.02)
    trials = [near, safe, *others]
    noise = {"p99_tpot_ms": Noise(0.09, 4)}
    errors = model_errors(trials)
    x, sd = estimate(near, "p99_tpot_ms", 0.09, errors)
    assert sd == pytest.approx(1 / math.sqrt(1 / 0.09**2 + 1 / 0.02**2))
    assert math.log(9.5) < x < math.log(9.6)  # pulled toward the surer witness
    assert margin(near, noise) < MARGIN_Z < pooled_margin(near, noise, (), errors)
    assert pick(trials, first, noise=noise).number == 1  # the measurement alone
    assert pooled_pick(trials, first, noise, errors).number == 0


def test_a_model_that_puts_the_config_past_its_bound_holds_it_back(trial: Make) -> None:
    # Measured 25% inside (2.8 sd of a 0.1 noise: clear alone), but the model, right within
    # 5% elsewhere, said 1.1x the bound: the estimate sits near the bound and is not clear.
    doubted = modelled(slo_trial(trial, 0, 1000, 0.75), 11.0)
    trials = [doubted, *scored_others(trial, 0.05)]
    noise = {"p99_tpot_ms": Noise(0.1, 4)}
    errors = model_errors(trials)
    assert margin(doubted, noise) > MARGIN_Z > pooled_margin(doubted, noise, (), errors)


def test_a_model_that_was_wrong_elsewhere_barely_moves_the_estimate(trial: Make) -> None:
    # Errors of a factor 2 on other configs: the prediction weighs 0.02 against the run.
    t = modelled(slo_trial(trial, 0, 1000, 0.96), 5.0)
    errors = model_errors([t, *scored_others(trial, math.log(2.0))])
    x, sd = estimate(t, "p99_tpot_ms", 0.1, errors)
    assert x == pytest.approx(math.log(9.6), abs=0.02)
    assert sd == pytest.approx(0.1, rel=0.02)


def test_the_model_pools_in_only_once_it_was_scored_on_enough_other_configs(
    trial: Make,
) -> None:
    t = modelled(slo_trial(trial, 0, 1000, 0.96), 9.5)
    few = model_errors([t, *scored_others(trial, 0.02, POOL_MIN - 1)])
    assert estimate(t, "p99_tpot_ms", 0.09, few) == (pytest.approx(math.log(9.6)), 0.09)
    # Its own config's runs are no score of the model: a re-measure of it counts for nothing.
    again = [t.model_copy(update={"number": n}) for n in range(20, 20 + POOL_MIN)]
    assert estimate(t, "p99_tpot_ms", 0.09, model_errors([t, *again]))[1] == 0.09
    # A re-measure was predicted by a model that had seen its config run: no score either.
    first = scored_others(trial, 0.3, 1)[0]
    rerun = modelled(first.model_copy(update={"number": 30}), first.metric("p99_tpot_ms"))
    rerun = rerun.model_copy(update={"params": first.params})
    assert model_errors([rerun, first])["p99_tpot_ms"] == [(config_key(first), pytest.approx(-0.3))]
    # A config the model did not predict (the baseline, a study without screening): as measured.
    plain = slo_trial(trial, 5, 1000, 0.96)
    errors = model_errors([t, *scored_others(trial, 0.02)])
    assert estimate(plain, "p99_tpot_ms", 0.09, errors)[1] == 0.09


def test_a_config_that_measured_past_its_bound_is_never_held(trial: Make) -> None:
    # The model says 80% of the bound; the run measured 2% over it: it stays infeasible.
    over = modelled(slo_trial(trial, 0, 1000, 1.02), 8.0)
    fine = modelled(slo_trial(trial, 1, 500, 0.5), 5.0)
    trials = [over, fine, *scored_others(trial, 0.02)]
    noise = {"p99_tpot_ms": Noise(0.09, 4)}
    errors = model_errors(trials)
    assert pooled_margin(over, noise, (), errors) > MARGIN_Z  # the estimate alone would hold it
    held = pooled_clear_of_noise(trials, noise, (), errors) or []
    assert over.number not in numbers(held)
    assert pooled_pick(trials, [("output_throughput", "maximize")], noise, errors).number == 1


def test_the_pooled_export_differs_from_export_where_the_model_vouches_for_a_run(
    trial: Make,
) -> None:
    # Three runs of config 128 and one of 256 measure the noise (sd 0.09 of log); 256 measured
    # 4% inside its bound, too near for its one run, and the model, within 2% on every other
    # config, put it at 95% of the bound. Export deploys the config clear on its runs alone;
    # the pooled export, 256 (tests/cli/test_export_ties.py has export's side as a process).
    near = modelled(slo_trial(trial, 0, 1000, 0.96), 9.5)
    runs = [modelled(slo_trial(trial, n, 900, r), 8.0) for n, r in ((1, 0.8), (2, 0.9), (3, 0.72))]
    runs = [t.model_copy(update={"params": {"n": 1}}) for t in runs]
    trials = [near, *runs, *scored_others(trial, 0.02)]
    facts = {"objectives": [{"metric": "output_throughput", "direction": "maximize"}],
             "slos": {"p99_tpot_ms": 10.0}}  # fmt: skip
    assert choose_export(trials, facts)[0].number == 1
    chosen, how = choose_pooled_export(trials, facts)
    assert chosen.number == 0
    assert how == "pick max-throughput" + POOLED
    assert pick(trials, [("output_throughput", "maximize")]).number == 0  # no noise, no margin

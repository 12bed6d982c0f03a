"""Screening (autotune.study._screen): a study on an engine whose step time is a known model
predicts each trial before it runs, stores the prediction with it, and records a proposal
the model rules out as predicted_*, unlaunched, the sampler told the predicted values."""

from __future__ import annotations

import pytest

from autotune.space import SearchSpace
from autotune.study._screen import MAX_IN_A_ROW, predict_on, screen_on
from autotune.vocab.status import PREDICTED_STATUSES, TrialStatus
from study.fakes import MODEL_ENGINE_LOAD as LOAD
from study.fakes import MakeSpec, ModelEngine, run


@pytest.mark.parametrize("screen", ["on", "off"])
def test_a_screened_study_predicts_each_trial_before_it_runs(
    make_spec: MakeSpec, space: SearchSpace, screen: str
) -> None:
    slos = {"p99_ttft_ms": 400.0}  # a few slots queue the closed loop's 48 clients: TTFT grows
    spec = make_spec(trials=10, search="goal", sampler="random", seed=3, load=LOAD, slos=slos,
                     screen=screen)  # fmt: skip
    engine = ModelEngine(slos)
    result, trials = run(spec, space, engine)  # type: ignore[arg-type]
    launched = [t for t in trials if t.device_s is not None]
    assert len(launched) == 10
    predicted = [t for t in launched if t.prediction]
    screened = [t for t in trials if t.status in PREDICTED_STATUSES]
    if screen == "off":
        assert not predicted and not screened
        return
    # Every launched trial after the baseline was predicted, before its engine started.
    assert [t.number for t in predicted] == [t.number for t in launched[1:]]
    for t, started in zip(launched[1:], engine.started[1:], strict=True):
        assert t.prediction["at"] <= started
        assert t.prediction["trials"] >= 1
    # On an engine the model can describe exactly, its predictions hold.
    for t in predicted[2:]:
        low, mid, high = t.prediction["metrics"]["output_throughput"]
        assert mid == pytest.approx(t.metric("output_throughput"), rel=0.1)
        assert low < mid < high
    # What it ruled out was never launched, and the sampler was told the predicted values.
    assert screened, "seed 3 proposes configs the model rules out"
    for t in screened:
        assert t.status in (TrialStatus.PREDICTED_INFEASIBLE, TrialStatus.PREDICTED_WORSE)
        assert t.device_s is None and t.prediction["metrics"]
        assert t.values is not None
        assert t.values[0] == pytest.approx(t.prediction["metrics"]["output_throughput"][1])
    assert sum(result.skips.get(r, 0) for r in ("predicted_worse", "predicted_infeasible")) == len(
        screened
    )


def test_a_model_that_rules_out_every_config_never_ends_the_study(
    make_spec: MakeSpec, space: SearchSpace
) -> None:
    slos = {"p99_ttft_ms": 1.0}  # no config holds it: the model soon predicts each one misses
    spec = make_spec(trials=8, search="goal", sampler="random", seed=3, load=LOAD, slos=slos,
                     screen="on")  # fmt: skip
    result, trials = run(spec, space, ModelEngine(slos))  # type: ignore[arg-type]
    # Every slot of the budget was launched and measured: the measurement has the last word.
    launched = [t for t in trials if t.device_s is not None]
    assert len(launched) == 8 and not result.exhausted
    assert all(t.status == TrialStatus.OK and not t.feasible for t in launched)
    # Proposals were screened out, never more than MAX_IN_A_ROW between two launches.
    screened = [t.number for t in trials if t.status == TrialStatus.PREDICTED_INFEASIBLE]
    assert len(screened) >= MAX_IN_A_ROW
    runs, row = [], 0
    for t in sorted(trials, key=lambda t: t.number):
        row = row + 1 if t.number in screened else 0
        runs.append(row)
    assert max(runs) == MAX_IN_A_ROW


@pytest.mark.parametrize(
    "fields,predicts,screens",
    [
        ({}, True, True),  # the default: a goal search at a fixed load
        ({"search": "pareto"}, True, False),  # not benchmarked: predicted, never screened
        ({"search": "pareto", "screen": "on"}, True, True),
        ({"screen": "off"}, False, False),
        ({"scenario": "offline"}, False, False),  # a batch, not a load the model replays
        ({"capacity": {}, "slos": {"p99_ttft_ms": 500.0}}, False, False),
    ],
)
def test_auto_screens_a_goal_search_at_a_fixed_load(
    make_spec: MakeSpec, fields: dict[str, object], predicts: bool, screens: bool
) -> None:
    spec = make_spec(**{"search": "goal", **fields})
    assert (predict_on(spec), screen_on(spec)) == (predicts, screens)

"""autotune.search._told: what the sampler is told of the study's trials."""

from __future__ import annotations

import math

import optuna
import pytest

from autotune import store as keys
from autotune.search import make_sampler
from autotune.search._told import ToldSampler, log_ratio, view
from autotune.spec import TuneSpec

SLOS = ["p99_ttft_ms"]


def add(
    study: optuna.Study,
    seqs: int,
    throughput: float,
    ttft_ratio: float,
    at: float | None,
    failed: bool = False,
) -> None:
    """A finished trial of `max_num_seqs=seqs` as the recorder stores it (an SLO's constraint
    is `measured / bound - 1`)."""
    study.enqueue_trial({"max_num_seqs": seqs})
    trial = study.ask({"max_num_seqs": optuna.distributions.IntDistribution(1, 1024)})
    if not failed:
        trial.set_user_attr(keys.STATUS, "ok")
        trial.set_user_attr(keys.METRICS, {"output_throughput": throughput})
        trial.set_user_attr(keys.MEASURED_AT, at)
    trial.set_constraint("failed", 1.0 if failed else 0.0)
    trial.set_constraint("p99_ttft_ms", 1.0 if failed else ttft_ratio - 1.0)
    study.tell(trial, [0.0 if failed else throughput])


def test_an_slo_constraint_is_told_as_a_log_ratio_with_its_sign() -> None:
    for ratio in (0.3, 0.97, 1.0, 1.03, 143.0):
        told = log_ratio(ratio - 1.0)
        assert told == pytest.approx(math.log(ratio))
        assert (told <= 0) == (ratio - 1.0 <= 0)  # feasibility is unchanged
    assert log_ratio(-1.0) == pytest.approx(math.log(1e-3))  # a latency of 0: finite


def test_the_view_tells_log_ratios_and_leaves_the_stored_trials_alone() -> None:
    study = optuna.create_study(direction="maximize")
    add(study, 8, 100.0, 143.0, at=100.0)  # a queue: 143x the bound
    add(study, 64, 120.0, 0.96, at=200.0)  # just inside
    add(study, 256, 0.0, 0.0, at=None, failed=True)  # out of memory: nothing measured
    told = view(study, SLOS).get_trials(deepcopy=False)
    assert [t.constraints["p99_ttft_ms"] for t in told] == pytest.approx(
        [math.log(143.0), math.log(0.96), math.log(2.0)]
    )
    assert [t.constraints["failed"] for t in told] == [0.0, 0.0, 1.0]  # not an SLO: as stored
    assert [t.values for t in told] == [[100.0], [120.0], [0.0]]  # as measured
    stored = study.get_trials(deepcopy=False)
    assert [t.constraints["p99_ttft_ms"] for t in stored] == pytest.approx([142.0, -0.04, 1.0])


def test_objective_values_are_told_as_measured_even_on_a_drifting_host() -> None:
    study = optuna.create_study(direction="maximize")
    add(study, 8, 100.0, 0.9, at=0.0)
    add(study, 8, 92.0, 0.9 / 0.92, at=400.0)
    add(study, 64, 90.0, 1.1, at=500.0)
    add(study, 8, 80.0, 0.9 / 0.8, at=1000.0)  # the incumbent again, 20% slower
    told = view(study, SLOS).get_trials(deepcopy=False)
    assert [t.values[0] for t in told] == [100.0, 92.0, 90.0, 80.0]
    assert told[2].constraints["p99_ttft_ms"] == pytest.approx(math.log(1.1))


def test_every_study_with_slos_gets_the_view_random_never() -> None:
    def spec(**fields: object) -> TuneSpec:
        return TuneSpec.model_validate({"study": "s", "model": "m", **fields})

    slo = make_sampler(spec(search="pareto", slos={"p99_ttft_ms": 500}))
    assert isinstance(slo, ToldSampler) and slo.slos == ["p99_ttft_ms"]
    relative = make_sampler(spec(relative_slos={"p99_tpot_ms": 1.2}, remeasure="off"))
    assert isinstance(relative, ToldSampler) and relative.slos == ["p99_tpot_ms"]
    assert not isinstance(make_sampler(spec(search="pareto")), ToldSampler)
    assert not isinstance(make_sampler(spec(remeasure="on")), ToldSampler)
    random = make_sampler(spec(sampler="random", slos={"p99_ttft_ms": 500}))
    assert isinstance(random, optuna.samplers.RandomSampler)

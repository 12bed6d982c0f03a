"""Which sampler a study searches with, and what Optuna is told."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.search import _samplers, make_sampler, sampler_name, told_objectives
from autotune.search._told import ToldSampler
from autotune.spec import TuneSpec


def spec(**fields: object) -> TuneSpec:
    return TuneSpec.model_validate({"study": "s", "model": "m", **fields})


def test_goal_tells_the_first_objective_pareto_all() -> None:
    assert [o.metric for o in told_objectives(spec())] == ["output_throughput"]
    assert len(told_objectives(spec(search="pareto"))) == 3


def base(sampler: optuna.samplers.BaseSampler) -> optuna.samplers.BaseSampler:
    """The sampler that proposes: a goal search wraps it to tell it drift-corrected values."""
    return sampler.base if isinstance(sampler, ToldSampler) else sampler


def test_auto_is_gp_for_goal_and_tpe_for_pareto() -> None:
    assert sampler_name(spec()) == "gp"
    goal = make_sampler(spec())
    assert isinstance(goal, optuna.samplers.GPSampler)  # no SLO: told the values as measured
    slo = make_sampler(spec(slos={"p99_ttft_ms": 500}))
    assert isinstance(slo, ToldSampler) and isinstance(slo.base, optuna.samplers.GPSampler)
    pareto = make_sampler(spec(search="pareto"))
    assert isinstance(pareto, optuna.samplers.TPESampler)
    random = make_sampler(spec(sampler="random", remeasure="off"))
    assert isinstance(random, optuna.samplers.RandomSampler)


def test_without_scipy_or_torch_auto_falls_back_to_tpe(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_samplers, "_gp_available", lambda: False)
    assert sampler_name(spec()) == "tpe"
    assert "needs torch and scipy" in caplog.text
    assert sampler_name(spec(sampler="gp")) == "gp"  # asked for by name: no silent change


def test_an_unknown_sampler_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sampler"):
        spec(sampler="cmaes")

"""The study tests' fixtures: summaries and trial records (built by `builders`), specs, spaces
and the scripted measure."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import make_summary, record

from autotune.bench import Summary
from autotune.space import SearchSpace, load_space
from autotune.spec import TuneSpec
from autotune.store import TrialRecord
from study.fakes import STUDY, FakeMeasure


@pytest.fixture
def summary_of() -> Callable[..., Summary]:
    """`summary_of(throughput=..., ttft_p99=..., tpot_p99=..., completed=..., errors=...)`."""
    return make_summary


@pytest.fixture
def trial() -> Callable[..., TrialRecord]:
    """`trial(number, throughput, ttft, tpot, status=, role=, constraints=, config=)`."""
    return record


# --- the runner's fixtures, shared by test_runner and test_lanes ---


@pytest.fixture
def space() -> SearchSpace:
    return load_space("cpu-quick")


@pytest.fixture
def make_spec(tiny_model: Path, tmp_path: Path) -> Callable[..., TuneSpec]:
    def make(**fields: Any) -> TuneSpec:
        data: dict[str, Any] = {
            "study": STUDY,
            "model": str(tiny_model),
            "space": "cpu-quick",
            "root": tmp_path / "studies",
            "trials": 3,
            "sampler": "random",
            # The runner's tests read every objective's value as Optuna was told it.
            "search": "pareto",
            **fields,
        }
        return TuneSpec.model_validate(data)

    return make


@pytest.fixture
def measure(summary_of: Callable[..., Summary]) -> FakeMeasure:
    return FakeMeasure(summary_of)

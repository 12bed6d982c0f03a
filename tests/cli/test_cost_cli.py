"""`--device-cost-per-hour`: each trial's cost of a million output tokens, as an objective."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import one_error_line

from autotune.store import Cost, StudyStore
from cli.conftest import invoke, tune_args


def test_cost_per_mtok_is_measured_and_minimized(tiny_model: Path, tmp_path: Path) -> None:
    argv = tune_args(
        tiny_model, tmp_path, "c", "--trials", "2", "--sampler", "random",
        "--device-cost-per-hour", "3.6", "--objective", "cost_per_mtok:min",
    )  # fmt: skip
    result = invoke(*argv)
    assert result.exit_code == 0, result.output
    store = StudyStore(f"sqlite:///{tmp_path / 'c' / 'study.db'}", create=False)
    assert [d.name for d in store.load("c").directions] == ["MINIMIZE"]
    launched = [t for t in store.trials("c") if t.device_s is not None]
    assert len(launched) == 2
    for t in launched:
        # 3.6 per hour is 0.001 per second: a million tokens at R tok/s cost 1000 / R.
        assert t.metrics["cost_per_mtok"] == pytest.approx(1000 / t.metrics["output_throughput"])
        assert t.values == [t.metrics["cost_per_mtok"]]
        assert t.engine.cost == Cost(per_device_hour=3.6, devices=1)
    shown = invoke("show", "c", "--root", tmp_path, "--format", "json")
    assert '"cost_per_mtok"' in shown.output


@pytest.mark.parametrize(
    ("more", "needle"),
    [
        (["--objective", "cost_per_mtok:min"], "cost_per_mtok needs --device-cost-per-hour"),
        (["--device-cost-per-hour", "-1"], "--device-cost-per-hour -1.0: expected a number > 0"),
    ],
)
def test_cost_without_a_price_is_one_error_line(
    tiny_model: Path, tmp_path: Path, more: list[str], needle: str
) -> None:
    result = invoke(*tune_args(tiny_model, tmp_path, "bad", *more))
    assert needle in one_error_line(result)
    assert not (tmp_path / "bad").exists()

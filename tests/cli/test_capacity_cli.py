"""`autotune tune --load capacity` against the fake engine: the search runs on each trial's
one engine and its result becomes the trial's objective (tests/e2e has the real engine)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from autotune.store import StudyStore

TuneArgv = Callable[..., list[str | Path]]


def capacity_argv(tune_argv: TuneArgv, study: str, *more: str) -> list[str | Path]:
    """A capacity study's `tune` line: without the fixed-load `--rate` of the others (the
    search sets each level's rate; a --rate beside it is refused)."""
    argv = tune_argv(study, "--load", "capacity", *more)
    at = argv.index("--rate")
    return argv[:at] + argv[at + 2 :]


def test_capacity_is_each_trials_objective(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object]
) -> None:
    argv = capacity_argv(tune_argv, "cap", "--trials", "2", "--slo", "p99_ttft_ms=60000")
    result = cli(*argv)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    root = tmp_path / "studies"
    store = StudyStore(f"sqlite:///{root / 'cap' / 'study.db'}", create=False)
    first = store.study_facts("cap").objectives[0]
    assert (first.metric, first.direction) == ("capacity_rps", "maximize")
    for trial in [t for t in store.trials("cap") if t.device_s is not None]:
        assert trial.status == "ok"
        search = json.loads((Path(trial.trial_dir or "") / "capacity.json").read_text())
        assert search["levels"][0]["rate"] is None  # the saturation probe
        assert trial.metrics["capacity_rps"] == search["rate"] > 0
        assert trial.values is not None and trial.values[0] == search["rate"]
        runs = sorted((Path(trial.trial_dir or "") / "levels").glob("run-*.jsonl"))
        assert len(runs) == sum(level["runs"] for level in search["levels"])
    shown = cli("show", "cap", "--root", root)
    assert shown.exit_code == 0, shown.output  # type: ignore[attr-defined]
    assert "capacity req/s" in shown.output  # type: ignore[attr-defined]


def test_capacity_without_an_slo_is_one_error_line(
    tune_argv: TuneArgv, cli: Callable[..., object]
) -> None:
    result = cli(*capacity_argv(tune_argv, "x"))
    assert result.exit_code == 2  # type: ignore[attr-defined]
    (line,) = result.output.strip().splitlines()  # type: ignore[attr-defined]
    assert "a capacity search needs at least one SLO" in line


def test_an_unknown_load_mode_is_one_error_line(
    tune_argv: TuneArgv, cli: Callable[..., object]
) -> None:
    result = cli(*tune_argv("x", "--load", "max"))
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert result.output.strip() == "error: --load 'max': expected fixed or capacity"  # type: ignore[attr-defined]


def test_size_answers_the_fewest_devices_for_a_rate(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object]
) -> None:
    argv = capacity_argv(tune_argv, "sz", "--trials", "2", "--slo", "p99_ttft_ms=60000")
    assert cli(*argv).exit_code == 0  # type: ignore[attr-defined]
    root = tmp_path / "studies"
    store = StudyStore(f"sqlite:///{root / 'sz' / 'study.db'}", create=False)
    capacities = {
        t.number: t.metrics["capacity_rps"] for t in store.trials("sz") if t.device_s is not None
    }
    best = max(capacities.values())
    rate = 2.5 * best  # three engines of the best config, one device each
    result = cli("size", "sz", "--root", root, "--rate", f"{rate}", "--devices-per-host", "2",
                 "--device-cost-per-hour", "2")  # fmt: skip
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    out = result.output  # type: ignore[attr-defined]
    assert "within p99_ttft_ms <= 60,000" in out
    assert "fewest devices: 3 (trial" in out
    assert "3 x 1 device(s) = 3 devices on 2 host(s), 6.00 per hour" in out
    fixed = tune_argv("nocap", "--trials", "1")
    assert cli(*fixed).exit_code == 0  # type: ignore[attr-defined]
    refused = cli("size", "nocap", "--root", root, "--rate", "1")
    assert refused.exit_code == 2  # type: ignore[attr-defined]
    assert "size needs a study run with --load capacity" in refused.output  # type: ignore[attr-defined]

"""`autotune tune --warm-start OTHER`: a new study runs another study's Pareto configs first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autotune.answer.selection import pareto_front, study_objectives
from autotune.store import StudyStore

TuneArgv = Callable[..., list[str | Path]]


def _trials(root: Path, study: str) -> StudyStore:
    return StudyStore(f"sqlite:///{root / study / 'study.db'}", create=False)


def test_warm_start_queues_the_other_studys_front_after_the_baseline(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object]
) -> None:
    root = tmp_path / "studies"
    first = cli(*tune_argv("first", "--trials", "4", "--sampler", "random"))
    assert first.exit_code == 0, first.output  # type: ignore[attr-defined]
    store = _trials(root, "first")
    front = pareto_front(store.trials("first"), study_objectives(store.study_facts("first")))
    assert front

    argv = tune_argv("second", "--trials", str(len(front) + 2), "--warm-start", "first")
    second = cli(*argv, "--sampler", "random", "--seed", "9")
    assert second.exit_code == 0, second.output  # type: ignore[attr-defined]
    trials = _trials(root, "second").trials("second")
    assert trials[0].role == "baseline"
    warm = [t for t in trials if t.role == "warm_start"]
    baseline_is_on_front = any(t.role == "baseline" for t in front)
    expected = [t for t in front if t.role != "baseline"] if baseline_is_on_front else front
    assert [t.params for t in warm] == [t.params for t in expected]
    assert [t.number for t in warm] == list(range(1, len(warm) + 1))  # run right after trial 0
    assert all(t.status == "ok" for t in warm)


def test_warm_start_from_another_space_is_one_error_line(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object]
) -> None:
    assert cli(*tune_argv("a", "--trials", "1")).exit_code == 0  # type: ignore[attr-defined]
    result = cli(*tune_argv("b", "--trials", "1", "--warm-start", "a", "--space", "cpu"))
    assert result.exit_code != 0  # type: ignore[attr-defined]
    (line,) = result.output.strip().splitlines()[-1:]  # type: ignore[attr-defined]
    assert "--warm-start a: it searched space 'cpu-quick', not 'cpu'" in line
    assert result.exit_code == 2 and not (tmp_path / "studies" / "b").exists()  # type: ignore[attr-defined]

"""Many tuning machines on one study: `autotune tune` and `autotune worker` as processes on a
real PostgreSQL, each playing another host (`AUTOTUNE_WORKER_HOST`) with its own trial folders.
The fake engine stands in for vLLM (tests/e2e has the real-engine run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import fresh_postgres, processes_mentioning

from autotune.store import StudyStore, TrialRecord

TuneArgv = Callable[..., list[str | Path]]
SLOW = {"FAKE_ENGINE_STARTUP_S": "0.5", "FAKE_ENGINE_STEP_S": "0.1"}


@pytest.fixture
def pg() -> Iterator[str]:
    with fresh_postgres() as url:
        yield url


def start(argv: list[str | Path], host: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **SLOW, "AUTOTUNE_WORKER_HOST": host, **env},
    )


def launched(url: str, study: str) -> list[TrialRecord]:
    return [t for t in StudyStore(url, create=False).trials(study) if t.device_s is not None]


def trial_dirs(root: Path, study: str) -> set[int]:
    return {int(p.name.split("-")[1]) for p in (root / study).glob("trial-*")}


def wait_until(
    check: Callable[[], object], process: subprocess.Popen[str], timeout_s: float = 300
) -> None:
    """Wait for `check()`; a `process` that exits first fails the test at once, with its output.
    The deadline bounds a hang only."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if process.poll() is not None:
            out, _ = process.communicate()
            command = f"autotune {process.args[3]}"
            pytest.fail(f"`{command}` exited ({process.returncode}) while waited on:\n{out}")
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_two_workers_run_exactly_the_budget_between_them(
    tune_argv: TuneArgv, tmp_path: Path, pg: str
) -> None:
    root_a, root_b = tmp_path / "a", tmp_path / "b"
    tuner = start(
        [*tune_argv("w", "--trials", "6", "--storage", pg, "--root", root_a)], "machine-a"
    )
    wait_until(lambda: (root_a / "w" / "trial-0000").exists(), tuner)
    worker = start(["worker", "--study", "w", "--storage", pg, "--root", root_b], "machine-b")
    out_a, _ = tuner.communicate(timeout=600)
    out_b, _ = worker.communicate(timeout=600)
    assert tuner.returncode == 0, out_a
    assert worker.returncode == 0, out_b

    trials = launched(pg, "w")
    assert len(trials) == 6 and all(t.status == "ok" for t in trials)
    assert sorted(t.slot for t in trials) == [1, 2, 3, 4, 5, 6]
    hosts = ("machine-a", "machine-b")
    by_host = {h: {t.number for t in trials if t.worker.host == h} for h in hosts}
    assert by_host["machine-a"] and by_host["machine-b"], by_host  # both worked
    assert by_host["machine-a"] == trial_dirs(root_a, "w")  # each trial ran on one machine
    assert by_host["machine-b"] == trial_dirs(root_b, "w")
    # No config twice, but for the goal search's re-measure of its incumbent (on purpose).
    fresh = [t for t in trials if t.role != "remeasure"]
    assert len({tuple(sorted(t.params.items())) for t in fresh}) == len(fresh)
    assert all(t.remeasure_of is not None for t in trials if t.role == "remeasure")
    assert all(t.worker.pid for t in trials)
    assert processes_mentioning(str(tmp_path)) == []


def test_a_killed_workers_trial_is_recovered_by_the_other(
    tune_argv: TuneArgv, tmp_path: Path, pg: str
) -> None:
    root_a, root_b = tmp_path / "a", tmp_path / "b"
    # Stale after 12 s (6 beats). With 0.5 s (stale after 3 s) a live tuner whose beat came 3 s
    # late on a busy host would have its running trial settled as an orphan by the worker; only
    # the killed worker's trial may be recovered.
    beat = {"AUTOTUNE_HEARTBEAT_S": "2"}
    tuner = start(
        [*tune_argv("k", "--trials", "4", "--storage", pg, "--root", root_a)], "machine-a", **beat
    )
    wait_until(lambda: (root_a / "k" / "trial-0000").exists(), tuner)
    worker = start(
        ["worker", "--study", "k", "--storage", pg, "--root", root_b], "machine-b", **beat
    )
    wait_until(lambda: list((root_b / "k").glob("trial-*/engine.pid")), worker)
    (killed_dir,) = [p.parent for p in (root_b / "k").glob("trial-*/engine.pid")]
    killed = int(killed_dir.name.split("-")[1])
    worker.send_signal(signal.SIGKILL)
    worker.communicate(timeout=120)

    out, _ = tuner.communicate(timeout=600)
    assert tuner.returncode == 0, out
    store = StudyStore(pg, create=False)
    trials = {t.number: t for t in store.trials("k")}
    assert trials[killed].status == "interrupted" and trials[killed].state == "fail"
    runs = launched(pg, "k")
    assert len(runs) == 4 and all(t.status == "ok" for t in runs)
    retried = [t for t in runs if t.params == trials[killed].params]
    assert [t.worker.host for t in retried] == ["machine-a"]  # run again, once, elsewhere
    assert sorted(t.slot for t in runs) == [1, 2, 3, 4]
    deadline = time.monotonic() + 60  # the killed worker's engine dies with it (parent death)
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = processes_mentioning(str(tmp_path))
    assert left == [], [p.cmdline() for p in left]


def test_worker_on_an_unknown_study_is_one_error_line(pg: str, cli: Callable[..., object]) -> None:
    result = cli("worker", "--study", "nope", "--storage", pg)
    assert result.exit_code == 2  # type: ignore[attr-defined]
    (line,) = result.output.strip().splitlines()  # type: ignore[attr-defined]
    assert line.startswith("error: storage") or line.startswith("error: no study named 'nope'")
    assert "nope" in line


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_parallel_is_one_error_line(
    value: str, tune_argv: TuneArgv, cli: Callable[..., object]
) -> None:
    result = cli(*tune_argv("p", "--parallel", value))
    assert result.exit_code == 2  # type: ignore[attr-defined]
    (line,) = result.output.strip().splitlines()  # type: ignore[attr-defined]
    assert line == f"error: --parallel {value!r}: expected a number >= 1 or auto"


def test_parallel_beyond_the_cores_is_one_error_line(
    tune_argv: TuneArgv, cli: Callable[..., object]
) -> None:
    too_many = str((os.cpu_count() or 1) + 1)
    result = cli(*tune_argv("p", "--parallel", too_many))
    assert result.exit_code == 2  # type: ignore[attr-defined]
    (line,) = result.output.strip().splitlines()  # type: ignore[attr-defined]
    assert line.startswith("error: cannot split") and f"into {too_many} slots" in line


def test_tune_parallel_runs_trials_side_by_side_and_records_their_cores(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object]
) -> None:
    result = cli(*tune_argv("two", "--trials", "4", "--parallel", "2"))
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert "2 at a time on cores" in result.output  # type: ignore[attr-defined]
    url = f"sqlite:///{tmp_path / 'studies' / 'two' / 'study.db'}"
    trials = launched(url, "two")
    assert len(trials) == 4 and all(t.status == "ok" for t in trials)
    binds = {t.lease_env["VLLM_CPU_OMP_THREADS_BIND"] for t in trials}
    assert len(binds) == 2  # the two lanes' disjoint core sets
    assert {t.worker.devices for t in trials} == {"0", "1"}
    assert all(not t.env for t in trials)  # the space sets no env: the lease is not the config's
    assert processes_mentioning(str(tmp_path)) == []
    # The deployed config runs on whatever cores its server gets, not on one lane's lease.
    out = tmp_path / "best.yaml"
    exported = cli("export", "two", "--root", str(tmp_path / "studies"), "-o", str(out))
    assert exported.exit_code == 0, exported.output  # type: ignore[attr-defined]
    assert out.exists() and not out.with_suffix(".env").exists()
    assert "VLLM_CPU_OMP_THREADS_BIND" not in out.read_text()

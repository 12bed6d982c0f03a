"""Fault injection at the user's level: `autotune tune` as a process, killed, interrupted,
given a broken or locked store. No finished trial may be lost or counted twice, and no engine
may outlive the tuner."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from support import processes_mentioning, wait_for

from autotune.store import StudyStore, TrialRecord
from autotune.vocab import layout

TuneArgv = Callable[..., list[str | Path]]
# Slow enough that the test can catch the tuner mid-trial; only the process under test is slow
# (a resume runs in-process on the fast fake engine that the cli conftest sets up).
SLOW = {"FAKE_ENGINE_STARTUP_S": "0.5", "FAKE_ENGINE_STEP_S": "0.1"}


def start_tuner(argv: list[str | Path], **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **SLOW, **env},
    )


def trials_of(root: Path, study: str) -> list[TrialRecord]:
    return StudyStore(f"sqlite:///{root / study / 'study.db'}", create=False).trials(study)


def engines_under(root: Path) -> list[psutil.Process]:
    return processes_mentioning(str(root))


def assert_no_engine_left(root: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while engines_under(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engines_under(root) == []


def _until_in(path: Path, text: str, proc: subprocess.Popen[str]) -> None:
    """Wait for `text` in the file `path`; the tuner `proc` exiting first fails at once."""
    deadline = time.monotonic() + 300  # bounds a hang
    while text not in path.read_text(errors="replace"):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"{text!r} never in {path}"
        time.sleep(0.05)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "studies"
    for proc in engines_under(tmp_path):  # keep the machine clean even when a test failed
        proc.kill()


def test_tuner_killed_mid_trial_then_resumed(
    tune_argv: TuneArgv, root: Path, cli: Callable[..., object]
) -> None:
    argv = tune_argv("k", "--trials", "3", "--sampler", "random")
    tuner = start_tuner(argv)
    wait_for(root / "k" / "trial-0001" / "engine.pid", tuner)
    tuner.kill()  # SIGKILL: no handler runs, no teardown in the tuner
    tuner.wait()
    assert_no_engine_left(root)  # the engine got the parent-death signal

    before = trials_of(root, "k")
    assert before[0].status == "ok" and before[1].state == "running"

    resumed = cli(*argv)  # in-process, on the fast fake engine
    assert resumed.exit_code == 0, resumed.output  # type: ignore[attr-defined]
    after = trials_of(root, "k")
    assert after[0].model_dump() == before[0].model_dump()  # the finished trial is untouched
    assert after[1].status == "interrupted" and after[1].state == "fail"
    retry = [t for t in after if t.params == before[1].params and t.number != 1]
    assert len(retry) == 1 and retry[0].status == "ok"
    assert [t.role for t in after].count("baseline") == 1
    assert len([t for t in after if t.device_s is not None]) == 3  # the budget, no more
    assert_no_engine_left(root)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_tears_down_records_and_summarizes(
    tune_argv: TuneArgv, root: Path, sig: signal.Signals, cli: Callable[..., object]
) -> None:
    argv = tune_argv("i", "--trials", "3", "--sampler", "random")
    tuner = start_tuner(argv)
    engine_log = root / "i" / "trial-0001" / "engine.log"
    wait_for(engine_log, tuner)
    _until_in(engine_log, "Starting vLLM server", tuner)  # mid-trial: its engine serves
    tuner.send_signal(sig)
    for _ in range(6 if sig == signal.SIGTERM else 0):  # a scheduler repeats SIGTERM: no 143
        time.sleep(0.05)
        tuner.send_signal(sig)
    out, _ = tuner.communicate(timeout=600)  # bounds a hang
    assert tuner.returncode == 130, out
    assert "interrupted" in out and "1 measured" in out
    assert "Traceback" not in out
    # The tuner tore its engine down itself before it exited (the teardown clears the pid
    # file once the whole group is gone), not the engine's parent-death signal after it.
    assert not (root / "i" / "trial-0001" / "engine.pid").exists()
    assert_no_engine_left(root)
    trials = trials_of(root, "i")
    assert [t.status for t in trials] == ["ok", "interrupted"]

    resumed = cli(*argv)  # in-process, on the fast fake engine
    assert resumed.exit_code == 0, resumed.output  # type: ignore[attr-defined]
    trials = trials_of(root, "i")
    assert len([t for t in trials if t.status == "ok"]) == 3


def test_corrupt_database_is_refused_and_left_as_it_was(
    tune_argv: TuneArgv, root: Path, cli: Callable[..., object]
) -> None:
    db = root / "c" / "study.db"
    db.parent.mkdir(parents=True)
    garbage = b"this is not a database\x00" * 100
    db.write_bytes(garbage)
    result = cli(*tune_argv("c", "--trials", "1"))
    assert result.exit_code == 2  # type: ignore[attr-defined]
    (line,) = result.output.strip().splitlines()[-1:]  # type: ignore[attr-defined]
    assert line.startswith("error: storage sqlite:") and "not a database" in line
    assert db.read_bytes() == garbage


def test_malformed_space_on_an_existing_study_changes_nothing(
    tune_argv: TuneArgv, root: Path, tmp_path: Path, cli: Callable[..., object]
) -> None:
    result = cli(*tune_argv("m", "--trials", "1"))
    assert result.exit_code == 0  # type: ignore[attr-defined]
    db = root / "m" / "study.db"
    before = db.read_bytes()
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nparameters:\n  - {name: max_num_seqs, type: int, low: 9}\n")
    result = cli(*tune_argv("m", "--trials", "2", "--space", bad))
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert "parameters[0]" in result.output  # type: ignore[attr-defined]
    assert db.read_bytes() == before


def test_locked_database_waits_out_a_short_lock(tune_argv: TuneArgv, root: Path) -> None:
    argv = tune_argv("l", "--trials", "2", "--sampler", "random")
    tuner = start_tuner(argv, AUTOTUNE_SQLITE_TIMEOUT_S="20")
    wait_for(root / "l" / "trial-0001" / "engine.pid", tuner)
    with sqlite3.connect(root / "l" / "study.db") as other:
        other.execute("BEGIN EXCLUSIVE")  # e.g. another tool writing
        # Trial 1 ends (its outcome is written before it is recorded) and waits to be recorded.
        wait_for(root / "l" / "trial-0001" / layout.MEASUREMENT, tuner)
        time.sleep(0.5)
        other.rollback()
    out, _ = tuner.communicate(timeout=600)
    assert tuner.returncode == 0, out
    assert [t.status for t in trials_of(root, "l")] == ["ok", "ok"]


def test_measured_trial_survives_a_store_that_stays_locked(
    tune_argv: TuneArgv, root: Path, cli: Callable[..., object]
) -> None:
    argv = tune_argv("x", "--trials", "2", "--sampler", "random")
    tuner = start_tuner(argv, AUTOTUNE_SQLITE_TIMEOUT_S="1")
    wait_for(root / "x" / "trial-0001" / "engine.pid", tuner)
    other = sqlite3.connect(root / "x" / "study.db")
    other.execute("BEGIN EXCLUSIVE")
    try:
        out, _ = tuner.communicate(timeout=600)
    finally:
        other.rollback()
        other.close()
    assert tuner.returncode == 1, out
    message = " ".join(out.split())
    assert "trial 1 was measured but could not be recorded" in message
    assert "database is locked" in message, message
    assert (root / "x" / "trial-0001" / "measurement.json").is_file()
    assert_no_engine_left(root)

    resumed = cli(*argv)  # in-process, on the fast fake engine
    assert resumed.exit_code == 0, resumed.output  # type: ignore[attr-defined]
    trials = trials_of(root, "x")
    assert [t.status for t in trials] == ["ok", "ok"]  # recorded from its folder, not rerun
    assert trials[1].metrics["completed"] == 8
    assert not (root / "x" / "trial-0002").exists()  # the budget was met: nothing re-measured


def test_repair_retries_each_oom_once_with_less_memory(
    tune_argv: TuneArgv,
    root: Path,
    tmp_path: Path,
    cli: Callable[..., object],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    space = tmp_path / "kv.yaml"
    space.write_text(
        "name: kv\nplatform: cpu\nfixed: {enforce_eager: true}\nparameters:\n"
        "  - {name: kv_cache_mib, type: int, option: kv_cache_memory_bytes, scale: 1048576,\n"
        "     low: 256, high: 4096, step: 256, baseline: 256}\n"
        "  - {name: max_num_seqs, type: categorical, choices: [16, 64], baseline: 64}\n"
    )
    # TPE over every objective, whose seed 2 proposes KV sizes above the OOM line.
    argv = tune_argv(
        "r", "--trials", "6", "--space", space, "--repair", "--seed", "2", "--search", "pareto"
    )
    monkeypatch.setenv("FAKE_ENGINE_OOM_ABOVE", str(2048 * 2**20))
    result = cli(*argv)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    trials = trials_of(root, "r")
    ooms = [t for t in trials if t.status == "oom" and t.role != "repair"]
    assert ooms, "seed 2 proposes KV sizes above 2 GiB"
    for oom in ooms:
        (repair,) = [t for t in trials if t.repair_of == oom.number]
        assert repair.role == "repair" and repair.number > oom.number
        assert repair.params["kv_cache_mib"] < oom.params["kv_cache_mib"]
        assert repair.params["max_num_seqs"] == oom.params["max_num_seqs"]
    assert not [t for t in trials if t.repair_of is not None and t.role != "repair"]
    shown = cli("show", "r", "--all", "--root", root)
    assert f"(repair of {ooms[0].number})" in shown.output  # type: ignore[attr-defined]


def test_two_tuners_on_one_host_take_turns_on_its_cores(tune_argv: TuneArgv, root: Path) -> None:
    # Both used to print "1 at a time on cores 0-1" and run their engines at the same time,
    # each measuring the other's load. Now whichever asks while the other holds the cores
    # waits, and says so: the second when it starts during the first's trial, or the first,
    # when the second took the cores between two of its trials (a slow start on a busy host).
    first = start_tuner(tune_argv("one", "--trials", "4", "--sampler", "random"))
    wait_for(root / "one" / "trial-0000" / "engine.pid", first)
    second = start_tuner(tune_argv("two", "--trials", "2", "--sampler", "random"))
    out_first, _ = first.communicate(timeout=600)
    out_second, _ = second.communicate(timeout=600)
    assert first.returncode == 0, out_first
    assert second.returncode == 0, out_second
    waited = "warning: waiting for devices another process on this host holds ("
    assert waited in out_second or waited in out_first, (out_first, out_second)
    spans = {
        study: [(t.measured_at - t.device_s, t.measured_at) for t in trials_of(root, study)]
        for study in ("one", "two")
    }
    assert [len(spans["one"]), len(spans["two"])] == [4, 2], spans
    for a_start, a_end in spans["one"]:
        for b_start, b_end in spans["two"]:
            assert a_end <= b_start + 0.2 or b_end <= a_start + 0.2, spans  # never at once
    assert_no_engine_left(root)
